"""The operations the job runs as a Spark batch, for a KafkaIcebergOperation
(``python -m floe_sparkapp operate --config FILE --operation JSON``): the operator renders
one SparkApplication per attempt, on the topic's job config, and learns the outcome from the
table (:func:`~.ledger.operation_record`), where each operation records it under its uid.

- ``Repair`` (:mod:`.repair`): the table's raw rows decoded again;
- ``Backfill`` (:mod:`.backfill`): a range of the topic landed in the table;
- ``Replay`` (:mod:`.replay`): the table's rows produced to a topic.
"""

from __future__ import annotations

import logging
from typing import Any

from . import catalog as catalogs
from .config import JobConfig
from .contract import OperationRequest

log = logging.getLogger("floe.operation")


class OperationRefused(ValueError):
    """The operation cannot run on this table as asked: the message says what to change."""


def destination(config: JobConfig, table: str | None) -> JobConfig:
    """The config of the topic's table ``table`` (default: its own)."""
    found = [d for d in config.destinations() if table in (None, d.table.identifier)]
    if not found:
        raise OperationRefused(
            f"table {table} is not one of the topic's tables "
            f"({', '.join(d.table.identifier for d in config.destinations())})"
        )
    return found[0]


def _new_table(config: JobConfig, identifier: str) -> JobConfig:
    """``config`` on a new table ``identifier`` with its table's layout, made (or evolved)
    from the registry as the job makes its own; refused when a resource writes it."""
    from .ledger import OWNER
    from .prepare import prepare_table, registry_of

    landing = config.model_copy(
        update={"table": config.table.model_copy(update={"identifier": identifier})}
    )
    table = prepare_table(landing, registry_of(landing))
    owner = table.properties.get(OWNER)
    if owner is not None:
        raise OperationRefused(
            f"table {identifier} is written by {owner} (its table property "
            f"{OWNER}): backfill.into names a new table, or one no resource "
            "writes yet"
        )
    return landing


def operate(config: JobConfig, request: OperationRequest, spark: Any = None) -> dict[str, Any]:
    """Runs ``request`` on the topic of ``config``; returns the outcome it recorded."""
    from . import backfill, repair, replay
    from .prepare import registry_of
    from .session import build_session, spark_catalog_conf
    from .table_writer import TableWriter

    section = request.section
    target = destination(config, section.table)
    why = section.refused(config, target.table)
    if why is not None:
        raise OperationRefused(why)
    spark = spark or build_session(target)
    for key, value in {**spark_catalog_conf(target), "spark.sql.session.timeZone": "UTC"}.items():
        spark.conf.set(key, value)
    if request.type == "Replay":
        table = catalogs.load_catalog(target.catalog()).load_table(target.table.identifier)
        try:
            return replay.run(
                spark,
                target,
                request,
                table,
                f"{target.table.catalog.name}.{target.table.identifier}",
                registry_of(target),
            )
        except replay.ReplayRefused as refused:
            raise OperationRefused(str(refused)) from None
    dry_run = request.repair is not None and request.repair.dry_run
    writer = TableWriter(target, spark, registry_of(target), evolve=not dry_run)
    if request.type == "Backfill":
        landing = target
        if request.backfill is not None and request.backfill.into is not None:
            landing = _new_table(target, request.backfill.into)
            writer = TableWriter(landing, spark, registry_of(target))
        outcome = backfill.run(spark, config, landing, request, writer, target.table.identifier)
    else:
        outcome = repair.run(spark, target, request, writer, config.table.identifier)
    log.info(
        "operation %s (%s) on %s: %s", request.name, request.type, target.table.identifier, outcome
    )
    return outcome
