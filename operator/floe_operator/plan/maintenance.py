"""The planner's decision on table maintenance: one CronJob per enabled action, those of
disabled actions removed."""

from __future__ import annotations

from .. import render
from ..names import GROUP
from ..render import Topic
from ..settings import OperatorSettings
from ..view import World
from .actions import Apply, Decisions, DeleteCronJob


def plan_maintenance(
    topic: Topic, world: World, settings: OperatorSettings, decided: Decisions
) -> None:
    """One CronJob per enabled action; those of disabled actions are removed."""
    desired = [body for body, _ in render.desired(topic, settings).cron_jobs]
    existing = world.children.cron_jobs
    for body, digest in render.desired(topic, settings).cron_jobs:
        if existing.get(body["metadata"]["name"]) != digest:
            decided.act(Apply("CronJob", body["metadata"]["name"], digest, body))
    wanted = {c["metadata"]["name"] for c in desired}
    decided.act(*(DeleteCronJob(name) for name in sorted(existing) if name not in wanted))
    decided.say(
        maintenance={
            c["metadata"]["labels"][f"{GROUP}/action"]: {
                "schedule": c["spec"]["schedule"],
                "cronJob": c["metadata"]["name"],
            }
            for c in desired
        }
    )
