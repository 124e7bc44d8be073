"""The operator's exceptions: what kopf retries later."""

from __future__ import annotations

import kopf


def retry_later(message: str, delay: float = 15) -> kopf.TemporaryError:
    return kopf.TemporaryError(message, delay=delay)
