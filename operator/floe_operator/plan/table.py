"""The planner's decisions on the table: created when absent, claimed, taken over or refused
(another resource writes it); its schema against the registry's latest version; and, with
``table.branch``, main published from the branch when the PUBLISH annotation asks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from floe_sparkapp.evolution import plan_evolution

from ..clock import iso
from ..names import APPROVAL
from ..render import Topic
from ..view import World
from .actions import (
    ApplyApproved,
    ClaimTable,
    CreateTable,
    Decisions,
    Event,
    EvolveTable,
    PublishBranch,
)


def plan_table(topic: Topic, world: World, decided: Decisions) -> bool:
    """Table actions; True when another resource writes the table."""
    table, registry = world.table, world.registry
    if table.error:
        decided.say(table_error=table.error)
    if registry is not None and registry.error:
        decided.say(registry_error=registry.error)
    if table.layout_error:
        decided.say(layout_error=table.layout_error)
    if registry is not None:
        decided.say(registry_version=registry.version)
    if not table.exists:
        if not table.error and not (registry and registry.value is None):
            decided.act(CreateTable())
        return False
    if table.error or table.layout_error or table.owner == topic.writer:
        return False  # a table that could not be read is not claimed either
    if table.owner is None:
        decided.act(ClaimTable())
        return False
    if world.owner_claims_table:
        decided.say(
            table_in_use=(
                f"table {topic.spec.table.identifier} is written by KafkaIcebergTopic "
                f"{table.owner}; one table has one writer: point spec.table.identifier at another "
                f"table, or delete {table.owner} (with deletionPolicy Retain its table stays) and "
                "this resource takes it over"
            )
        )
        return True
    decided.act(
        ClaimTable(taking_over_from=table.owner),
        Event(
            False,
            "TableAdopted",
            (
                f"table {topic.spec.table.identifier} was written by {table.owner}, which is gone: "
                f"this resource takes it over and goes on from the offsets committed for Kafka "
                f"topic {topic.spec.kafka.topic}"
            ),
        ),
    )
    return False


def plan_schema(topic: Topic, world: World, decided: Decisions, approved: str | None) -> None:
    table, registry = world.table, world.registry
    if (
        registry is None
        or registry.value is None
        or not table.exists
        or table.error
        or table.layout_error
        or topic.spec.schema_evolution.mode != "additive"
    ):
        return
    version = registry.version
    source = f"registry version {version}" if version is not None else "the declared value.columns"
    if world.schema_applied:
        decided.say(schema_in_sync=True, schema_message=world.schema_applied)
        return
    evolution = plan_evolution(table.value, registry.value) if table.value is not None else None
    if evolution is not None and evolution.is_additive:
        decided.say(schema_in_sync=True, schema_message=f"table matches {source}")
        if evolution.needs_update:
            decided.act(EvolveTable(version, tuple(str(c) for c in evolution.changes)))
        return
    if approved is not None and approved == str(version) and version is not None:
        decided.act(ApplyApproved(version))
        return
    changes = (
        tuple(str(c) for c in evolution.breaking)
        if evolution is not None
        else ("value: the table has no value column (raw)",)
    )
    reason = "breaking schema change: " + "; ".join(changes)
    until = (
        f' until the annotation {APPROVAL}: "{version}" approves the change'
        if version is not None
        else ": declare the column's type as the table has it"
    )
    decided.say(
        schema_in_sync=False,
        schema_change=(version, changes) if version is not None else None,
        schema_message=(
            f"{source}: {reason}; the table keeps its schema and those "
            f"records land in value_raw{until}"
        ),
    )


def plan_publish(
    topic: Topic, world: World, previous: Mapping[str, Any], decided: Decisions
) -> None:
    """With ``table.branch``: the branch and main on the status, and a new value of the
    PUBLISH annotation published once (main fast-forwarded to the snapshot it names, or to the
    branch's head: :class:`PublishBranch`, whose Event says how it went), its outcome kept on
    the status until the next."""
    branch = world.table.branch
    if topic.spec.table.branch is None or branch is None:
        return
    shown: dict[str, Any] = {"name": branch.name, "unpublishedCommits": branch.unpublished}
    for key, value in (
        ("snapshotId", branch.head_snapshot_id),
        ("mainSnapshotId", branch.main_snapshot_id),
    ):
        if value is not None:
            shown[key] = str(value)
    last = (previous.get("branch") or {}).get("lastPublish")
    request = topic.publish
    if world.published is not None and world.published[0] == request:
        _, main_id, error = world.published
        last = {
            "request": request,
            "at": iso(world.now_ms / 1000),
            **({"snapshotId": str(main_id)} if main_id is not None else {}),
            **({"error": error} if error else {}),
        }
    elif request is not None and request != (last or {}).get("request"):
        decided.act(PublishBranch(request, int(request) if request.isdigit() else None))
    if last:
        shown["lastPublish"] = last
    decided.say(branch=shown)
