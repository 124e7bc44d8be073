"""What a plan holds: the actions that bring the world to the spec (:mod:`act` runs them), the
plan itself, and the decisions the planner's parts add to as they go."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CreateTable:
    """Create the table (from the registry's latest value type) and claim it."""


@dataclass(frozen=True)
class ClaimTable:
    """Record this resource as the table's writer; ``taking_over_from``: a writer that is gone."""

    taking_over_from: str | None = None


@dataclass(frozen=True)
class EvolveTable:
    """Apply the registry's latest version (additive changes)."""

    version: int | None
    changes: tuple[str, ...]


@dataclass(frozen=True)
class ApplyApproved:
    """Apply a breaking version its annotation approved."""

    version: int


@dataclass(frozen=True)
class PublishBranch:
    """Move main to the table.branch's snapshot ``snapshot_id`` (None: its head), for the
    PUBLISH annotation's value ``request``."""

    request: str
    snapshot_id: int | None = None


@dataclass(frozen=True)
class Apply:
    """Create or replace a child kept as rendered (the job ConfigMap, a maintenance CronJob);
    ``digest`` is the hash it is stamped with."""

    kind: str
    name: str
    digest: str
    body: dict[str, Any] = field(compare=False)


@dataclass(frozen=True)
class CreateApp:
    body: dict[str, Any] = field(compare=False)
    name: str = ""
    announce: bool = True  # a JobCreated Event (not for a failover, which has its own)


@dataclass(frozen=True)
class EnsureAccount:
    """Make the driver's ServiceAccount and its RoleBinding to ClusterRole ``role``, or add
    this resource to their owners."""

    name: str
    role: str


@dataclass(frozen=True)
class DeleteApp:
    name: str
    why: str = ""  # for the operator's log


@dataclass(frozen=True)
class DeleteCronJob:
    name: str


@dataclass(frozen=True)
class Event:
    """An Event on the resource (and a line in the operator's log)."""

    warning: bool
    reason: str
    message: str


@dataclass(frozen=True)
class DropTable:
    """Purge a table (deletionPolicy Delete)."""

    identifier: str


@dataclass(frozen=True)
class Wait:
    """Come back in ``delay`` seconds (a deletion waiting for the job to stop)."""

    why: str
    delay: float = 2


@dataclass(frozen=True)
class Log:
    """A line in the operator's log (the resource is going: no Event)."""

    message: str
    warning: bool = False


Action = (
    CreateTable
    | ClaimTable
    | EvolveTable
    | ApplyApproved
    | PublishBranch
    | Apply
    | CreateApp
    | DeleteApp
    | DeleteCronJob
    | EnsureAccount
    | Event
    | DropTable
    | Wait
    | Log
)


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    status: dict[str, Any]
    new_commits: int = 0
    lag: int | None = None  # the lag this visit saw (the status may show an older one)


@dataclass
class Decisions:
    """What the planner decided so far: the actions, and what the status will say."""

    actions: list[Action] = field(default_factory=list)
    observed: dict[str, Any] = field(default_factory=dict)

    def act(self, *actions: Action) -> None:
        self.actions.extend(actions)

    def say(self, **fields: Any) -> None:
        self.observed.update(fields)
