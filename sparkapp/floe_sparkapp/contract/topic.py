"""The KafkaIcebergTopic's spec (:class:`TopicSpec`): its sections, the rules across them, the
tables it lands in and how long its snapshots are kept."""

from __future__ import annotations

from pydantic import Field

from ..units import duration_seconds
from .base import Rule, _Model
from .commit import CommitSpec, DeadLetterSpec, SchemaEvolutionSpec
from .kafka import KafkaSpec
from .maintenance import MIN_DEFAULT_SNAPSHOT_AGE_SECONDS, MaintenanceSpec
from .table import RouteSpec, TableSpec
from .value import KeySpec, ValueSpec

MAX_ROUTES = 16


def _route_tables_apart(topic: TopicSpec) -> bool:
    identifiers = [topic.table.identifier, *(route.table.identifier for route in topic.routes)]
    return len(set(identifiers)) == len(identifiers)


class TopicSpec(_Model):
    """The KafkaIcebergTopic's spec, but for the pods' settings (``spec.spark``, the
    operator's): what the job runs on."""

    RULES = (
        Rule(
            "!has(self.deadLetter) || self.deadLetter.topic != self.kafka.topic",
            "deadLetter.topic must differ from kafka.topic",
            ".deadLetter.topic",
            None,
            lambda s: s.dead_letter is None or s.dead_letter.topic != s.kafka.topic,
        ),
        Rule(
            "self.kafka.topic == oldSelf.kafka.topic",
            "kafka.topic cannot change: create a new resource for another topic",
            ".kafka.topic",
        ),
        Rule(
            "self.table.identifier == oldSelf.table.identifier",
            "table.identifier cannot change: create a new resource for another table",
            ".table.identifier",
        ),
        Rule(
            "self.table.mode == oldSelf.table.mode",
            "table.mode cannot change: a table keeps the mode it was made with; create a new "
            "resource with another table.identifier",
            ".table.mode",
        ),
        Rule(
            "self.value.format in ['avro', 'json'] || self.table.mode != 'cdc'",
            "table.mode cdc reads Debezium change events: value.format must be avro or json",
            ".table.mode",
            None,
            lambda s: s.value.format in ("avro", "json") or s.table.mode != "cdc",
        ),
        Rule(
            "self.value.format != 'raw' || !has(self.table.keyColumns) "
            "|| size(self.table.keyColumns) == 0",
            "table.keyColumns name value fields, and a raw topic's value has none: leave "
            "keyColumns out to key rows by the Kafka key",
            ".table.keyColumns",
            None,
            lambda s: s.value.format != "raw" or not s.table.key_columns,
        ),
        Rule(
            "self.table.mode != 'cdc' || !has(self.value.coerce) || size(self.value.coerce) == 0",
            "value.coerce converts fields of a record's value, and a cdc table's rows are "
            "Debezium's before and after images: leave coerce out",
            ".value.coerce",
            None,
            lambda s: s.table.mode != "cdc" or not s.value.coerce,
        ),
        Rule(
            "self.table.mode != 'cdc' || ((!has(self.value.columns) || "
            "size(self.value.columns) == 0) && (!has(self.value.inferSchema) || "
            "!self.value.inferSchema))",
            "value.columns and value.inferSchema read a record's value as the table's row, and "
            "a cdc table's rows are Debezium's after images: give the envelope's schema in "
            "value.schemaRegistry",
            ".value",
            None,
            lambda s: s.table.mode != "cdc" or not (s.value.columns or s.value.infer_schema),
        ),
        Rule(
            "self.value.format != 'raw' || !has(self.table.op) || has(self.table.op.header)",
            "table.op.field names a value field, and a raw topic's value has none: use "
            "op.header, or value.format avro, json or protobuf",
            ".table.op",
            None,
            lambda s: (
                s.value.format != "raw" or s.table.op is None or s.table.op.header is not None
            ),
        ),
        Rule(
            "!has(self.key) || !has(self.key.format) || self.key.format == 'raw' "
            "|| (self.value.format != 'raw' && has(self.value.schemaRegistry))",
            "key.format avro, json or protobuf reads the key schema from value.schemaRegistry's "
            "registry: value.format must be avro, json or protobuf too, with a schemaRegistry",
            ".key.format",
            None,
            lambda s: (
                s.key.format == "raw"
                or (s.value.format != "raw" and s.value.schema_registry is not None)
            ),
        ),
        Rule(
            "!has(self.fanOut) || !self.fanOut || (has(self.routes) && size(self.routes) > 0)",
            "fanOut sends a record to every route that matches: it needs routes",
            ".fanOut",
            None,
            lambda s: not s.fan_out or bool(s.routes),
        ),
        Rule(
            "self.value.format != 'raw' || !has(self.routes) || size(self.routes) == 0",
            "routes pick a table by a value field, and a raw topic's value has none: "
            "value.format must be avro, json or protobuf",
            ".routes",
            None,
            lambda s: s.value.format != "raw" or not s.routes,
        ),
        Rule(
            "!has(self.routes) || self.routes.all(r, r.table.identifier != "
            "self.table.identifier && self.routes.exists_one(o, o.table.identifier == "
            "r.table.identifier))",
            "each route needs a table of its own: routes[].table.identifier must differ from "
            "table.identifier and from each other",
            ".routes",
            None,
            _route_tables_apart,
        ),
        Rule(
            "!has(self.table.branch) || !has(self.routes) || size(self.routes) == 0",
            "table.branch lands one table in a branch and routes land several: a branch for "
            "routed tables is not supported yet, leave table.branch or routes out",
            ".table.branch",
            None,
            lambda s: s.table.branch is None or not s.routes,
        ),
    )

    kafka: KafkaSpec
    value: ValueSpec
    key: KeySpec = Field(KeySpec(), description="How the Kafka key is read.")
    table: TableSpec
    routes: tuple[RouteSpec, ...] = Field(
        default_factory=tuple,
        max_length=MAX_ROUTES,
        description=(
            "Other tables, each taking the records whose field has one of its values (the "
            "first route that matches wins, or every one with fanOut); table takes the records "
            "no route matches. Each table has its own mode, keys and committed offsets, in "
            "table's catalog."
        ),
    )
    fan_out: bool = Field(
        False,
        description=(
            "routes: a record goes to every route whose field has one of its values, not only the "
            "first; table still takes the records no route matches."
        ),
    )
    commit: CommitSpec = CommitSpec()
    schema_evolution: SchemaEvolutionSpec = SchemaEvolutionSpec()
    dead_letter: DeadLetterSpec | None = None
    maintenance: MaintenanceSpec = Field(
        MaintenanceSpec(), description=("Table maintenance, one CronJob per enabled action.")
    )
    suspend: bool = Field(
        False, description="Stop the job and its maintenance, keep the table and checkpoint."
    )

    def tables(self) -> list[TableSpec]:
        """The tables the topic lands in: ``table`` first (the records no route matches), then
        each route's, in ``table``'s catalog. Everyone who lists a resource's tables asks
        this."""
        return [
            self.table,
            *(
                TableSpec(
                    catalog=self.table.catalog,
                    deletion_policy=self.table.deletion_policy,
                    **route.table.model_dump(),
                )
                for route in self.routes
            ),
        ]

    @property
    def snapshot_max_age_seconds(self) -> int:
        """Snapshots older than this may expire: ``expireSnapshots.maxAge``, or by default
        ``retainLast`` commit intervals, so that a table keeps about ``retainLast`` commits
        whatever its interval (and its metadata the same size), but never less than
        :data:`MIN_DEFAULT_SNAPSHOT_AGE_SECONDS`: at a 1 s interval a reader still has its
        snapshot for minutes.  (Maintenance holds what it works from: :mod:`.maintenance`.)"""
        expire = self.maintenance.expire_snapshots
        if expire.max_age:
            return duration_seconds(expire.max_age)
        return max(
            expire.retain_last * self.commit.interval_seconds, MIN_DEFAULT_SNAPSHOT_AGE_SECONDS
        )
