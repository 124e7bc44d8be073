"""What the pods of a topic's SparkApplication and of its maintenance CronJobs share: their
volumes and mounts, their placement, their containers' environment and security context, their
metadata, and how they log."""

from __future__ import annotations

from typing import Any

from ..resource import PodSpec
from ..settings import OperatorSettings
from .config import JOB_CONFIG_DIR, secret_refs
from .topic import Topic


def pod_volumes(topic: Topic) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job ConfigMap, the referenced Secrets and the spec's own volumes, as pod volumes and
    their mounts (the same in the driver, the executors and the maintenance pods)."""
    volumes = [{"name": "job", "configMap": {"name": f"{topic.child_name}-job"}}]
    mounts = [{"name": "job", "mountPath": JOB_CONFIG_DIR, "readOnly": True}]
    for index, secret in enumerate(_secret_mounts(topic)):
        volumes.append({"name": f"secret-{index}", "secret": {"secretName": secret["name"]}})
        mounts.append({"name": f"secret-{index}", "mountPath": secret["path"], "readOnly": True})
    return (volumes + list(topic.spec.spark.volumes), mounts + list(topic.spec.spark.volume_mounts))


def _secret_mounts(topic: Topic) -> list[dict[str, str]]:
    """The referenced Secrets and where the job config expects their files."""
    return [
        {"name": ref.name, "path": path}
        for ref, path in secret_refs(topic).values()
        if ref is not None
    ]


def placement(pod: PodSpec, security_context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pod spec's fields that place the pod (those set only)."""
    placed = {
        "imagePullSecrets": [{"name": s.name} for s in pod.image_pull_secrets],
        "nodeSelector": pod.node_selector,
        "tolerations": pod.tolerations,
        "affinity": pod.affinity,
        "priorityClassName": pod.priority_class_name,
        "securityContext": {**(security_context or {}), **pod.pod_security_context},
    }
    return {key: value for key, value in placed.items() if value}


def pod_container(
    container: dict[str, Any], pod: PodSpec, security_context: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``container`` with the pod settings' environment and security context added."""
    own = {variable.get("name") for variable in pod.env}
    env = [v for v in container.get("env", []) if v["name"] not in own] + list(pod.env)
    added = {
        "env": env,
        "envFrom": pod.env_from,
        "securityContext": {**(security_context or {}), **pod.security_context},
    }
    return {**container, **{key: value for key, value in added.items() if value}}


def pod_metadata(labels: dict[str, str], pod: PodSpec) -> dict[str, Any]:
    """The pods' labels (floe's own win) and annotations."""
    metadata: dict[str, Any] = {"labels": {**pod.pod_labels, **labels}}
    if pod.pod_annotations:
        metadata["annotations"] = dict(pod.pod_annotations)
    return metadata


def logging_env(topic: Topic, settings: OperatorSettings) -> list[dict[str, str]]:
    """floe's log lines in a job's pods: the spec's level, the operator's format."""
    return [
        {"name": "FLOE_LOG_LEVEL", "value": topic.spec.spark.log_level},
        {"name": "FLOE_LOG_FORMAT", "value": settings.log_format},
    ]


def spark_logging(settings: OperatorSettings) -> dict[str, str]:
    """Spark's own lines as JSON too, where floe's are (Spark's structured logging)."""
    json_lines = settings.log_format == "json"
    return {"spark.log.structuredLogging.enabled": "true"} if json_lines else {}
