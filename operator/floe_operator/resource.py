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

from floe_sparkapp.contract import ResourcesSpec, Rule, SecretRef, TopicSpec, _Model
from pydantic import Field

from .names import GROUP, KIND, PLURAL, VERSION  # noqa: F401 - the resource's names

SINGULAR = "kafkaicebergtopic"
SHORT_NAMES = ["kit"]


class ExecutorSpec(ResourcesSpec):
    instances: int = Field(1, ge=1, le=1000)


# A Kubernetes object the API server checks where it is used (a pod), kept as written here.
# Volume names are DNS labels (at most 63 characters), which also bounds the CEL rule's cost.
_NAME = {"type": "string", "maxLength": 63}
_K8S_OBJECT = {"type": "object", "required": ["name"], "properties": {"name": _NAME},
               "x-kubernetes-preserve-unknown-fields": True}

# Objects of the pod's own API (a toleration, an EnvFromSource, an affinity, a security
# context), kept as written: the API server checks them in the pod.
_POD_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _pod_object_field(schema: dict[str, Any]) -> None:
    """A field of one such object: kept as written, not a map of any values."""
    schema.pop("additionalProperties", None)
    schema.update(_POD_OBJECT)


_LABELS = {"maxProperties": 64}


class PodSpec(_Model):
    """Where and as what the job's pods run: the driver, the executors and the maintenance pods
    alike. The operator's own defaults (the chart's ``spark.pod``) come first; a resource's
    maps and lists add to them (a key or an env name it sets wins), its affinity and priority
    class replace them, its security contexts override them key by key."""

    image_pull_secrets: list[SecretRef] = Field(
        default_factory=list, max_length=16,
        description="Secrets of the registry the Spark image is pulled from.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Labels of the nodes the pods may run on.",
        json_schema_extra=_LABELS)
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, max_length=32,
        description="Taints the pods tolerate (Kubernetes Toleration objects).",
        json_schema_extra={"items": _POD_OBJECT})
    affinity: dict[str, Any] = Field(
        default_factory=dict, description="Node and pod affinity (a Kubernetes Affinity object).",
        json_schema_extra=_pod_object_field)
    priority_class_name: str | None = Field(None, max_length=253,
                                            description="PriorityClass of the pods.")
    pod_labels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels of the pods (floe's own win).",
        json_schema_extra=_LABELS)
    pod_annotations: dict[str, str] = Field(
        default_factory=dict, description="Extra annotations of the pods.",
        json_schema_extra=_LABELS)
    env: list[dict[str, Any]] = Field(
        default_factory=list, max_length=64,
        description="Extra environment variables of the Spark containers (Kubernetes EnvVar "
                    "objects, e.g. valueFrom a Secret).",
        json_schema_extra={"items": {**_POD_OBJECT, "required": ["name"],
                                     "properties": {"name": {"type": "string",
                                                             "maxLength": 253}}}})
    env_from: list[dict[str, Any]] = Field(
        default_factory=list, max_length=16,
        description="Secrets and ConfigMaps whose keys become environment variables "
                    "(Kubernetes EnvFromSource objects).",
        json_schema_extra={"items": _POD_OBJECT})
    pod_security_context: dict[str, Any] = Field(
        default_factory=dict, description="The pods' security context (a Kubernetes "
                                          "PodSecurityContext object).",
        json_schema_extra=_pod_object_field)
    security_context: dict[str, Any] = Field(
        default_factory=dict, description="The Spark containers' security context (a "
                                          "Kubernetes SecurityContext object).",
        json_schema_extra=_pod_object_field)

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
            security_context={**defaults.security_context, **self.security_context})


class _SparkJob(_Model):
    """spec.spark's own fields (its pod settings follow them, from PodSpec)."""

    image: str | None = Field(None, description="Spark job image (default: the operator's).")
    spark_version: str = "4.1.1"
    service_account: str | None = Field(
        None, description="ServiceAccount of the driver (default: floe-spark).")
    driver: ResourcesSpec = ResourcesSpec()
    executor: ExecutorSpec = ExecutorSpec()
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Level of floe's own log lines in the driver and the maintenance "
                            "pods (Spark's: conf spark.log.level).")
    checkpoint_location: str | None = Field(
        None, description="Where Spark keeps the query's checkpoint (default: "
                          "<warehouse>/_floe/checkpoints/<namespace>/<name>). Losing it loses "
                          "nothing: the job resumes from the table's offsets.")
    volumes: list[dict[str, Any]] = Field(
        default_factory=list, max_length=32,
        description="Extra volumes of the driver, executor and maintenance pods (Kubernetes "
                    "Volume objects), e.g. a PersistentVolumeClaim for checkpoints.",
        json_schema_extra={"items": _K8S_OBJECT})
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list, max_length=32,
        description="Where the Spark containers mount those volumes (Kubernetes VolumeMount "
                    "objects).",
        json_schema_extra={"items": {**_K8S_OBJECT, "required": ["name", "mountPath"],
                                     "properties": {"name": _NAME,
                                                    "mountPath": {"type": "string",
                                                                  "maxLength": 4096}}}})



def _mounts_name_volumes(spark: _SparkJob) -> bool:
    names = {volume.get("name") for volume in spark.volumes}
    return all(mount.get("name") in names for mount in spark.volume_mounts)


class SparkSpec(PodSpec, _SparkJob):
    RULES = (
        Rule("!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
             "self.volumes.exists(v, v.name == m.name))",
             "every volumeMounts entry must name a volume in spark.volumes", ".volumeMounts",
             None, _mounts_name_volumes),
    )


class KafkaIcebergTopicSpec(TopicSpec):
    spark: SparkSpec = SparkSpec()
