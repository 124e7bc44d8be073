"""An existing table checked against the layout floe writes (:class:`LayoutMismatch`)."""

from __future__ import annotations

from typing import Any

from pyiceberg.types import StructType

from ..contract import ROW_LEVEL, TableLayout
from .columns import KEY_FIELDS
from .properties import MODE


class LayoutMismatch(ValueError):
    """The table exists but is not laid out the way floe writes it."""


def check_layout(
    existing: Any, table: TableLayout, value: StructType | None, key: StructType | None = None
) -> None:
    """Refuses an existing table that lacks floe's columns (it was made by something else)."""
    names = {f.name for f in existing.schema().fields}
    wanted = {"kafka", "key", "value_raw", "value_error"} | (
        {"value"} if value is not None else set()
    )
    if key is not None and KEY_FIELDS not in names:
        raise LayoutMismatch(
            f"table {table.identifier} was made without a {KEY_FIELDS} column, and key.format "
            "says the key is decoded: a table keeps the columns it was made with. Point "
            "table.identifier at a new table, or set key.format back to raw."
        )
    if table.mode == "cdc":
        wanted.add("cdc")
    missing = sorted(wanted - names)
    if missing:
        raise LayoutMismatch(
            f"table {table.identifier} exists but is not a floe table: it has no column(s) "
            f"{', '.join(missing)}. Point table.identifier at a new table, or drop this one."
        )
    check_keys(existing, table)
    made_for = existing.properties.get(MODE, "append")
    if made_for != table.mode:
        raise LayoutMismatch(
            f"table {table.identifier} was made for mode {made_for}, the spec says "
            f"{table.mode}: a table keeps the mode it was made with. Point table.identifier at "
            "a new table, or set the mode back."
        )
    lineage = existing.schema().find_field("kafka").field_type
    lineage_names = {f.name for f in getattr(lineage, "fields", [])}
    missing = sorted({"topic", "partition", "offset", "timestamp"} - lineage_names)
    if missing:
        raise LayoutMismatch(
            f"table {table.identifier} exists but its kafka column lacks {', '.join(missing)}"
        )


def check_keys(existing: Any, table: TableLayout) -> None:
    """An upsert's key columns, and its operation field, are primitive fields of the value."""
    if table.mode not in ROW_LEVEL:
        return
    named = [("keyColumns", column) for column in table.key_columns]
    if table.op is not None and table.op.field:
        named.append(("op.field", table.op.field))
    if not named:
        return
    schema = existing.schema()
    problems = []
    for setting, column in named:
        try:
            found = schema.find_field(f"value.{column}")
        except ValueError:
            problems.append((setting, f"the value has no field {column}"))
            continue
        if not found.field_type.is_primitive:
            problems.append((setting, f"{column} is a {found.field_type}, not a single value"))
    if problems:
        value = (
            schema.find_field("value").field_type
            if "value" in {f.name for f in schema.fields}
            else None
        )
        fields = ", ".join(f.name for f in getattr(value, "fields", []))
        settings = sorted({setting for setting, _ in problems})
        raise LayoutMismatch(
            f"table.{' and table.'.join(settings)}: "
            f"{'; '.join(problem for _, problem in problems)} (the value's "
            f"fields: {fields or 'none'}). Name single-valued fields of "
            "the value."
        )
