"""Schema evolution of the table's ``value`` column, by name, keeping field ids.

Additive changes are applied: a new field (anywhere in the value), int to long, float to double,
a wider decimal with the same scale.  A field that disappears from the registry schema keeps its
column (null in new rows).  Anything else is breaking: narrowing, a changed type, a changed
decimal scale, and (at the Avro level) a field added as required without a default.  Breaking
changes are refused with a reason that names each field and change; the operator waits for an
approval and the job keeps those records raw meanwhile.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StructType,
)


@dataclass(frozen=True)
class Change:
    path: str
    kind: str  # "add" | "widen" | "remove" | "narrow" | "incompatible" | "route"
    detail: str
    column: str | None = None  # "route": the column an approval kept the old type in

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


@dataclass(frozen=True)
class EvolutionPlan:
    changes: tuple[Change, ...]

    @property
    def breaking(self) -> tuple[Change, ...]:
        """Changes the table cannot take: narrowing and incompatible types."""
        return tuple(c for c in self.changes if c.kind in ("narrow", "incompatible"))

    @property
    def decodable(self) -> bool:
        """Whether values of the incoming schema fit the table (a narrower type does)."""
        return not any(c.kind == "incompatible" for c in self.changes)

    @property
    def is_additive(self) -> bool:
        return not self.breaking

    @property
    def needs_update(self) -> bool:
        return any(c.kind in ("add", "widen") for c in self.changes)

    @property
    def routes(self) -> dict[str, str]:
        """Field path -> the ``<name>_before_v<N>`` column its values go to (see
        :func:`plan_evolution`)."""
        return {c.path: c.column for c in self.changes if c.kind == "route" and c.column}

    def reason(self) -> str:
        return "; ".join(str(c) for c in self.breaking)


class BreakingChange(ValueError):
    """A schema change that evolution refuses; the message names the fields and changes."""

    def __init__(self, plan: EvolutionPlan, message: str | None = None):
        super().__init__(message or f"breaking schema change: {plan.reason()}")
        self.plan = plan


def _describe(t: IcebergType) -> str:
    if isinstance(t, StructType):
        return "struct"
    if isinstance(t, ListType):
        return f"list<{_describe(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{_describe(t.key_type)}, {_describe(t.value_type)}>"
    return str(t)


def _widens(old: IcebergType, new: IcebergType) -> bool:
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (
        isinstance(old, DecimalType)
        and isinstance(new, DecimalType)
        and new.scale == old.scale
        and new.precision > old.precision
    )


_BEFORE = re.compile(r"(?P<name>.+)_before_v(?P<version>[0-9]+)")


def _before_column(table: StructType, name: str, writer: IcebergType) -> str | None:
    """The newest ``<name>_before_v<N>`` column of ``table`` that takes ``writer`` values as
    they are (the same type, or a wider one): where an approved breaking change kept them."""
    found = []
    for field in table.fields:
        match = _BEFORE.fullmatch(field.name)
        if match and match["name"] == name:
            changes: list[Change] = []
            _compare(field.field_type, writer, "", changes, route=False)
            if all(c.kind in ("narrow", "remove") for c in changes):
                found.append((int(match["version"]), field.name))
    return max(found)[1] if found else None


def _compare(old: IcebergType, new: IcebergType, path: str, out: list[Change], route: bool) -> None:
    if isinstance(old, StructType) and isinstance(new, StructType):
        old_fields = {f.name: f for f in old.fields}
        new_fields = {f.name: f for f in new.fields}
        for name, field in new_fields.items():
            child = f"{path}.{name}" if path else name
            if name not in old_fields:
                out.append(Change(child, "add", f"new field of type {_describe(field.field_type)}"))
                continue
            changes: list[Change] = []
            _compare(old_fields[name].field_type, field.field_type, child, changes, route)
            before = (
                _before_column(old, name, field.field_type)
                if route and any(c.kind == "incompatible" for c in changes)
                else None
            )
            if before is not None:
                out.append(
                    Change(
                        child,
                        "route",
                        f"{_describe(field.field_type)} values go to "
                        f"{before}, kept by an approved change",
                        before,
                    )
                )
            else:
                out.extend(changes)
        for name in old_fields.keys() - new_fields.keys():
            child = f"{path}.{name}" if path else name
            out.append(Change(child, "remove", "no longer in the schema; the column is kept"))
        return
    if isinstance(old, ListType) and isinstance(new, ListType):
        _compare(old.element_type, new.element_type, f"{path}[]", out, route)
        return
    if isinstance(old, MapType) and isinstance(new, MapType):
        _compare(old.key_type, new.key_type, f"{path}{{key}}", out, route)
        _compare(old.value_type, new.value_type, f"{path}{{}}", out, route)
        return
    if old == new:
        return
    if _widens(old, new):
        out.append(Change(path, "widen", f"{_describe(old)} widened to {_describe(new)}"))
    elif _widens(new, old):
        out.append(Change(path, "narrow", f"{_describe(old)} narrowed to {_describe(new)}"))
    else:
        out.append(
            Change(path, "incompatible", f"type changed from {_describe(old)} to {_describe(new)}")
        )


def plan_evolution(
    table_value: StructType, incoming: StructType, *, route: bool = False, column: str = "value"
) -> EvolutionPlan:
    """Compares the table's value struct with the one mapped from a new registry schema.

    With ``route`` (a writer's records, not the registry's latest version), a field whose type
    an approved change replaced goes to the ``<name>_before_v<N>`` column that kept its type
    (a "route"), rather than being incompatible."""
    changes: list[Change] = []
    _compare(table_value, incoming, column, changes, route)
    return EvolutionPlan(tuple(changes))


def required_fields_added(
    old_avro: str | dict[str, Any], new_avro: str | dict[str, Any]
) -> list[Change]:
    """Top-level Avro fields the new schema adds as required with no default (breaking)."""
    old = json.loads(old_avro) if isinstance(old_avro, str) else old_avro
    new = json.loads(new_avro) if isinstance(new_avro, str) else new_avro
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return []
    known = {f["name"] for f in old.get("fields", [])}
    changes = []
    for field in new.get("fields", []):
        nullable = isinstance(field["type"], list) and "null" in field["type"]
        if field["name"] not in known and "default" not in field and not nullable:
            changes.append(
                Change(
                    f"value.{field['name']}", "incompatible", "added as required without a default"
                )
            )
    return changes


def value_struct(table: Any, column: str = "value") -> StructType | None:
    """The table's current value struct (None for a raw table), or another struct column's."""
    try:
        field = table.schema().find_field(column)
    except ValueError:
        return None
    assert isinstance(field.field_type, StructType)
    return field.field_type


def apply_evolution(table: Any, incoming: StructType) -> EvolutionPlan:
    """Evolves the table to take ``incoming`` values; raises BreakingChange when it cannot.

    Idempotent: a plan with nothing to add or widen commits nothing.
    """
    current = _value_or_refuse(table)
    plan = plan_evolution(current, incoming)
    if not plan.is_additive:
        raise BreakingChange(plan)
    if plan.needs_update:
        _union_value(table, incoming)
    return plan


def _value_or_refuse(table: Any, column: str = "value") -> StructType:
    current = value_struct(table, column)
    if current is None:
        raise BreakingChange(
            EvolutionPlan((Change(column, "incompatible", f"the table has no {column} column"),))
        )
    return current


def _union_value(table: Any, value: IcebergType, column: str = "value") -> None:
    with table.update_schema() as update:
        update.union_by_name(Schema(NestedField(1, column, value, required=False)))


def _keep_wider(old: IcebergType, new: IcebergType) -> IcebergType:
    """``new`` with every type that is narrower than in ``old`` replaced by the old one."""
    if isinstance(old, StructType) and isinstance(new, StructType):
        old_fields = {f.name: f for f in old.fields}
        return StructType(
            *[
                NestedField(
                    f.field_id,
                    f.name,
                    _keep_wider(old_fields[f.name].field_type, f.field_type)
                    if f.name in old_fields
                    else f.field_type,
                    required=f.required,
                    doc=f.doc,
                )
                for f in new.fields
            ]
        )
    if isinstance(old, ListType) and isinstance(new, ListType):
        return ListType(
            new.element_id,
            _keep_wider(old.element_type, new.element_type),
            element_required=new.element_required,
        )
    if isinstance(old, MapType) and isinstance(new, MapType):
        return MapType(
            new.key_id,
            new.key_type,
            new.value_id,
            _keep_wider(old.value_type, new.value_type),
            value_required=new.value_required,
        )
    return new if old == new or _widens(old, new) else old  # narrower, or routed: the table's


def evolve_for_writer(table: Any, writer: StructType, column: str = "value") -> EvolutionPlan:
    """What the job does on meeting a writer schema: evolve the table for its new fields and
    wider types, keep the table's wider types where the writer's are narrower (older data fits),
    send the values of a type an approved change replaced to the column that kept it, and
    refuse other incompatible types (BreakingChange) so those records are kept raw."""
    current = _value_or_refuse(table, column)
    plan = plan_evolution(current, writer, route=True, column=column)
    if not plan.decodable:
        raise BreakingChange(plan)
    if plan.needs_update:
        _union_value(table, _keep_wider(current, writer), column)
    return plan


class WouldEvolve(Exception):
    """A look that changes nothing (a repair's dry run) met a writer schema whose records
    decode only once the table evolves for it."""

    def __init__(self, plan: EvolutionPlan):
        super().__init__("; ".join(str(c) for c in plan.changes))
        self.plan = plan


def look_for_writer(table: Any, writer: StructType, column: str = "value") -> EvolutionPlan:
    """What :func:`evolve_for_writer` would do, doing nothing: raises WouldEvolve where it
    would evolve the table, BreakingChange where it would refuse the writer."""
    plan = plan_evolution(_value_or_refuse(table, column), writer, route=True, column=column)
    if not plan.decodable:
        raise BreakingChange(plan)
    if plan.needs_update:
        raise WouldEvolve(plan)
    return plan


def fit_without_evolution(table: Any, writer: StructType, column: str = "value") -> EvolutionPlan:
    """What the job does on meeting a writer schema under ``schemaEvolution: none``: the table
    keeps its schema; the writer's new fields are left out, and a writer whose values need the
    table to change (a wider or another type) is refused (BreakingChange), so its records are
    kept raw."""
    plan = plan_evolution(_value_or_refuse(table, column), writer, route=True, column=column)
    blocking = tuple(c for c in plan.changes if c.kind in ("widen", "incompatible"))
    if blocking:
        raise BreakingChange(
            EvolutionPlan(blocking),
            (
                "schemaEvolution.mode is none and the table would have to change: "
                + "; ".join(str(c) for c in blocking)
            ),
        )
    return EvolutionPlan(tuple(c for c in plan.changes if c.kind != "add"))


def apply_approved_breaking(table: Any, incoming: StructType, version: int) -> list[str]:
    """Applies an approved breaking version: each column whose type changed incompatibly is
    renamed to ``<name>_before_v<version>`` (its data stays there) and the new type takes the
    name; then the version's additive changes are applied.  Returns what was renamed.

    A changed type inside a list or map cannot be renamed apart and stays refused.
    """
    current = _value_or_refuse(table)
    plan = plan_evolution(current, incoming)
    incompatible = [c for c in plan.changes if c.kind == "incompatible"]
    nested = [c for c in incompatible if "[" in c.path or "{" in c.path]
    if nested:
        raise BreakingChange(EvolutionPlan(tuple(nested)))
    renamed = []
    if incompatible:
        with table.update_schema() as update:
            for change in incompatible:
                leaf = change.path.rsplit(".", 1)[-1]
                update.rename_column(change.path, f"{leaf}_before_v{version}")
                renamed.append(f"{change.path} -> {leaf}_before_v{version}")
    table.refresh()
    evolve_for_writer(table, incoming)
    return renamed
