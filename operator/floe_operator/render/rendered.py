"""Everything the operator keeps for a resource, rendered once per spec and cached: the job
config and the children, each stamped with a hash of itself so that applying it again unchanged
is skipped."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from floe_sparkapp.config import JobConfig

from ..names import GROUP
from ..settings import OperatorSettings
from .application import spark_application
from .config import config_map, job_config
from .maintenance import cron_jobs
from .topic import Topic

APPLIED = f"{GROUP}/applied-hash"


def stamped(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A copy of the body annotated with a hash of itself, by which a later apply of the same
    body is seen to change nothing and is skipped (no write, no watch event)."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    body = copy.deepcopy(body)
    body["metadata"].setdefault("annotations", {})[APPLIED] = digest
    return body, digest


@dataclass(frozen=True)
class Desired:
    """Everything the operator keeps for a resource, rendered once per spec: the job config and
    the children, each stamped with the hash it is applied with."""

    job: JobConfig
    config_map: dict[str, Any]
    config_map_digest: str
    spark_application: dict[str, Any]
    fingerprint: str
    cron_jobs: tuple[tuple[dict[str, Any], str], ...]


class _Rendered:
    """The renderings of the resources' current specs: a visit of an unchanged resource
    renders nothing again."""

    def __init__(self, size: int = 4096):
        self.size = size
        self.lock = threading.Lock()
        self.entries: dict[tuple[Any, ...], Desired] = {}

    def get(self, topic: Topic, settings: OperatorSettings) -> Desired:
        key = (
            topic.uid,
            topic.generation,
            topic.namespace,
            topic.name,
            topic.restart,
            topic.spec.model_dump_json(),
            settings.model_dump_json(),
        )
        with self.lock:
            found = self.entries.get(key)
        if found is not None:
            return found
        config_map_body, config_map_digest = stamped(config_map(topic, settings))
        app = spark_application(topic, settings)
        rendered = Desired(
            job=job_config(topic, settings),
            config_map=config_map_body,
            config_map_digest=config_map_digest,
            spark_application=app,
            fingerprint=app["metadata"]["annotations"][f"{GROUP}/job-fingerprint"],
            cron_jobs=tuple(stamped(c) for c in cron_jobs(topic, settings)),
        )
        with self.lock:
            if len(self.entries) >= self.size:
                self.entries.clear()
            self.entries[key] = rendered
        return rendered


_rendered = _Rendered()


def desired(topic: Topic, settings: OperatorSettings) -> Desired:
    """The job config and the children of ``topic`` (see :class:`Desired`)."""
    return _rendered.get(topic, settings)
