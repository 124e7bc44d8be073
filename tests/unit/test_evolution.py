"""Schema evolution of the value column: additive changes applied, breaking ones refused."""

from __future__ import annotations

import pytest

from floe_sparkapp.avro_types import avro_to_iceberg
from floe_sparkapp.catalog import load_catalog
from floe_sparkapp.contract import CatalogSpec, TableSpec
from floe_sparkapp.evolution import (
    BreakingChange,
    apply_evolution,
    plan_evolution,
    required_fields_added,
    value_struct,
)
from floe_sparkapp.layout import ensure_table

pytestmark = pytest.mark.unit


def record(*fields):
    return {"type": "record", "name": "Order", "fields": list(fields)}


V1 = record(
    {"name": "id", "type": "int"},
    {"name": "price", "type": "float"},
    {
        "name": "amount",
        "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
    },
    {
        "name": "customer",
        "type": {"type": "record", "name": "C", "fields": [{"name": "name", "type": "string"}]},
    },
)


@pytest.fixture
def table(tmp_path):
    catalog = CatalogSpec(
        uri=f"jdbc:sqlite:{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}"
    )
    created, _ = ensure_table(
        load_catalog(catalog),
        TableSpec(catalog=catalog, identifier="db.orders"),
        avro_to_iceberg(V1).struct,
    )
    return created


def test_additive_changes_evolve_the_table_by_name_keeping_field_ids(table):
    before = {f.name: f.field_id for f in value_struct(table).fields}
    v2 = record(
        {"name": "id", "type": "long"},
        {"name": "price", "type": "double"},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 2},
        },
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "C",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "email", "type": ["null", "string"], "default": None},
                ],
            },
        },
        {"name": "note", "type": ["null", "string"], "default": None},
    )

    plan = apply_evolution(table, avro_to_iceberg(v2).struct)

    assert sorted(str(c) for c in plan.changes) == [
        "value.amount: decimal(10, 2) widened to decimal(18, 2)",
        "value.customer.email: new field of type string",
        "value.id: int widened to long",
        "value.note: new field of type string",
        "value.price: float widened to double",
    ]
    table.refresh()
    after = value_struct(table)
    assert {f.name: f.field_id for f in after.fields if f.name in before} == before
    assert str(after.field_by_name("id").field_type) == "long"
    assert [f.name for f in after.field_by_name("customer").field_type.fields] == ["name", "email"]
    # Applying the same schema again changes nothing.
    snapshot_schema = table.schema().schema_id
    assert not apply_evolution(table, avro_to_iceberg(v2).struct).needs_update
    table.refresh()
    assert table.schema().schema_id == snapshot_schema


def test_a_dropped_field_keeps_its_column(table):
    v2 = record(
        {"name": "id", "type": "int"},
        {"name": "price", "type": "float"},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
    )
    plan = apply_evolution(table, avro_to_iceberg(v2).struct)
    assert [str(c) for c in plan.changes] == [
        "value.customer: no longer in the schema; the column is kept"
    ]
    table.refresh()
    assert value_struct(table).field_by_name("customer") is not None


@pytest.mark.parametrize(
    "field, expected",
    [
        ({"name": "id", "type": "string"}, "value.id: type changed from int to string"),
        ({"name": "price", "type": "int"}, "value.price: type changed from float to int"),
        (
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3},
            },
            "value.amount: type changed from decimal(10, 2) to decimal(10, 3)",
        ),
        (
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2},
            },
            "value.amount: decimal(10, 2) narrowed to decimal(8, 2)",
        ),
        (
            {"name": "customer", "type": "string"},
            "value.customer: type changed from struct to string",
        ),
    ],
)
def test_breaking_changes_are_refused_with_the_field_and_change(table, field, expected):
    fields = [f for f in V1["fields"] if f["name"] != field["name"]] + [field]
    schema_before = table.schema()

    with pytest.raises(BreakingChange) as refused:
        apply_evolution(table, avro_to_iceberg(record(*fields)).struct)

    assert str(refused.value) == f"breaking schema change: {expected}"
    table.refresh()
    assert table.schema() == schema_before


