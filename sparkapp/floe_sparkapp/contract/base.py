"""The contract's machinery: a :class:`Rule` (its CEL and the same check in Python, with one
message), the models' base (:class:`_Model`: camelCase aliases, frozen, each rule checked and
written into the JSON schema as ``x-kubernetes-validations``), the rules of durations and sizes,
and what several sections share: the patterns of a Kafka topic, a table's identifier and a field
path, and a Secret's reference."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ..units import (
    DURATION,
    DURATION_MAX_LENGTH,
    QUANTITY,
    cel_bytes,
    cel_seconds,
    seconds,
    size_bytes,
)

KAFKA_TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
FIELD_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


@dataclass(frozen=True)
class Rule:
    """A rule of one object: ``cel`` for the API server (``self`` is the object, ``oldSelf``
    the stored one; with ``on``, ``self`` is that property's value), ``holds`` the same check
    on the model for the operator and the job (None: a transition rule, which only the API
    server can check), one ``message``; ``field`` points the API server's error at the field
    to change."""

    cel: str
    message: str
    field: str = ""
    reason: str | None = None
    holds: Callable[[Any], bool] | None = None
    on: str = ""


def _cel(schema: dict[str, Any], model: type[_Model]) -> None:
    """The model's rules in its JSON schema, as the CRD's ``x-kubernetes-validations``."""
    for rule in model.RULES:
        entry = {"rule": rule.cel, "message": rule.message}
        if rule.field:
            entry["fieldPath"] = rule.field
        if rule.reason:
            entry["reason"] = rule.reason
        target = schema["properties"][rule.on] if rule.on else schema
        target.setdefault("x-kubernetes-validations", []).append(entry)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        json_schema_extra=_cel,
    )

    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _rules_hold(self) -> Any:
        for rule in type(self).RULES:
            if rule.holds is not None and not rule.holds(self):
                raise ValueError(rule.message)
        return self


def _snake(alias: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), alias)


def _matches(pattern: str) -> str:
    """CEL: the property matches its pattern (a bound is not checked on a value the pattern
    refused: CEL runs either way)."""
    return "self.matches('" + pattern.replace("\\", "\\\\") + "')"


def duration_rule(
    field: str,
    name: str,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    words: str = "",
) -> Rule:
    """A duration property's bounds, in seconds, checked on the property."""
    bounds = " && ".join(
        part
        for part in (
            f"{cel_seconds()} >= {float(at_least)}" if at_least is not None else "",
            f"{cel_seconds()} <= {float(at_most)}" if at_most is not None else "",
        )
        if part
    )

    def holds(model: Any) -> bool:
        value = getattr(model, _snake(field))
        if value is None:
            return True
        within = seconds(value)
        return (at_least is None or within >= at_least) and (at_most is None or within <= at_most)

    return Rule(f"!{_matches(DURATION)} || ({bounds})", f"{name} {words}", holds=holds, on=field)


def size_rule(field: str, name: str, at_least: int, words: str) -> Rule:
    """A size property's lower bound, in bytes, checked on the property."""
    return Rule(
        f"!{_matches(QUANTITY)} || {cel_bytes()} >= {float(at_least)}",
        f"{name} {words}",
        holds=lambda model: size_bytes(getattr(model, _snake(field))) >= at_least,
        on=field,
    )


def _duration(default: str | None, description: str) -> Any:
    return Field(
        default,
        pattern=DURATION,
        min_length=1,
        max_length=DURATION_MAX_LENGTH,
        description=description,
    )


FieldPath = Annotated[str, Field(pattern=FIELD_PATH, max_length=253)]


class SecretRef(_Model):
    name: str = Field(
        min_length=1, max_length=253, description="Name of a Secret in the resource's namespace."
    )
