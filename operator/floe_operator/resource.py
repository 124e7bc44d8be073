"""The KafkaIcebergTopic resource: the contract's spec (:mod:`floe_sparkapp.contract`, the
models and rules the job runs on too) and the pods' settings the operator adds
(``spec.spark``).

The CRD's schema is generated from these models (``python -m floe_operator.crd``), so the API
server, the operator and the job check a spec against the same rules: structure, enums,
patterns and defaults in the OpenAPI schema, cross-field rules as CEL
(``x-kubernetes-validations``). Secrets are only ever referenced by name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from pydantic.config import JsonDict

from floe_sparkapp.contract import (
    ResourcesSpec,
    Rule,
    SecretRef,
    TopicSpec,
    _duration,
    _Model,
    duration_rule,
)
from floe_sparkapp.units import duration_seconds

from .names import GROUP, KIND, PLURAL, VERSION  # noqa: F401 - the resource's names

SINGULAR = "kafkaicebergtopic"
SHORT_NAMES = ["kit"]


class ExecutorSpec(ResourcesSpec):
    instances: int = Field(1, ge=1, le=1000)


# A Kubernetes object the API server checks where it is used (a pod), kept as written here.
# Volume names are DNS labels (at most 63 characters), which also bounds the CEL rule's cost.
_NAME: JsonDict = {"type": "string", "maxLength": 63}
_K8S_OBJECT: JsonDict = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _NAME},
    "x-kubernetes-preserve-unknown-fields": True,
}
_VOLUME_MOUNTS: JsonDict = {
    "items": {
        **_K8S_OBJECT,
        "required": ["name", "mountPath"],
        "properties": {"name": _NAME, "mountPath": {"type": "string", "maxLength": 4096}},
    }
}

# Objects of the pod's own API (a toleration, an EnvFromSource, an affinity, a security
# context), kept as written: the API server checks them in the pod.
_POD_OBJECT: JsonDict = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _pod_object_field(schema: dict[str, Any]) -> None:
    """A field of one such object: kept as written, not a map of any values."""
    schema.pop("additionalProperties", None)
    schema.update(_POD_OBJECT)


_LABELS: JsonDict = {"maxProperties": 64}
_ENV_VARS: JsonDict = {
    "items": {
        **_POD_OBJECT,
        "required": ["name"],
        "properties": {"name": {"type": "string", "maxLength": 253}},
    }
}


class PodSpec(_Model):
    """Where and as what the job's pods run: the driver, the executors and the maintenance pods
    alike. The operator's own defaults (the chart's ``spark.pod``) come first; a resource's
    maps and lists add to them (a key or an env name it sets wins), its affinity and priority
    class replace them, its security contexts override them key by key."""

    image_pull_secrets: list[SecretRef] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets of the registry the Spark image is pulled from.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Labels of the nodes the pods may run on.",
        json_schema_extra=_LABELS,
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=32,
        description="Taints the pods tolerate (Kubernetes Toleration objects).",
        json_schema_extra={"items": _POD_OBJECT},
    )
    affinity: dict[str, Any] = Field(
        default_factory=dict,
        description="Node and pod affinity (a Kubernetes Affinity object).",
        json_schema_extra=_pod_object_field,
    )
    priority_class_name: str | None = Field(
        None, max_length=253, description="PriorityClass of the pods."
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels of the pods (floe's own win).",
        json_schema_extra=_LABELS,
    )
    pod_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Extra annotations of the pods.",
        json_schema_extra=_LABELS,
    )
    env: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra environment variables of the Spark containers (Kubernetes EnvVar "
        "objects, e.g. valueFrom a Secret).",
        json_schema_extra=_ENV_VARS,
    )
    env_from: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets and ConfigMaps whose keys become environment variables "
        "(Kubernetes EnvFromSource objects).",
        json_schema_extra={"items": _POD_OBJECT},
    )
    pod_security_context: dict[str, Any] = Field(
        default_factory=dict,
        description="The pods' security context (a Kubernetes PodSecurityContext object).",
        json_schema_extra=_pod_object_field,
    )
    security_context: dict[str, Any] = Field(
        default_factory=dict,
        description="The Spark containers' security context (a Kubernetes SecurityContext object).",
        json_schema_extra=_pod_object_field,
    )

    def under(self, defaults: PodSpec) -> PodSpec:
        """These settings over ``defaults`` (see the class)."""
        names = {secret.name for secret in self.image_pull_secrets}
        own_env = {variable.get("name") for variable in self.env}
        return PodSpec(
            image_pull_secrets=[s for s in defaults.image_pull_secrets if s.name not in names]
            + list(self.image_pull_secrets),
            node_selector={**defaults.node_selector, **self.node_selector},
            tolerations=list(defaults.tolerations)
            + [t for t in self.tolerations if t not in defaults.tolerations],
            affinity=self.affinity or defaults.affinity,
            priority_class_name=self.priority_class_name or defaults.priority_class_name,
            pod_labels={**defaults.pod_labels, **self.pod_labels},
            pod_annotations={**defaults.pod_annotations, **self.pod_annotations},
            env=[v for v in defaults.env if v.get("name") not in own_env] + list(self.env),
            env_from=list(defaults.env_from)
            + [e for e in self.env_from if e not in defaults.env_from],
            pod_security_context={**defaults.pod_security_context, **self.pod_security_context},
            security_context={**defaults.security_context, **self.security_context},
        )


class _SparkJob(_Model):
    """spec.spark's own fields (its pod settings follow them, from PodSpec)."""

    image: str | None = Field(None, description="Spark job image (default: the operator's).")
    spark_version: str = "4.1.1"
    service_account: str | None = Field(
        None, description="ServiceAccount of the driver (default: floe-spark)."
    )
    driver: ResourcesSpec = ResourcesSpec()
    executor: ExecutorSpec = ExecutorSpec()
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info",
        description="Level of floe's own log lines in the driver and the maintenance "
        "pods (Spark's: conf spark.log.level).",
    )
    checkpoint_location: str | None = Field(
        None,
        description="Where Spark keeps the query's checkpoint (default: "
        "<warehouse>/_floe/checkpoints/<namespace>/<name>). Losing it loses "
        "nothing: the job resumes from the table's offsets.",
    )
    volumes: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=32,
        description="Extra volumes of the driver, executor and maintenance pods (Kubernetes "
        "Volume objects), e.g. a PersistentVolumeClaim for checkpoints.",
        json_schema_extra={"items": _K8S_OBJECT},
    )
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=32,
        description="Where the Spark containers mount those volumes (Kubernetes VolumeMount "
        "objects).",
        json_schema_extra=_VOLUME_MOUNTS,
    )


