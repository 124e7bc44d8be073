"""What to do about one KafkaIcebergTopic, decided from what was observed: a pure function.

``plan(topic, world, previous, settings, approved)`` returns the actions (:mod:`plan.actions`)
that bring the world to the spec and the status that describes it; :mod:`act` runs the actions,
:mod:`observe` builds the world (the values of :mod:`view`).  Nothing here talks to Kubernetes,
the catalog, the registry or Kafka, or reads the clock: the visit's time is the world's.

The decisions, in order, each in the module of the part of the world it decides on:

* **table** (:mod:`plan.table`): created when absent (from the registry's latest version);
  claimed for this resource when it has no writer; taken over when its writer is gone; refused
  (TableInUse) when another resource writes it; refused (LayoutMismatch) when floe did not make it;
* **schema** (:mod:`plan.table`): the one comparison the job uses too
  (:func:`floe_sparkapp.evolution.plan_evolution`): an additive version evolves the table, a
  breaking one waits for its approval annotation;
* **job** (:mod:`plan.job`, its ServiceAccount :mod:`plan.account`): which spec changes restart
  it is declared by the job fingerprint (the job config without the maintenance settings, and
  the SparkApplication); an application that ended is failed over with backoff, one that
  stopped on an exit code only the user can resolve is not;
* **maintenance** (:mod:`plan.maintenance`): one CronJob per enabled action, those of disabled
  actions removed;
* **progress** (:mod:`plan.progress`): the tables' snapshots, offsets, lag and freshness;
* **a stall** (:mod:`plan.health`): a running job that commits nothing for several intervals
  while Kafka has records for it turns Ready False (Stalled), saying what its driver does;
* **the last stable spec** (:mod:`plan.health`): the newest generation whose job landed is kept
  on the status; with ``spec.autoRollback``, a newer one whose job is not healthy within the
  window runs it instead;
* **publish** (:mod:`plan.table`): with ``table.branch``, main moved to the branch's snapshot
  the PUBLISH annotation names;
* **deletion** (``plan_delete``, :mod:`plan.deletion`): the job removed and waited for, then the
  tables dropped when the deletionPolicy says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import redact
from ..render import Topic
from ..settings import OperatorSettings
from ..status import Observation, status
from ..view import World
from .actions import (
    Action,
    Apply,
    ApplyApproved,
    ClaimTable,
    CreateApp,
    CreateTable,
    Decisions,
    DeleteApp,
    DeleteCronJob,
    DropTable,
    EnsureAccount,
    Event,
    EvolveTable,
    Log,
    Plan,
    PublishBranch,
    Wait,
)
from .deletion import plan_delete
from .health import healthy, plan_rollback, plan_stall, stall_seconds, stalled_since
from .job import STOPPED_FOR_THE_USER, Failovers, failover_delay, plan_job, stopped_for_the_user
from .maintenance import plan_maintenance
from .progress import plan_progress
from .table import plan_publish, plan_schema, plan_table

__all__ = [
    "STOPPED_FOR_THE_USER",
    "Action",
    "Apply",
    "ApplyApproved",
    "ClaimTable",
    "CreateApp",
    "CreateTable",
    "DeleteApp",
    "DeleteCronJob",
    "DropTable",
    "EnsureAccount",
    "Event",
    "EvolveTable",
    "Failovers",
    "Log",
    "Plan",
    "PublishBranch",
    "Wait",
    "failover_delay",
    "healthy",
    "invalid",
    "plan",
    "plan_delete",
    "stall_seconds",
    "stalled_since",
    "stopped_for_the_user",
]


def plan(
    topic: Topic,
    world: World,
    previous: Mapping[str, Any],
    settings: OperatorSettings,
    approved: str | None = None,
) -> Plan:
    """The actions and the status for one visit of ``topic``, whose world is ``world``."""
    previous = dict(previous or {})
    spec = topic.spec
    decided = Decisions()
    decided.say(
        generation=topic.generation,
        suspended=spec.suspend,
        now_ms=world.now_ms,
        dead_letter_topic=spec.dead_letter.topic if spec.dead_letter else None,
    )
    in_use = plan_table(topic, world, decided)
    if not in_use:
        plan_schema(topic, world, decided, approved)
    if in_use or world.table.layout_error:  # no job and no maintenance on another's table
        decided.say(app_name=topic.child_name)
        if world.children.app is not None:
            decided.act(DeleteApp(topic.child_name))
    else:
        plan_job(topic, world, previous, settings, decided)
        plan_maintenance(topic, world, settings, decided)
        plan_progress(topic, world, decided, previous)
        plan_stall(topic, world, settings, decided)
        plan_rollback(topic, world, previous, settings, decided)
        plan_publish(topic, world, previous, decided)
    observed = Observation(**decided.observed)
    return Plan(
        tuple(decided.actions),
        redact.redact_all(status(observed, previous)),
        world.table.new_commits if world.table.exists else 0,
        (observed.offsets or {}).get("lag"),
    )


def invalid(topic_generation: int, message: str, previous: Mapping[str, Any], now_ms: int) -> Plan:
    """The plan for a spec that cannot be rendered: nothing is done, the status says why."""
    return Plan(
        (),
        status(Observation(topic_generation, invalid_spec=message, now_ms=now_ms), dict(previous)),
    )
