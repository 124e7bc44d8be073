"""A KafkaIcebergTopic as the render functions need it, and what names, owns and labels its
children: their bounded names, the owner reference, the labels of the job's objects."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from ..names import GROUP, KIND, PUBLISH, RESTART, VERSION
from ..resource import KafkaIcebergTopicSpec

MANAGED_BY = {"app.kubernetes.io/managed-by": "floe"}


def bounded_name(base: str, suffix: str, limit: int, key: str) -> str:
    """``base + suffix`` when it fits in ``limit`` characters; otherwise ``base`` is cut and a
    digest of ``key`` (the resource's full name) goes before the suffix, so two long names
    that share a prefix still get names of their own, and each action keeps its suffix."""
    name = f"{base}{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    keep = limit - len(suffix) - len(digest) - 1
    return f"{base[:keep].rstrip('-.')}-{digest}{suffix}"


@dataclass(frozen=True)
class Topic:
    """A KafkaIcebergTopic as the render functions need it."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: KafkaIcebergTopicSpec
    restart: str | None = None  # the RESTART annotation: a new value restarts the job
    rolled_back_to: int | None = None  # the stable generation whose spec runs (autoRollback)
    publish: str | None = None  # the PUBLISH annotation: a new value publishes table.branch

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Topic:
        meta = body["metadata"]
        return cls(
            meta["namespace"],
            meta["name"],
            meta.get("uid", ""),
            int(meta.get("generation", 1)),
            KafkaIcebergTopicSpec.model_validate(body.get("spec", {})),
            (meta.get("annotations") or {}).get(RESTART) or None,
            publish=(meta.get("annotations") or {}).get(PUBLISH) or None,
        )

    def running(self, status: dict[str, Any]) -> Topic:
        """The topic as its job runs it: while its generation is rolled back
        (``status.autoRollback``), with the last stable spec (``status.stable``)."""
        rolled = status.get("autoRollback") or {}
        stable = status.get("stable") or {}
        if rolled.get("failedGeneration") != self.generation or not stable.get("spec"):
            return self
        return replace(
            self,
            spec=KafkaIcebergTopicSpec.model_validate(stable["spec"]),
            rolled_back_to=int(stable["generation"]),
        )

    @property
    def child_name(self) -> str:
        """The SparkApplication's name (a DNS label: spark-operator names Services after it)."""
        return bounded_name(f"floe-{self.name}", "", 63, self.name)

    @property
    def label(self) -> str:
        """The resource's name as a label value (at most 63 characters)."""
        return bounded_name(self.name, "", 63, self.name)

    @property
    def writer(self) -> str:
        return f"{self.namespace}/{self.name}"


def owner_reference(topic: Topic) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": topic.name,
        "uid": topic.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_labels(topic: Topic) -> dict[str, str]:
    return {
        **MANAGED_BY,
        "app.kubernetes.io/name": "floe-job",
        "app.kubernetes.io/instance": topic.label,
        f"{GROUP}/topic": topic.label,
    }