def _mounts_name_volumes(spark: _SparkJob) -> bool:
    names = {volume.get("name") for volume in spark.volumes}
    return all(mount.get("name") in names for mount in spark.volume_mounts)


class SparkSpec(PodSpec, _SparkJob):
    RULES = (
        Rule(
            "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
            "self.volumes.exists(v, v.name == m.name))",
            "every volumeMounts entry must name a volume in spark.volumes",
            ".volumeMounts",
            None,
            _mounts_name_volumes,
        ),
    )


class AutoRollbackSpec(_Model):
    """Opt in: a spec change whose job does not become healthy (commit once) within the
    window runs the last spec whose job did instead. The resource keeps the spec as written;
    the status says which generation runs, and the next change of the spec is tried."""

    RULES = (
        duration_rule(
            "window",
            "autoRollback.window",
            at_least=30,
            at_most=86_400,
            words="must be between 30s and 1d",
        ),
    )

    enabled: bool = Field(False, description="Roll a failing spec change back.")
    window: str = _duration(
        "10m",
        "How long a changed spec's job has to commit once before it "
        "is rolled back, e.g. 10m (from 30s to 1d).",
    )

    @property
    def window_seconds(self) -> int:
        return duration_seconds(self.window)


class KafkaIcebergTopicSpec(TopicSpec):
    spark: SparkSpec = SparkSpec()
    auto_rollback: AutoRollbackSpec = AutoRollbackSpec()


# --- the status --------------------------------------------------------------------------------
# What the operator writes (:mod:`status` and :mod:`plan` make it), as the CRD's status schema:
# ``kubectl explain kit.status`` reads these descriptions, and the API server keeps no field
# that is not here.

_TIME: JsonDict = {"format": "date-time"}
_OFFSETS = "Per Kafka partition (its number as the key), "


def _kept_as_written(schema: dict[str, Any]) -> None:
    schema.pop("additionalProperties", None)
    schema.update({"type": "object", "x-kubernetes-preserve-unknown-fields": True})


class ConditionStatus(_Model):
    type: Literal[
        "Ready", "JobRunning", "TableReady", "SchemaInSync", "MaintenanceScheduled", "DeadLetter"
    ]
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(description="Why, in one CamelCase word.")
    message: str = Field(description="What it means, and what to change where it needs you.")
    observed_generation: int | None = Field(None, description="The spec generation it is of.")
    last_transition_time: str | None = Field(
        None, description="When its status last changed.", json_schema_extra=_TIME
    )


class SparkApplicationStatus(_Model):
    name: str = Field(description="The job's SparkApplication.")
    state: str = Field("", description="Its state as spark-operator reports it.")
    attempts: int = Field(0, description="spark-operator's submissions of it.")
    failovers: int | None = Field(
        None,
        description="Times in a row floe recreated the job after it failed or ended "
        "(the backoff's exponent; back to 0 once it ran long enough).",
    )
    last_failover_time: str | None = Field(None, json_schema_extra=_TIME)
    last_failure: str | None = Field(None, description="The error the job failed with last.")


class TableStatus(_Model):
    schema_id: int | None = Field(None, description="The table's current schema id.")
    snapshot_id: str | None = Field(None, description="The job's newest snapshot.")
    committed_at: str | None = Field(
        None, description="When that snapshot was committed.", json_schema_extra=_TIME
    )
    registry_version: int | None = Field(
        None,
        description="The registry subject's latest version the operator compared with the table.",
    )


