"""Secret values never leave the operator: every value read from a Secret is remembered here and
masked in log records (and so in the Events kopf posts from them) and on the status."""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

MASK = "***"
_values: set[str] = set()
_lock = threading.Lock()


SENSITIVE_KEY = re.compile(r"pass|secret|token|credential|jaas|user\.info|private", re.I)
EMBEDDED = re.compile(r'\bpassword\s*=\s*"((?:[^"\\]|\\.)*)"')  # in a sasl.jaas.config line


def remember(data: dict[str, str]) -> None:
    """Marks a Secret's values as secret: every value of 8 characters or more, and shorter ones
    (from 4) under a key that names a password, secret, token or credential. Shorter values would
    mask ordinary words and protect nothing."""
    embedded = {("password", found) for value in data.values() for found in EMBEDDED.findall(value)}
    with _lock:
        _values.update(
            value
            for key, value in [*data.items(), *embedded]
            if len(value) >= 8 or (len(value) >= 4 and SENSITIVE_KEY.search(key))
        )


def redact(text: str) -> str:
    with _lock:
        values = sorted(_values, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_all(value: Any) -> Any:
    """A copy of a JSON-like value with every string redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_all(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_all(item) for item in value]
    return value


class RedactingFilter(logging.Filter):
    """Renders a record's message (and traceback) with secret values masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _values:
            record.msg, record.args = redact(record.getMessage()), None
            if record.exc_info:
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


def install() -> None:
    """Masks secrets on the root handlers and on kopf's per-object logger (the Events source)."""
    masking = RedactingFilter()
    for handler in logging.getLogger().handlers:
        handler.addFilter(masking)
    logging.getLogger("kopf.objects").addFilter(masking)
