"""Routing (``routes``): one topic's records to several tables by a field of the value.

A route names a field (a dotted path in the value as its writer wrote it: Debezium's
``source.table``, or a field of the record such as ``region``), the values it takes and the
table those records go to; the first route that matches wins (with ``fanOut``, every route that
matches takes the record), and the topic's own table takes every record no route matches,
undecodable ones and tombstones included (they have no field to route by).

The route is decided from each record's own writer schema, before any table is planned or
evolved: an Avro value is decoded once per writer schema id, the field read from that, and the
decoded columns kept for the tables' own projections.  So a table only ever sees, and is
evolved by, the writer schemas of records routed to it.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from . import schemas
from .avro_types import SchemaMappingError
from .config import JobConfig
from .decode import decode_writers, decoded_field, frame
from .registry import Registry
from .schemas import FORMATS, Writer

ROUTE = "_route"  # the record's tables: 0 the topic's own; n routes[n - 1]'s


def routed(
    batch: DataFrame, config: JobConfig, registry: Registry | None, schema_ids: list[int]
) -> DataFrame:
    """The batch with ``_route`` (and, for Avro, its values decoded per writer schema id)."""
    writers = _writers(registry, schema_ids, config) if registry is not None else {}
    df = decode_writers(frame(batch), writers)

    def decoded(path: str) -> list[Column]:
        return [
            c
            for i, writer in writers.items()
            if (c := decoded_field(df, i, writer, path)) is not None
        ]

    if config.value.format == "json":  # plain JSON: read where it is, bare or in a payload
        text = F.when(F.col("_schema_id").isNull(), F.col("value")).cast("string")

        def field_of(path: str) -> Column:
            return F.coalesce(
                *decoded(path),
                F.get_json_object(text, f"$.{path}"),
                F.get_json_object(text, f"$.payload.{path}"),
            )
    else:

        def field_of(path: str) -> Column:
            found = decoded(path)
            return F.coalesce(*found) if found else F.lit(None).cast("string")

    fields: dict[str, Column] = {}
    matches = []
    for number, rule in enumerate(config.routes, start=1):
        value = fields.setdefault(rule.field, field_of(rule.field))
        matches.append(F.when(value.isin(*rule.values), F.lit(number)))
    found = F.filter(F.array(*matches), lambda number: number.isNotNull())
    if not config.fan_out:
        found = F.slice(found, 1, 1)
    if config.key.framed:
        df = frame(df, "key")
    return df.withColumn(ROUTE, F.when(F.size(found) == 0, F.array(F.lit(0))).otherwise(found))


def _writers(registry: Registry, schema_ids: list[int], config: JobConfig) -> dict[int, Writer]:
    """How the batch's writer schemas that decode are read; records of the others cannot be
    routed, and their table keeps them raw with the reason."""
    writers = {}
    for schema_id in schema_ids:
        found = registry.by_id(schema_id)
        if found is None or found.schema_type.upper() != FORMATS[config.value.format]:
            continue
        try:
            writers[schema_id] = schemas.mapped(  # read as the table writer reads them
                found, message=config.value.message, coerce=config.value.conversions
            )[1]
        except SchemaMappingError:
            continue
    return writers


def split(
    routed_batch: DataFrame, config: JobConfig, tables: int
) -> list[tuple[DataFrame, list[int], list[int]]]:
    """Each table's records and the writer schema ids among their values and keys, in the
    order of :meth:`~floe_sparkapp.config.JobConfig.destinations`."""
    columns = {
        name: column
        for name, column, fmt in (
            ("ids", "_schema_id", config.value.format),
            ("keys", "_key_schema_id", config.key.format),
        )
        if fmt != "raw" and not (name == "keys" and fmt == "json")
    }
    found: dict[int, Any] = {}
    if columns:
        records = routed_batch.select(F.explode(ROUTE).alias(ROUTE), *columns.values())
        found = {
            int(row[ROUTE]): row
            for row in records.groupBy(ROUTE)
            .agg(*[F.collect_set(column).alias(name) for name, column in columns.items()])
            .collect()
        }

    def ids(number: int, name: str) -> list[int]:
        row = found.get(number)
        return sorted(row[name]) if row is not None and name in columns else []

    return [
        (
            routed_batch.filter(F.array_contains(ROUTE, number)),
            ids(number, "ids"),
            ids(number, "keys"),
        )
        for number in range(tables)
    ]