def test_narrowing_long_to_int_is_breaking():
    wide = avro_to_iceberg(record({"name": "n", "type": "long"})).struct
    narrow = avro_to_iceberg(record({"name": "n", "type": "int"})).struct
    assert plan_evolution(wide, narrow).reason() == "value.n: long narrowed to int"


def test_a_field_added_as_required_without_default_is_breaking_at_the_avro_level():
    v2 = record(
        *V1["fields"],
        {"name": "must", "type": "string"},
        {"name": "fine", "type": "string", "default": ""},
        {"name": "maybe", "type": ["null", "int"]},
    )
    assert [str(c) for c in required_fields_added(V1, v2)] == [
        "value.must: added as required without a default"
    ]


def test_an_existing_table_that_is_not_floes_is_refused(tmp_path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from floe_sparkapp.layout import LayoutMismatch

    catalog = CatalogSpec(
        uri=f"jdbc:sqlite:{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}"
    )
    opened = load_catalog(catalog)
    opened.create_namespace("db")
    opened.create_table("db.other", Schema(NestedField(1, "id", LongType())))

    with pytest.raises(LayoutMismatch) as refused:
        ensure_table(
            opened, TableSpec(catalog=catalog, identifier="db.other"), avro_to_iceberg(V1).struct
        )
    assert str(refused.value) == (
        "table db.other exists but is not a floe table: it has no column(s) kafka, key, value, "
        "value_error, value_raw. Point table.identifier at a new table, or drop this one."
    )


def test_an_approved_breaking_version_keeps_the_old_column_under_a_new_name(table):
    fields = [f for f in V1["fields"] if f["name"] != "id"] + [{"name": "id", "type": "string"}]
    old_id = value_struct(table).field_by_name("id").field_id

    from floe_sparkapp.evolution import apply_approved_breaking

    renamed = apply_approved_breaking(table, avro_to_iceberg(record(*fields)).struct, version=3)

    assert renamed == ["value.id -> id_before_v3"]
    table.refresh()
    value = value_struct(table)
    assert value.field_by_name("id_before_v3").field_id == old_id  # the old data stays
    assert str(value.field_by_name("id").field_type) == "string"
    assert plan_evolution(value, avro_to_iceberg(record(*fields)).struct).decodable


def test_an_older_writer_after_approved_changes_goes_to_the_column_that_kept_its_type(table):
    from floe_sparkapp.evolution import apply_approved_breaking, evolve_for_writer

    def with_id(kind):
        return avro_to_iceberg(
            record(*[f for f in V1["fields"] if f["name"] != "id"], {"name": "id", "type": kind})
        ).struct

    apply_approved_breaking(table, with_id("string"), version=3)  # int -> string
    table.refresh()
    apply_approved_breaking(table, with_id("boolean"), version=5)  # string -> boolean
    table.refresh()
    value = value_struct(table)
    assert {f.name: str(f.field_type) for f in value.fields if f.name.startswith("id")} == {
        "id": "boolean",
        "id_before_v3": "int",
        "id_before_v5": "string",
    }

    assert plan_evolution(value, with_id("int"), route=True).routes == {"value.id": "id_before_v3"}
    assert plan_evolution(value, with_id("string"), route=True).routes == {
        "value.id": "id_before_v5"
    }
    assert plan_evolution(value, with_id("boolean"), route=True).routes == {}
    # The registry's latest version is never routed: a new type still needs an approval.
    assert not plan_evolution(value, with_id("int")).decodable
    # A writer with no column of its type is refused, and the job's evolution changes nothing.
    with pytest.raises(BreakingChange):
        evolve_for_writer(table, with_id("double"))
    schema_id = table.schema().schema_id
    evolve_for_writer(table, with_id("int"))
    table.refresh()
    assert table.schema().schema_id == schema_id


def test_partition_fields_are_made_and_evolved_as_the_spec_says(tmp_path):
    from floe_sparkapp.layout import LayoutMismatch, evolve_partitioning

    catalog = CatalogSpec(
        uri=f"jdbc:sqlite:{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}"
    )
    opened = load_catalog(catalog)
    spec = TableSpec(
        catalog=catalog,
        identifier="db.parts",
        partition_by=("bucket(8, value.id)", "truncate(3, value.customer.name)"),
    )
    table, _ = ensure_table(opened, spec, avro_to_iceberg(V1).struct)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("kafka_timestamp_day", "day"),
        ("value_id_bucket_8", "bucket[8]"),
        ("value_customer_name_truncate_3", "truncate[3]"),
    ]
    assert evolve_partitioning(table, spec) == []  # the same fields: no new spec

    changed = spec.model_copy(
        update={"partitioning": "hour", "partition_by": ("value.customer.name",)}
    )
    assert evolve_partitioning(table, changed) == [
        "partition field kafka_timestamp_day removed",
        "partition field value_id_bucket_8 removed",
        "partition field value_customer_name_truncate_3 removed",
        "partitioned by hour(kafka.timestamp) as kafka_timestamp_hour",
        "partitioned by identity(value.customer.name) as value_customer_name",
    ]
    table.refresh()
    assert [f.name for f in table.spec().fields if str(f.transform) != "void"] == [
        "kafka_timestamp_hour",
        "value_customer_name",
    ]
    assert len(table.specs()) == 2

    with pytest.raises(LayoutMismatch, match=r"has no column value.region to partition by"):
        evolve_partitioning(table, spec.model_copy(update={"partition_by": ("value.region",)}))


