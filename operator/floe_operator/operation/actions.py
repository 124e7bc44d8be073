"""What the operation's planner asks for (:mod:`act` runs it): a roll back's commit, the
topic's job restarted, an attempt's SparkApplication created or deleted; and the plan, the
actions with the status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RollBack:
    """Move ``main`` of ``table`` from ``from_snapshot_id`` to ``to_snapshot_id``, recording
    ``record`` (one commit)."""

    table: str
    from_snapshot_id: int
    to_snapshot_id: int
    record: dict[str, Any] = field(compare=False)


@dataclass(frozen=True)
class RestartJob:
    """Set the topic's restart annotation to ``value``: its job starts again once."""

    topic: str
    value: str


@dataclass(frozen=True)
class StartRun:
    """Create attempt ``attempt``'s SparkApplication."""

    attempt: int


@dataclass(frozen=True)
class DeleteRun:
    """Delete an ended attempt's SparkApplication (and its pods)."""

    name: str


OperationAction = RollBack | RestartJob | StartRun | DeleteRun


@dataclass(frozen=True)
class OperationPlan:
    actions: tuple[OperationAction, ...]
    status: dict[str, Any]
