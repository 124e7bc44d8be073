"""value.coerce's types on the table: the declared type, optional, the field id kept."""

from __future__ import annotations

import pytest
from pyiceberg.types import (
    DecimalType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from floe_sparkapp.coercion import coerced_struct, iceberg_type
from floe_sparkapp.contract import Coercion, ValueSpec

pytestmark = [pytest.mark.unit]


def test_coerced_fields_get_the_declared_type_and_become_optional():
    meta = StructType(
        NestedField(4, "seen", StringType(), required=True),
        NestedField(5, "tags", StringType(), required=True),
    )
    struct = StructType(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "amount", StringType(), required=True, doc="money"),
        NestedField(3, "meta", meta, required=True),
    )
    coerce = ValueSpec(
        format="json",
        infer_schema=True,
        coerce=(
            Coercion(field="amount", to="decimal(10, 2)"),
            Coercion(field="meta.seen", to="timestamp"),
            Coercion(field="meta", to="long"),  # a record keeps its type
            Coercion(field="absent", to="long"),
        ),
    ).conversions
    assert coerced_struct(struct, coerce) == StructType(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "amount", DecimalType(10, 2), required=False, doc="money"),
        NestedField(
            3,
            "meta",
            StructType(
                NestedField(4, "seen", TimestamptzType(), required=False),
                NestedField(5, "tags", StringType(), required=True),
            ),
            required=True,
        ),
    )


@pytest.mark.parametrize(
    "to",
    [
        "int",
        "long",
        "float",
        "double",
        "decimal(38,0)",
        "decimal(9, 9)",
        "timestamp",
        "binary",
        "string",
    ],
)
def test_every_type_the_crd_allows_maps_to_an_iceberg_type(to):
    assert iceberg_type(Coercion(field="f", to=to).to) is not None


@pytest.mark.parametrize("to", ["decimal(39, 2)", "decimal(0, 0)", "number", "timestamp_ntz"])
def test_other_types_are_refused(to):
    with pytest.raises(ValueError):
        Coercion(field="f", to=to)
