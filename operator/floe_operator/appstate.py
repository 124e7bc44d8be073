"""The states of a kubeflow spark-operator SparkApplication, and what floe makes of them."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any


class AppState(str, Enum):
    NEW = "NEW"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBMISSION_FAILED = "SUBMISSION_FAILED"
    PENDING_RERUN = "PENDING_RERUN"
    INVALIDATING = "INVALIDATING"
    SUCCEEDING = "SUCCEEDING"
    FAILING = "FAILING"
    UNKNOWN = "UNKNOWN"


def state_of(app: Mapping[str, Any] | None) -> str:
    """The application's state as its status says it ("" before spark-operator has seen it)."""
    return ((app or {}).get("status") or {}).get("applicationState", {}).get("state", "") or ""


def error_of(app: Mapping[str, Any] | None) -> str:
    """What spark-operator says went wrong ("" when nothing did)."""
    return ((app or {}).get("status") or {}).get("applicationState", {}).get("errorMessage") or ""


# Ended for good: spark-operator will not submit the driver again, floe fails the job over.
FAILED = frozenset({AppState.FAILED, AppState.SUBMISSION_FAILED})
ENDED = FAILED | {AppState.COMPLETED}
# spark-operator may be running spark-submit for it right now: v2.3 puts no finalizer on the
# application, so a driver pod it is creating appears even after the application is deleted.
SUBMITTING = frozenset({"", AppState.NEW, AppState.PENDING_RERUN, AppState.INVALIDATING})
# On the status: failed, or its driver lost (not failed over: spark-operator may find it again).
SHOWN_FAILED = FAILED | {AppState.UNKNOWN}
