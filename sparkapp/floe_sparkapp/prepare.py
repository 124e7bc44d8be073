"""The topic's tables made ready for the job: each created from the registry's latest schemas
or evolved to them, upgraded for deletion vectors, claimed for the writer, partitioned as the
spec says, its branches of interrupted batches dropped.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from . import catalog as catalogs
from . import schemaless, schemas
from .commit import sweep_branches
from .config import JobConfig
from .contract import ROW_LEVEL
from .evolution import BreakingChange, evolve_for_writer
from .layout import KEY_FIELDS, ensure_table, evolve_partitioning
from .ledger import claim_table
from .registry import Registry
from .upsert import with_deletion_vectors

log = logging.getLogger("floe.job")


def registry_of(config: JobConfig) -> Registry | None:
    """The value subject's registry (for a raw value with a decoded key, the key's)."""
    if config.value.format != "raw" and config.value.schema_registry is not None:
        return Registry(config.value.schema_registry, config.registry_auth())
    key = config.key_registry()
    return Registry(key, config.registry_auth()) if key is not None else None


def prepare_table(config: JobConfig, registry: Registry | None) -> Any:
    """Creates the table when absent and evolves it to the subjects' latest schemas (the
    value's, and the key's when the key is decoded)."""
    value = key = None
    if registry is not None and config.value.format != "raw":
        latest = registry.latest()
        value = schemas.table_struct(
            latest, config.table.mode, config.value.message, config.value.conversions
        ).struct
    elif config.value.format == "json":  # without a registry: the declared columns, if any
        value = schemaless.configured_value(config.value)
    if config.key.decoded:
        key_registry = config.key_registry()
        assert key_registry is not None  # the contract: a decoded key needs the value's registry
        key = schemas.table_struct(
            Registry(key_registry, config.registry_auth()).latest(),
            message=config.key.message,
        ).struct
    catalog = catalogs.load_catalog(config.catalog())
    table, created = ensure_table(catalog, config.table, value, key)
    if created:
        log.info("created table %s", config.table.identifier)
    elif config.schema_evolution.mode == "additive":
        for column, struct in (("value", value), (KEY_FIELDS, key)):
            if struct is None:
                continue
            try:
                plan = evolve_for_writer(table, struct, column)
                if plan.needs_update:
                    log.info(
                        "evolved table %s: %s",
                        config.table.identifier,
                        "; ".join(str(c) for c in plan.changes),
                    )
            except BreakingChange as change:
                log.warning(
                    "table %s keeps its %s schema: %s", config.table.identifier, column, change
                )
    return table


def ready_table(spark: SparkSession, config: JobConfig, registry: Registry | None) -> Any:
    """The table made ready for the job: created or evolved, upgraded for deletion vectors
    (upsert, cdc), claimed for the writer, partitioned as the spec says (whatever
    schemaEvolution: a partition spec is the user's own change), its branches of interrupted
    batches dropped."""
    table = prepare_table(config, registry)
    if config.table.mode in ROW_LEVEL:
        table = with_deletion_vectors(
            spark, f"{config.table.catalog.name}.{config.table.identifier}", table
        )
    claim_table(table, config.writer)
    changes = evolve_partitioning(table, config.table)
    if changes:
        log.info(
            "evolved the partitioning of table %s: %s", config.table.identifier, "; ".join(changes)
        )
    try:
        swept = sweep_branches(table, config.writer)
        if swept:
            log.info(
                "dropped %d branch(es) of %s left by interrupted batches: %s",
                len(swept),
                config.table.identifier,
                ", ".join(swept),
            )
    except Exception as error:  # noqa: BLE001 - a left branch only pins its snapshot
        log.warning("could not drop the branches of interrupted batches: %s", error)
    return table
