"""What a deletion does next (``plan_delete``): the job removed and waited for, then the tables
dropped when the deletionPolicy says so."""

from __future__ import annotations

from ..appstate import SUBMITTING, AppState
from ..render import Topic
from ..settings import OperatorSettings
from ..view import Deletion
from .actions import Action, DeleteApp, DropTable, Log, Wait


def plan_delete(topic: Topic, seen: Deletion, settings: OperatorSettings) -> tuple[Action, ...]:
    """What a deletion does next: the job removed, waited for until its pods are gone (a running
    driver could still write to the table), then the tables dropped when the policy says so.
    A ``Wait`` ends the plan (the resource stays, kopf's finalizer, and is visited again).

    A job spark-operator may still be submitting is waited for before it is removed: removed
    then, its driver would start after the deletion and write to (or create again) the table.
    Past FLOE_DELETION_WAIT_SECONDS the deletion goes on without what it waited for."""
    waited = (seen.now_ms - seen.since_ms) / 1000
    patient = waited < settings.deletion_wait_seconds
    actions: list[Action] = []
    if seen.app_state is not None:
        never_taken = (
            seen.app_state in ("", AppState.NEW)
            and seen.app_created_ms is not None
            and (seen.now_ms - seen.app_created_ms) / 1000 > settings.submit_wait_seconds
        )
        if seen.app_state in SUBMITTING and not never_taken:
            state = seen.app_state or "new"
            if patient:
                return (
                    Wait(
                        f"waiting for spark-operator to finish submitting SparkApplication "
                        f"{topic.child_name} ({state}) before deleting it"
                    ),
                )
            actions.append(
                Log(
                    f"SparkApplication {topic.child_name} is still {state} "
                    f"{waited:.0f} s after the deletion; deleting it "
                    "(FLOE_DELETION_WAIT_SECONDS)",
                    warning=True,
                )
            )
        actions.append(DeleteApp(topic.child_name, why="the resource is deleted"))
    if seen.pods:
        pods = ", ".join(seen.pods)
        if patient:
            return (*actions, Wait(f"waiting for the job's pods to stop: {pods}"))
        actions.append(
            Log(
                f"the job's pods {pods} still run {waited:.0f} s after the deletion; "
                "going on without them (FLOE_DELETION_WAIT_SECONDS)",
                warning=True,
            )
        )
    if topic.spec.table.deletion_policy != "Delete":
        return tuple(actions)
    for identifier, writer in seen.tables.items():
        if writer not in (None, topic.writer):  # refused as a second writer: not its table
            actions.append(
                Log(f"deletionPolicy Delete: table {identifier} is written by {writer}, kept")
            )
        else:
            actions.append(DropTable(identifier))
    return tuple(actions)