class OffsetsStatus(_Model):
    committed: dict[str, int] = Field(
        default_factory=dict,
        description=_OFFSETS + "the next offset the table holds (with "
        "routes: the lowest of its tables).",
    )
    latest: dict[str, int] = Field(
        default_factory=dict, description=_OFFSETS + "Kafka's end offset when lag was counted."
    )
    lag: int | None = Field(
        None,
        description="Records in Kafka past the committed offsets, refreshed when the "
        "committed offsets move or the lag turns to or from zero (the live "
        "lag: the metric floe_topic_lag_records).",
    )
    error: str | None = Field(None, description="Why Kafka could not be asked.")


class RouteTableStatus(_Model):
    identifier: str
    exists: bool | None = None
    error: str | None = Field(None, description="Why the table could not be read or used.")
    snapshot_id: str | None = None
    committed_at: str | None = Field(None, json_schema_extra=_TIME)
    committed: dict[str, int] = Field(
        default_factory=dict, description=_OFFSETS + "the next offset it holds."
    )
    lag: int | None = None
    landed_through: str | None = Field(None, json_schema_extra=_TIME)


class MaintenanceStatus(_Model):
    schedule: str = Field(description="The action's cron schedule.")
    cron_job: str = Field(description="The CronJob that runs it.")
    last_run: dict[str, Any] | None = Field(
        None,
        description="What its last run recorded on the table: time, outcome "
        "(Succeeded or Failed), attempts, and its figures or message.",
        json_schema_extra=_kept_as_written,
    )


class StableStatus(_Model):
    generation: int = Field(description="The last generation whose job became healthy.")
    spec: dict[str, Any] = Field(
        description="Its spec, which a rolled-back generation runs.",
        json_schema_extra=_kept_as_written,
    )
    since: str | None = Field(None, json_schema_extra=_TIME)


class AutoRollbackStatus(_Model):
    failed_generation: int = Field(
        description="The generation rolled back: the resource's "
        "spec as written, which is not running."
    )
    restored_generation: int = Field(description="The generation whose spec runs instead.")
    at: str | None = Field(None, json_schema_extra=_TIME)
    reason: str | None = Field(None, description="How the failed generation's job failed.")


class SchemaChangeStatus(_Model):
    registry_version: int = Field(description="The version waiting for approval.")
    changes: list[str] = Field(description="Its breaking changes to the table's columns.")


class PublishStatus(_Model):
    request: str = Field(description="The floe.dev/publish annotation's value it answered.")
    snapshot_id: str | None = Field(None, description="main's snapshot after it.")
    at: str | None = Field(None, json_schema_extra=_TIME)
    error: str | None = Field(None, description="Why main was not moved, and what to do.")


class BranchStatus(_Model):
    name: str = Field(description="The branch the job lands in (table.branch).")
    snapshot_id: str | None = Field(
        None, description="The branch's head (none until the job's first commit makes the branch)."
    )
    main_snapshot_id: str | None = Field(None, description="main's head: what its readers see.")
    unpublished_commits: int = Field(
        0, description="The job's commits on the branch that main does not have yet."
    )
    last_publish: PublishStatus | None = None


class KafkaIcebergTopicStatus(_Model):
    """The resource's status, as the operator writes it."""

    observed_generation: int | None = Field(None, description="The spec generation last seen.")
    phase: Literal["Pending", "Running", "Degraded", "RolledBack", "Suspended", "Failed"] | None = (
        Field(
            None,
            description="Running (landing), Pending (on its way), Degraded (the job failed "
            "or stalled: floe acts), RolledBack (landing with the last stable "
            "spec: autoRollback), Suspended, or Failed (you act).",
        )
    )
    conditions: list[ConditionStatus] = Field(default_factory=list)
    spark_application: SparkApplicationStatus | None = None
    table: TableStatus | None = None
    offsets: OffsetsStatus | None = None
    tables: list[RouteTableStatus] | None = Field(
        None, description="With routes: each table's progress."
    )
    landed_through: str | None = Field(
        None,
        description="The valid-through time of the newest commit: every partition's "
        "records up to it are in the table (with routes: the table furthest "
        "behind). Freshness is its age.",
        json_schema_extra=_TIME,
    )
    maintenance: dict[str, MaintenanceStatus] | None = Field(
        None,
        description="Per scheduled action (compaction, expire-snapshots, "
        "remove-orphans, rewrite-manifests).",
    )
    spec_changed_at: str | None = Field(
        None,
        description="When the operator first saw this generation of the spec.",
        json_schema_extra=_TIME,
    )
    stable: StableStatus | None = None
    auto_rollback: AutoRollbackStatus | None = Field(
        None, description="While a generation is rolled back (spec.autoRollback)."
    )
    schema_change: SchemaChangeStatus | None = Field(
        None,
        description="A breaking registry version waiting for its approval annotation "
        "(kubectl floe approve).",
    )
    branch: BranchStatus | None = Field(
        None,
        description="With table.branch: the branch, main, and the last publish "
        "(kubectl floe publish).",
    )
