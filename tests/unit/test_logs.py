"""floe's log lines: one JSON object per line, events as fields."""

from __future__ import annotations

import io
import json
import logging

import pytest

from floe_sparkapp import logs

pytestmark = pytest.mark.unit


@pytest.fixture
def lines(monkeypatch):
    """Configures logging as a process of floe does; returns what it printed, line by line."""
    stream = io.StringIO()
    writes_here = logging.StreamHandler
    monkeypatch.setattr(logging, "StreamHandler", lambda: writes_here(stream))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield lambda: stream.getvalue().splitlines()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_every_line_is_one_json_object_and_an_events_fields_are_its_own(lines, monkeypatch):
    monkeypatch.setenv("FLOE_LOG_FORMAT", "json")
    monkeypatch.setenv("FLOE_LOG_LEVEL", "info")
    logs.configure(force=True)
    log = logging.getLogger("floe.job")
    log.info(json.dumps({"event": "floe.batch", "rows": 3, "level": "not this"}))
    log.warning("table %s: %s", "analytics.orders", "multi\nline")
    log.debug("not shown at info")
    kopf_like = logging.getLogger("kopf.objects")
    kopf_like.info("created", extra={"k8s_ref": {"namespace": "data", "name": "orders"}})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    printed = lines()
    assert len(printed) == 4  # the multi-line message and the traceback stay on their line
    batch, warning, created, failed = (json.loads(line) for line in printed)
    assert batch["event"] == "floe.batch" and batch["rows"] == 3 and batch["level"] == "info"
    assert batch["logger"] == "floe.job" and batch["time"].endswith("Z")
    assert '"event": "floe.batch"' in printed[0]  # as the log readers look for it
    assert warning["message"] == "table analytics.orders: multi\nline"
    assert warning["level"] == "warning"
    assert (created["namespace"], created["name"], created["message"]) == (
        "data",
        "orders",
        "created",
    )
    assert failed["message"] == "failed" and "ValueError: boom" in failed["exception"]


def test_a_process_whose_logging_is_set_up_keeps_it(lines):
    root = logging.getLogger()
    before = list(root.handlers)
    root.addHandler(logging.NullHandler())
    try:
        logs.configure()  # as an entry point called in-process (by a test) does
        assert lines() == [] and root.handlers == [*before, root.handlers[-1]]
    finally:
        root.removeHandler(root.handlers[-1])


def test_text_names_the_resource_and_the_level_comes_from_the_environment(lines, monkeypatch):
    monkeypatch.setenv("FLOE_LOG_FORMAT", "text")
    monkeypatch.setenv("FLOE_LOG_LEVEL", "debug")
    logs.configure(force=True)
    logging.getLogger("kopf.objects").debug(
        "visited", extra={"k8s_ref": {"namespace": "data", "name": "orders"}}
    )
    [line] = lines()
    assert line.endswith("DEBUG kopf.objects [data/orders] visited")
