"""Whether the job lands: a stall (a running job that commits nothing while Kafka has records
for it) turns Ready False, the newest generation whose job is healthy is kept as the last
stable spec, and with ``spec.autoRollback`` a newer one that is not healthy in time runs it
instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import render
from ..appstate import AppState
from ..clock import epoch, iso
from ..render import Topic
from ..settings import OperatorSettings
from ..view import World
from .actions import Decisions, Event
from .job import Failovers
from .progress import lag_of


def healthy(topic: Topic, world: World, settings: OperatorSettings) -> bool:
    """Whether the job this spec renders runs and lands: it has committed since it started, or
    has nothing to land. (A spec change that renders the same job, as a change back to the
    spec that runs, keeps the job and is as healthy as it is.)"""
    app, table = world.children.app, world.table
    if (
        app is None
        or app.state != AppState.RUNNING
        or app.started_ms is None
        or app.fingerprint != render.desired(topic, settings).fingerprint
        or not table.exists
    ):
        return False
    committed = table.committed_at_ms is not None and table.committed_at_ms >= app.started_ms
    return committed or lag_of(world) == 0


def stall_seconds(topic: Topic, settings: OperatorSettings) -> float:
    """How long a running job may go without a commit before it is called stalled."""
    return max(
        settings.stall_intervals * topic.spec.commit.interval_seconds, settings.stall_min_seconds
    )


def stalled_since(topic: Topic, world: World, settings: OperatorSettings) -> int | None:
    """When the job last made progress (epoch ms: its newest commit to any of the resource's
    tables, or its application's start), if that is longer ago than :func:`stall_seconds`
    while it runs and Kafka has records past the tables' offsets; None otherwise."""
    app = world.children.app
    if topic.spec.suspend or app is None or app.state != AppState.RUNNING or not world.table.exists:
        return None
    lag = lag_of(world)
    if lag is None or lag <= 0:
        return None
    written = [view for view in (world.table, *world.routes.values()) if view.exists]
    marks = [view.committed_at_ms for view in written if view.committed_at_ms is not None]
    if app.started_ms is not None:
        marks.append(app.started_ms)
    if not marks:
        return None
    since = max(marks)
    return since if world.now_ms - since > stall_seconds(topic, settings) * 1000 else None


def plan_stall(topic: Topic, world: World, settings: OperatorSettings, decided: Decisions) -> None:
    """A stall is loud: Ready turns False (Stalled) with what the job's driver says it does
    (:attr:`World.job_activity`), so a commit path that hangs without failing is seen."""
    since = stalled_since(topic, world, settings)
    if since is None:
        return
    app = world.children.app
    assert app is not None
    activity = world.job_activity or "doing something its metrics did not say"
    decided.say(
        stalled=(
            f"the job has committed nothing since {iso(since / 1000)}, more than "
            f"{stall_seconds(topic, settings):g} s ago, though Kafka has records past the table's "
            f"offsets; the job is "
            f"{activity}. Its log says more: kubectl logs -n {topic.namespace} {app.driver}"
        )
    )


def plan_rollback(
    topic: Topic,
    world: World,
    previous: Mapping[str, Any],
    settings: OperatorSettings,
    decided: Decisions,
) -> None:
    """The last stable spec (the newest generation whose job became :func:`healthy`), and
    ``spec.autoRollback``: a changed spec whose job is not healthy within the window runs the
    stable spec instead (:meth:`Topic.running`), until the spec changes again."""
    now = world.now_ms
    if topic.rolled_back_to is not None:
        rolled = dict(previous.get("autoRollback") or {})
        decided.say(
            auto_rollback=rolled,
            rolled_back=(
                f"generation {topic.generation} did not become healthy within "
                f"{topic.spec.auto_rollback.window}: generation {topic.rolled_back_to}'s spec runs "
                f"instead ({rolled.get('reason') or 'no error'}); change the spec to try again"
            ),
        )
        return
    stable = previous.get("stable") or {}
    if healthy(topic, world, settings):
        if stable.get("generation") != topic.generation:
            decided.say(
                stable={
                    "generation": topic.generation,
                    "spec": topic.spec.model_dump(mode="json", by_alias=True),
                    "since": iso(now / 1000),
                }
            )
        return
    policy = topic.spec.auto_rollback
    if not policy.enabled or not stable or stable.get("generation") == topic.generation:
        return
    seen = previous.get("specChangedAt")
    since = (
        epoch(seen) * 1000
        if seen and previous.get("observedGeneration") == topic.generation
        else now
    )
    if now - since < policy.window_seconds * 1000:
        return
    app = world.children.app
    reason = (
        Failovers.of(previous).last_failure
        or (app.error if app else "")
        or (f"SparkApplication {app.name} is {app.state or 'not taken up'}" if app else "no job")
    )[:500]
    rolled = {
        "failedGeneration": topic.generation,
        "restoredGeneration": stable["generation"],
        "at": iso(now / 1000),
        "reason": reason,
    }
    decided.say(auto_rollback=rolled)
    decided.act(
        Event(
            True,
            "RolledBack",
            (
                f"generation {topic.generation}'s job did not become healthy within "
                f"{policy.window} ({reason.splitlines()[0][:300] if reason else 'no error'}): "
                f"rolling back to "
                f"generation {stable['generation']}'s spec; the resource keeps its spec as written"
            ),
        )
    )
