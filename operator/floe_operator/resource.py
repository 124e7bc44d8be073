"""The KafkaIcebergTopic resource: the spec users write, as pydantic models.

The CRD's schema is generated from these models (``python -m floe_operator.crd``), so the API
server and the operator check a spec against the same rules: structure, enums, patterns and
defaults in the OpenAPI schema, cross-field rules as CEL (``x-kubernetes-validations``).
Secrets are only ever referenced by name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .units import (DURATION, DURATION_MAX_LENGTH, QUANTITY, cel_bytes, cel_seconds,
                    duration_seconds)

GROUP = "floe.dev"
VERSION = "v1alpha1"
KIND = "KafkaIcebergTopic"
PLURAL = "kafkaicebergtopics"
SINGULAR = "kafkaicebergtopic"
SHORT_NAMES = ["kit"]

CRON = (r"^(@(yearly|annually|monthly|weekly|daily|hourly)|"
        r"[-0-9*/,A-Za-z?]+(\s+[-0-9*/,A-Za-z?]+){4})$")
KAFKA_TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"


def _rules(*rules: tuple[str, ...]) -> dict:
    """CEL rules: (rule, message[, fieldPath[, reason]]) each; fieldPath points the error at
    the field to change."""
    validations = []
    for rule, message, *where in rules:
        entry = {"rule": rule, "message": message}
        if where:
            entry["fieldPath"] = where[0]
        if len(where) > 1:
            entry["reason"] = where[1]
        validations.append(entry)
    return {"x-kubernetes-validations": validations}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SecretRef(_Model):
    name: str = Field(min_length=1, max_length=253,
                      description="Name of a Secret in the resource's namespace.")


class KafkaSpec(_Model):
    bootstrap_servers: str = Field(min_length=1, description="host:port[,host:port...]")
    topic: str = Field(pattern=KAFKA_TOPIC, description="The topic to land.")
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest", description="Where the very first start reads from; later starts continue "
                                "from the offsets committed in the table.")
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    consumer_group: str | None = Field(
        None, description="Consumer group the committed offsets are reported to "
                          "(default: floe.<namespace>.<name>).")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Extra Kafka client settings, without secrets.")
    auth_secret_ref: SecretRef | None = Field(
        None, description="Secret whose keys are Kafka client settings with secret values "
                          "(for example sasl.jaas.config).")


class SchemaRegistrySpec(_Model):
    url: str = Field(pattern=r"^https?://", description="Confluent-compatible registry URL.")
    subject: str = Field(min_length=1, description="Subject of the value schema.")
    auth_secret_ref: SecretRef | None = Field(
        None, description="Secret with key basic.auth.user.info (user:password).")


class ValueSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_rules(
        ("self.format == 'raw' || has(self.schemaRegistry)",
         "schemaRegistry is required when format is avro, json or protobuf: the table schema "
         "comes from the registry (use format raw to keep the bytes only)",
         ".schemaRegistry", "FieldValueRequired"),
        ("!has(self.message) || self.format == 'protobuf'",
         "message names a Protobuf message: it needs format protobuf", ".message",
         "FieldValueInvalid"),
    ))

    format: Literal["avro", "json", "protobuf", "raw"] = Field("avro", description=(
        "avro, protobuf: the Confluent wire format, each record decoded with its writer schema "
        "from the registry. json: plain JSON, or JSON Schema in the Confluent wire format. "
        "raw: the bytes only."))
    schema_registry: SchemaRegistrySpec | None = None
    message: str | None = Field(None, min_length=1, max_length=512, description=(
        "protobuf: the full name (package included) of the message the values are; by default "
        "the first message of the subject's schema."))


class KeySpec(_Model):
    model_config = ConfigDict(json_schema_extra=_rules(
        ("!has(self.format) || self.format == 'raw' || has(self.subject)",
         "key.subject is required when key.format is avro or json: the key_fields column comes "
         "from the registry (use format raw to keep the key's bytes only)",
         ".subject", "FieldValueRequired"),
    ))

    format: Literal["avro", "json", "raw"] = Field(
        "raw", description="raw: the key's bytes only. avro, json: also decoded, by its own "
                           "registry subject, into the key_fields column, which identifies an "
                           "upsert or cdc table's rows when keyColumns are empty.")
    subject: str | None = Field(None, min_length=1, max_length=253, description=(
        "Subject of the key schema, in value.schemaRegistry's registry."))


class CatalogSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_rules(
        ("self.type != 'sql' || (has(self.uri) && self.uri.startsWith('jdbc:'))",
         "a sql catalog needs uri: jdbc:postgresql://host:port/db or jdbc:sqlite:/path",
         ".uri"),
        ("self.type != 'sql' || has(self.warehouse)",
         "a sql catalog needs warehouse: s3://bucket/prefix or file:///path",
         ".warehouse", "FieldValueRequired"),
        ("self.type != 'rest' || has(self.uri)",
         "a rest catalog needs uri", ".uri", "FieldValueRequired"),
    ))

    # Any other catalog is reached through its Iceberg REST endpoint (docs/resource.md#catalogs).
    type: Literal["sql", "rest"] = Field("sql", description=(
        "sql: a JDBC catalog (PostgreSQL, SQLite); rest: any Iceberg REST catalog, which is "
        "also how AWS Glue, S3 Tables, Nessie, Polaris and Unity Catalog are reached"))
    name: str = Field("floe", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                      description="Catalog name; every engine must use the same one.")
    uri: str | None = None
    warehouse: str | None = None
    properties: dict[str, str] = Field(default_factory=dict,
                                       description="Iceberg catalog properties, without secrets.")
    secret_ref: SecretRef | None = Field(
        None, description="Secret whose keys are catalog properties with secret values "
                          "(jdbc.password, s3.secret-access-key, token, ...).")


FIELD_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class TableSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_rules(
        ("self.mode != 'append' || !has(self.keyColumns) || size(self.keyColumns) == 0",
         "keyColumns apply to modes upsert and cdc only", ".keyColumns"),
    ))

    catalog: CatalogSpec
    identifier: str = Field(pattern=IDENTIFIER, description="namespace.table")
    partitioning: Literal["hour", "day", "month", "none"] = Field(
        "day", description="Time partitioning on kafka.timestamp.")
    properties: dict[str, str] = Field(default_factory=dict,
                                       description="Iceberg table properties.")
    deletion_policy: Literal["Retain", "Delete"] = Field(
        "Retain", description="What deleting the resource does to the table.")
    mode: Literal["append", "upsert", "cdc"] = Field(
        "append", description="append: a row per record. upsert: a row per key, each record "
                              "replacing its key's row and a tombstone (null value) deleting "
                              "it. cdc: Debezium change events (Avro or JSON envelopes); the "
                              "table holds the source's rows, op d deleting one. upsert and "
                              "cdc write deletion vectors (format v3, merge-on-read), never "
                              "equality deletes. A table keeps the mode it was made with.")
    key_columns: list[str] = Field(
        default_factory=list, max_length=8,
        description="upsert, cdc: the value fields (dotted paths, e.g. id or customer.id; for "
                    "cdc, fields of the row) that identify a row; empty: the record's Kafka "
                    "key does.",
        json_schema_extra={"items": {"type": "string", "pattern": FIELD_PATH, "maxLength": 253},
                           "x-kubernetes-list-type": "set"})


class RouteTableSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_rules(
        ("self.mode != 'append' || !has(self.keyColumns) || size(self.keyColumns) == 0",
         "keyColumns apply to modes upsert and cdc only", ".keyColumns"),
    ))

    identifier: str = Field(pattern=IDENTIFIER, max_length=253,
                            description="namespace.table, in the topic's catalog")
    partitioning: Literal["hour", "day", "month", "none"] = "day"
    properties: dict[str, str] = Field(default_factory=dict,
                                       description="Iceberg table properties.")
    mode: Literal["append", "upsert", "cdc"] = Field("append", description="As table.mode.")
    key_columns: list[str] = Field(
        default_factory=list, max_length=8, description="As table.keyColumns.",
        json_schema_extra={"items": {"type": "string", "pattern": FIELD_PATH, "maxLength": 253},
                           "x-kubernetes-list-type": "set"})


class RouteSpec(_Model):
    field: str = Field(pattern=FIELD_PATH, max_length=253, description=(
        "A field of the value as its writer wrote it, dotted: source.table for Debezium "
        "envelopes, or a field of the record such as region."))
    values: list[str] = Field(
        min_length=1, max_length=256, description="The field's values (as text) this route "
                                                  "takes.",
        json_schema_extra={"items": {"type": "string", "maxLength": 253}})
    table: RouteTableSpec
    key_subject: str | None = Field(
        None, min_length=1, max_length=253, description=(
            "Registry subject of this table's keys, when key.format decodes them (default: "
            "key.subject)."))
    subject: str | None = Field(
        None, min_length=1, max_length=253, description=(
            "Registry subject this table is made and evolved from (default: the value's "
            "subject). Set it when routes carry records of different schemas, such as "
            "Debezium's <topic>-<record name> subjects."))


def _duration(default: str | None, description: str, bound: str = "", message: str = "") -> Any:
    """A duration field; ``bound`` (for example ``<= 86400.0``, in seconds) is checked by a CEL
    rule on the API server."""
    # Not checked when the pattern already refused the value (CEL runs either way).
    matches = "self.matches('" + DURATION.replace("\\", "\\\\") + "')"
    extra = _rules((f"!{matches} || {cel_seconds()} {bound}", message)) if bound else None
    return Field(default, pattern=DURATION, min_length=1, max_length=DURATION_MAX_LENGTH,
                 description=description, json_schema_extra=extra)


def _size(default: str, description: str, bound: str, message: str) -> Any:
    """A size field (``256Mi``, Spark's ``512m``); ``bound`` (for example ``>= 1048576.0``, in
    bytes) is checked by a CEL rule on the API server."""
    matches = "self.matches('" + QUANTITY.replace("\\", "\\\\") + "')"
    return Field(default, pattern=QUANTITY, max_length=32, description=description,
                 json_schema_extra=_rules((f"!{matches} || {cel_bytes()} {bound}", message)))


class CommitSpec(_Model):
    interval: str = _duration("60s", "How often a snapshot is committed, e.g. 10s, 1m "
                                     "(at most 1d).", "<= 86400.0",
                              "commit.interval must be at most 1d")
    max_records_per_commit: int = Field(500_000, ge=1, le=100_000_000)


class SchemaEvolutionSpec(_Model):
    mode: Literal["additive", "none"] = Field(
        "additive", description="additive: new optional fields and wider types evolve the "
                                "table; breaking changes wait for approval. none: never evolve.")


class DeadLetterSpec(_Model):
    topic: str = Field(pattern=KAFKA_TOPIC)


class ResourcesSpec(_Model):
    cores: int = Field(1, ge=1, le=64)
    memory: str = Field("1g", pattern=QUANTITY)


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

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> _SparkJob:
        names = {volume.get("name") for volume in self.volumes}
        for mount in self.volume_mounts:
            if mount.get("name") not in names:
                raise ValueError(f"volumeMounts: {mount.get('name')!r} names no volume in "
                                 "spark.volumes")
        return self


class SparkSpec(PodSpec, _SparkJob):
    model_config = ConfigDict(json_schema_extra=_rules(
        ("!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
         "self.volumes.exists(v, v.name == m.name))",
         "every volumeMounts entry must name a volume in spark.volumes", ".volumeMounts"),
    ))


class _MaintenanceAction(_Model):
    enabled: bool = Field(True, description="Run this action on its schedule.")


class CompactionSpec(_MaintenanceAction):
    schedule: str = Field("17 * * * *", pattern=CRON, description="Cron schedule (UTC).")
    target_file_size: str = _size("256Mi", "Size of the files compaction writes (at least "
                                           "1Mi; lower-case units are binary, as in Spark).",
                                  ">= 1048576.0", "compaction.targetFileSize must be at least 1Mi")
    min_input_files: int = Field(5, ge=2, le=10_000, description=(
        "Rewrite a partition's files only when there are at least this many."))


class ExpireSnapshotsSpec(_MaintenanceAction):
    schedule: str = Field("43 3 * * *", pattern=CRON, description="Cron schedule (UTC).")
    retain_last: int = Field(100, ge=1, le=100_000, description="Snapshots always kept.")
    max_age: str | None = _duration(
        None, "Older snapshots expire (never the newest one floe wrote, which holds the "
              "offsets); at least 1m. Default: retainLast commit intervals, so that the table "
              "keeps about retainLast commits and its metadata stays small at any interval, "
              "but at least 5m, so that readers keep their snapshots at a short interval.",
        ">= 60.0", "expireSnapshots.maxAge must be at least 1m")


ORPHANS_AT_LEAST_AN_HOUR = ("must be at least 1h: a younger unreferenced file may belong to a "
                            "commit still in flight")


class RemoveOrphansSpec(_MaintenanceAction):
    schedule: str = Field("13 4 * * 0", pattern=CRON, description="Cron schedule (UTC).")
    older_than: str = _duration("3d", "Only unreferenced files older than this are deleted "
                                      "(at least 1h: younger ones may belong to a commit in "
                                      "flight).", ">= 3600.0",
                                f"removeOrphans.olderThan {ORPHANS_AT_LEAST_AN_HOUR}")

    @field_validator("older_than")
    @classmethod
    def _at_least_an_hour(cls, value: str) -> str:
        if duration_seconds(value) < 3600:
            raise ValueError(ORPHANS_AT_LEAST_AN_HOUR)
        return value


class RewriteManifestsSpec(_MaintenanceAction):
    schedule: str = Field("29 5 * * *", pattern=CRON, description="Cron schedule (UTC).")


class MaintenanceSpec(_Model):
    compaction: CompactionSpec = CompactionSpec()
    expire_snapshots: ExpireSnapshotsSpec = ExpireSnapshotsSpec()
    remove_orphans: RemoveOrphansSpec = RemoveOrphansSpec()
    rewrite_manifests: RewriteManifestsSpec = RewriteManifestsSpec()
    resources: ResourcesSpec = Field(ResourcesSpec(memory="2g"), description=(
        "CPU cores and memory of each maintenance run (Spark in local mode in one pod)."))


class KafkaIcebergTopicSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_rules(
        ("!has(self.deadLetter) || self.deadLetter.topic != self.kafka.topic",
         "deadLetter.topic must differ from kafka.topic", ".deadLetter.topic"),
        ("self.kafka.topic == oldSelf.kafka.topic",
         "kafka.topic cannot change: create a new resource for another topic", ".kafka.topic"),
        ("self.table.identifier == oldSelf.table.identifier",
         "table.identifier cannot change: create a new resource for another table",
         ".table.identifier"),
        ("self.table.mode == oldSelf.table.mode",
         "table.mode cannot change: a table keeps the mode it was made with; create a new "
         "resource with another table.identifier", ".table.mode"),
        ("self.value.format in ['avro', 'json'] || self.table.mode != 'cdc'",
         "table.mode cdc reads Debezium change events: value.format must be avro or json",
         ".table.mode"),
        ("self.value.format != 'raw' || !has(self.table.keyColumns) "
         "|| size(self.table.keyColumns) == 0",
         "table.keyColumns name value fields, and a raw topic's value has none: leave "
         "keyColumns out to key rows by the Kafka key", ".table.keyColumns"),
        ("!has(self.key) || !has(self.key.format) || self.key.format == 'raw' "
         "|| self.value.format != 'raw'",
         "key.format avro or json reads the key schema from value.schemaRegistry's registry: "
         "value.format must be avro, json or protobuf too", ".key.format"),
        ("self.value.format != 'raw' || !has(self.routes) || size(self.routes) == 0",
         "routes pick a table by a value field, and a raw topic's value has none: value.format "
         "must be avro, json or protobuf", ".routes"),
        ("!has(self.routes) || self.routes.all(r, r.table.identifier != self.table.identifier "
         "&& self.routes.exists_one(o, o.table.identifier == r.table.identifier))",
         "each route needs a table of its own: routes[].table.identifier must differ from "
         "table.identifier and from each other", ".routes"),
    ))

    kafka: KafkaSpec
    value: ValueSpec
    key: KeySpec = Field(KeySpec(), description="How the Kafka key is read.")
    table: TableSpec
    routes: list[RouteSpec] = Field(
        default_factory=list, max_length=16, description=(
            "Other tables, each taking the records whose field has one of its values (the "
            "first route that matches wins); table takes the records no route matches. Each "
            "table has its own mode, keys and committed offsets, in table's catalog."))
    commit: CommitSpec = CommitSpec()
    schema_evolution: SchemaEvolutionSpec = SchemaEvolutionSpec()
    dead_letter: DeadLetterSpec | None = None
    spark: SparkSpec = SparkSpec()
    maintenance: MaintenanceSpec = Field(MaintenanceSpec(), description=(
        "Table maintenance, one CronJob per enabled action."))
    suspend: bool = Field(False, description="Stop the job and its maintenance, keep the table "
                                             "and checkpoint.")
