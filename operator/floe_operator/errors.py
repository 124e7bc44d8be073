"""The operator's exceptions: a spec that cannot work, and infrastructure trouble to retry."""

from __future__ import annotations

import kopf


class InvalidSpec(kopf.PermanentError):
    """The spec cannot work; the message says what to change. Nothing is created."""


def retry_later(message: str, delay: float = 15) -> kopf.TemporaryError:
    return kopf.TemporaryError(message, delay=delay)