def test_an_upsert_tables_key_columns_and_operation_field_must_be_fields_of_the_value(tmp_path):
    from floe_sparkapp.contract import OpSpec
    from floe_sparkapp.layout import LayoutMismatch

    catalog = CatalogSpec(
        uri=f"jdbc:sqlite:{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}"
    )
    opened = load_catalog(catalog)
    value = avro_to_iceberg(V1).struct
    fields = ", ".join(f.name for f in value.fields)
    spec = TableSpec(
        catalog=catalog,
        identifier="db.customers",
        mode="upsert",
        key_columns=("id",),
        op=OpSpec(field="action"),
    )
    with pytest.raises(LayoutMismatch) as refused:
        ensure_table(opened, spec, value)
    assert str(refused.value) == (
        f"table.op.field: the value has no field action (the value's fields: {fields}). Name "
        "single-valued fields of the value."
    )
    header = spec.model_copy(update={"op": OpSpec(header="op")})
    table, _created = ensure_table(opened, header, value)
    assert table.properties["floe.mode"] == "upsert"


def test_a_table_made_before_the_ingest_timestamp_gets_it_when_opened(tmp_path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StructType, TimestamptzType

    from floe_sparkapp.layout import lineage_struct, table_schema

    catalog = CatalogSpec(
        uri=f"jdbc:sqlite:{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}"
    )
    opened = load_catalog(catalog)
    opened.create_namespace("db")
    current = table_schema(avro_to_iceberg(V1).struct)
    older = StructType(*[f for f in lineage_struct().fields if f.name != "ingest_timestamp"])
    opened.create_table(
        "db.orders",
        Schema(
            NestedField(1, "kafka", older, required=True),
            *[f for f in current.fields if f.name != "kafka"],
        ),
    )

    table, created = ensure_table(
        opened, TableSpec(catalog=catalog, identifier="db.orders"), avro_to_iceberg(V1).struct
    )
    assert not created
    lineage = table.schema().find_field("kafka").field_type
    assert [f.name for f in lineage.fields] == [f.name for f in lineage_struct().fields]
    added = lineage.field_by_name("ingest_timestamp")
    assert added.field_type == TimestamptzType() and not added.required
    assert opened.load_table("db.orders").schema() == table.schema()
