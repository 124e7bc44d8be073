"""floe's log lines, the operator's and the job's: one JSON object per line (the default), or
text for a terminal.

A message that is itself a JSON object (the job's ``floe.batch``, ``floe.progress`` and
``floe.started`` events) becomes the line's fields, beside ``time``, ``level`` and ``logger``;
any other message is the ``message`` field. A resource the line is about (kopf's object
loggers) is ``namespace`` and ``name``; an exception is ``exception``, its traceback as text.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from typing import Any

TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        reference = getattr(record, "k8s_ref", None)  # kopf's per-object loggers
        if isinstance(reference, dict):
            line.update(
                {key: reference[key] for key in ("namespace", "name") if reference.get(key)}
            )
        message = record.getMessage()
        fields = _object(message)
        if fields is None:
            line["message"] = message
        else:
            line.update({key: value for key, value in fields.items() if key not in line})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """Text, with the resource a line is about before its message."""

    def __init__(self) -> None:
        super().__init__(TEXT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        reference = getattr(record, "k8s_ref", None)
        if isinstance(reference, dict) and reference.get("name"):
            where = "/".join(reference[k] for k in ("namespace", "name") if reference.get(k))
            head = f"{record.name} "
            text = text.replace(head, f"{head}[{where}] ", 1)
        return text


def _object(message: str) -> dict[str, Any] | None:
    if not message.startswith("{"):
        return None
    try:
        found = json.loads(message)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def configure(level: str | None = None, fmt: str | None = None, force: bool = False) -> None:
    """The root logger's level and format: the arguments, else ``FLOE_LOG_LEVEL`` and
    ``FLOE_LOG_FORMAT``, else info and json. As :func:`logging.basicConfig`, nothing changes
    where the root logger has handlers already (a process that embeds floe's entry points, a
    test run), unless ``force``."""
    root = logging.getLogger()
    if root.handlers and not force:
        return
    level = (level or os.environ.get("FLOE_LOG_LEVEL") or "info").lower()
    fmt = (fmt or os.environ.get("FLOE_LOG_FORMAT") or "json").lower()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if level.upper() in logging._nameToLevel else "INFO")
