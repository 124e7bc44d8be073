"""The job's config and the ConfigMap that holds it: the resource's spec, the writer, the
checkpoint, and where the pods mount the referenced Secrets."""

from __future__ import annotations

from typing import Any

from floe_sparkapp.catalog import hadoop_reaches
from floe_sparkapp.config import JobConfig
from floe_sparkapp.contract import SecretRef, TopicSpec

from ..settings import OperatorSettings
from .topic import Topic, job_labels, owner_reference

JOB_CONFIG_KEY = "job.json"
JOB_CONFIG_DIR = "/etc/floe/job"
KAFKA_SECRET_DIR = "/etc/floe/secrets/kafka"
CATALOG_SECRET_DIR = "/etc/floe/secrets/catalog"
REGISTRY_SECRET_DIR = "/etc/floe/secrets/registry"
# Checkpoints of tables on stores Spark has no Hadoop file system for in the image (GCS, ADLS):
# an emptyDir of the driver's.  The table's offsets decide where a job is: a new driver starts
# from them, as after any lost checkpoint.
DRIVER_CHECKPOINTS = "/var/lib/floe/checkpoints"


def checkpoint_location(topic: Topic, settings: OperatorSettings) -> str:
    spec = topic.spec
    if spec.spark.checkpoint_location:
        return spec.spark.checkpoint_location
    root = settings.checkpoint_root or (
        f"{spec.table.catalog.warehouse.rstrip('/')}/_floe/checkpoints"
        if spec.table.catalog.warehouse
        else None
    )
    if root is None:
        raise ValueError(
            "spec.spark.checkpointLocation is required when the catalog has no "
            "warehouse and the operator has no checkpoint root"
        )
    if not hadoop_reaches(root):
        root = f"file://{DRIVER_CHECKPOINTS}"
    if root.startswith("s3://"):
        root = "s3a://" + root[len("s3://") :]  # Spark's checkpoints go through Hadoop's S3A
    return f"{root}/{topic.namespace}/{topic.name}"


def job_config(topic: Topic, settings: OperatorSettings) -> JobConfig:
    """The job's config: the resource's spec as it is (but for the pods' settings), the
    writer, the generation, the checkpoint, and where the referenced Secrets are mounted."""
    spec = topic.spec
    return JobConfig.model_validate(
        {
            **{name: getattr(spec, name) for name in TopicSpec.model_fields},
            "writer": topic.writer,
            "generation": topic.generation,
            "checkpoint_location": checkpoint_location(topic, settings),
            "secrets": {
                what: {"dir": path}
                for what, (ref, path) in secret_refs(topic).items()
                if ref is not None
            },
        }
    )


def config_map(topic: Topic, settings: OperatorSettings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{topic.child_name}-job",
            "namespace": topic.namespace,
            "labels": job_labels(topic),
            "ownerReferences": [owner_reference(topic)],
        },
        "data": {JOB_CONFIG_KEY: job_config(topic, settings).to_json()},
    }


def secret_refs(topic: Topic) -> dict[str, tuple[SecretRef | None, str]]:
    """The Secrets the spec references, by what they hold (the job config's ``secrets``), each
    with where the pods mount it."""
    spec = topic.spec
    registry = spec.value.schema_registry
    return {
        "kafka": (spec.kafka.auth_secret_ref, KAFKA_SECRET_DIR),
        "catalog": (spec.table.catalog.secret_ref, CATALOG_SECRET_DIR),
        "registry": (registry.auth_secret_ref if registry else None, REGISTRY_SECRET_DIR),
    }
