"""The contract: the KafkaIcebergTopic's spec as the user writes it, and every rule it obeys,
each written once.

The same models are read three ways:

- the CRD's OpenAPI schema is generated from them (``floe_operator.crd``): structure, enums,
  patterns, bounds and defaults, and each cross-field :class:`Rule` as CEL
  (``x-kubernetes-validations``), so ``kubectl apply`` refuses a bad spec;
- the operator validates a resource with them (``floe_operator.resource`` adds the pods'
  settings, ``spec.spark``);
- the job's config is these models too (:class:`floe_sparkapp.config.JobConfig` extends
  :class:`TopicSpec`), so the job validates the spec it runs on with the same rules.

A rule's CEL and its Python check sit side by side, with the one message a user reads,
whichever of the three refused the spec. ``tests/e2e/test_crd_validation.py`` walks every rule
against the API server, the operator and the job.

One module per section of the spec, each importing only those below it; the names are all
here, where the operator, the job and the tests import them from:

- :mod:`.base`: :class:`Rule`, the models' base and the rules of durations and sizes; the
  patterns several sections share, and :class:`SecretRef`;
- :mod:`.kafka`: the topic and its client (``kafka``), the schema registry;
- :mod:`.value`: how a record's value and key are read (``value``, ``key``);
- :mod:`.table`: the catalog, the table's layout, the topic's table and the routes' (``table``,
  ``routes``), and :data:`ROW_LEVEL`;
- :mod:`.commit`: ``commit``, ``schemaEvolution`` and ``deadLetter``;
- :mod:`.maintenance`: ``maintenance`` and its actions, and :class:`ResourcesSpec`;
- :mod:`.topic`: :class:`TopicSpec`, the spec whole, and the rules across its sections;
- :mod:`.operations`: a KafkaIcebergOperation's Repair, Backfill and Replay, the request the
  operator hands the job, and :data:`RAW_REASONS`.
"""

from __future__ import annotations

from .base import (
    FIELD_PATH,
    IDENTIFIER,
    KAFKA_TOPIC,
    FieldPath,
    Rule,
    SecretRef,
    _duration,
    _Model,
    duration_rule,
    size_rule,
)
from .commit import CommitSpec, DeadLetterSpec, SchemaEvolutionSpec
from .kafka import KafkaSpec, SchemaRegistrySpec
from .maintenance import (
    CRON,
    MIN_DEFAULT_SNAPSHOT_AGE_SECONDS,
    CompactionSpec,
    ExpireSnapshotsSpec,
    MaintenanceSpec,
    RemoveOrphansSpec,
    ResourcesSpec,
    RewriteManifestsSpec,
)
from .operations import (
    RAW_REASONS,
    BackfillSpec,
    OperationRequest,
    RepairSpec,
    ReplaySpec,
    rfc3339_seconds,
)
from .table import (
    BRANCH,
    CATALOG_NAME,
    MAX_KEY_COLUMNS,
    MAX_PARTITION_FIELDS,
    PARTITION_FIELD,
    ROW_LEVEL,
    CatalogSpec,
    OpSpec,
    OpValue,
    RouteSpec,
    TableLayout,
    TableSpec,
    partition_field,
)
from .topic import MAX_ROUTES, TopicSpec
from .value import COERCE_TO, COLUMN_TYPE, Coercion, ColumnSpec, KeySpec, ValueSpec

__all__ = [
    "BRANCH",
    "CATALOG_NAME",
    "COERCE_TO",
    "COLUMN_TYPE",
    "CRON",
    "FIELD_PATH",
    "IDENTIFIER",
    "KAFKA_TOPIC",
    "MAX_KEY_COLUMNS",
    "MAX_PARTITION_FIELDS",
    "MAX_ROUTES",
    "MIN_DEFAULT_SNAPSHOT_AGE_SECONDS",
    "PARTITION_FIELD",
    "RAW_REASONS",
    "ROW_LEVEL",
    "BackfillSpec",
    "CatalogSpec",
    "Coercion",
    "ColumnSpec",
    "CommitSpec",
    "CompactionSpec",
    "DeadLetterSpec",
    "ExpireSnapshotsSpec",
    "FieldPath",
    "KafkaSpec",
    "KeySpec",
    "MaintenanceSpec",
    "OpSpec",
    "OpValue",
    "OperationRequest",
    "RemoveOrphansSpec",
    "RepairSpec",
    "ReplaySpec",
    "ResourcesSpec",
    "RewriteManifestsSpec",
    "RouteSpec",
    "Rule",
    "SchemaEvolutionSpec",
    "SchemaRegistrySpec",
    "SecretRef",
    "TableLayout",
    "TableSpec",
    "TopicSpec",
    "ValueSpec",
    "_Model",
    "_duration",
    "duration_rule",
    "partition_field",
    "rfc3339_seconds",
    "size_rule",
]
