"""What a failed commit means and what is tried again: a conflict, an outcome the catalog did
not tell, a neighbour that did not answer; and a batch tried until it commits
(:func:`commit_with_retries`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TypeVar

from .. import metrics

log = logging.getLogger("floe.commit")
T = TypeVar("T")


class CommitConflict(RuntimeError):
    """``main`` moved while a batch was being written; the batch is retried."""


class CommitFailed(RuntimeError):
    """A batch could not be committed within the attempt limit."""


class CommitUnknown(RuntimeError):
    """The catalog did not answer whether a commit landed, and looking could not tell: the
    batch's files stay (a snapshot may refer to them) and the batch starts over from what the
    table then says."""


def is_conflict(error: Exception) -> bool:
    text = str(error)
    return "CommitFailedException" in text or "ValidationException" in text


def first_line(error: Exception) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else repr(error))[:500]


# What a neighbour that did not answer looks like, in Python's clients and in the JVM's (the
# catalog's, the object store's, Kafka's): the batch is tried again while it lasts.
_UNANSWERED = re.compile(
    r"Connection refused|Connection reset|connection closed|server closed the connection|"
    r"Broken pipe|timed out|SocketTimeout|TimeoutException|NoHttpResponse|RemoteDisconnected|"
    r"Unable to execute HTTP request|SdkClientException|UncheckedSQLException|"
    r"ServiceUnavailable|ServiceFailure|OperationalError|ConnectError|ConnectionError|"
    r"NewConnectionError|EOFException|SocketException|NoRouteToHost"
)


def unanswered(error: BaseException) -> bool:
    """Whether ``error`` is a neighbour (catalog, object store, registry, Kafka) that did not
    answer, rather than a refusal that trying again cannot change."""
    return isinstance(error, (ConnectionError, TimeoutError)) or bool(
        _UNANSWERED.search(f"{type(error).__name__}: {error}")
    )


def commit_with_retries(
    attempt: Callable[[], T],
    *,
    attempts: int = 10,
    backoff_seconds: float = 0.5,
    outage_seconds: float = 120.0,
) -> tuple[T, int]:
    """Runs ``attempt`` until it finishes without a CommitConflict (committed or nothing to do).

    A neighbour that does not answer (:func:`unanswered`) is waited for, the batch tried again
    from the start (the table's offsets), for up to ``outage_seconds``: a short outage costs a
    pause, not a restart of the job.  Returns what the attempt that finished returned and the
    number of conflicts seen; raises CommitFailed after ``attempts`` conflicts, and the
    neighbour's error when it stays away.
    """
    conflicts = 0
    outage_started: float | None = None
    while True:
        try:
            return attempt(), conflicts
        except (CommitConflict, CommitUnknown) as conflict:
            conflicts += 1
            log.info(
                "commit %s (attempt %d of %d): %s",
                "conflict" if isinstance(conflict, CommitConflict) else "outcome unknown",
                conflicts,
                attempts,
                conflict,
            )
            if conflicts >= attempts:
                raise CommitFailed(
                    f"batch not committed after {attempts} conflicting attempts; another "
                    "writer or maintenance keeps moving the table's main branch"
                ) from None
            time.sleep(backoff_seconds * (2 ** min(conflicts - 1, 5)))
        except Exception as error:  # only an unanswered call is tried again
            now = time.monotonic()
            outage_started = outage_started or now
            if not unanswered(error) or now - outage_started > outage_seconds:
                raise
            log.warning(
                "a neighbour did not answer (%s): the batch is tried again", first_line(error)
            )
            metrics.doing("retrying")
            time.sleep(min(2.0 + (now - outage_started) / 4, 10.0))
