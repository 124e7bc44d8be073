"""A pool's members as their directory says (the parts that start no Spark)."""

from __future__ import annotations

import json
import logging

import pytest

from floe_sparkapp import pool


def test_a_failing_member_backs_off_doubling_up_to_five_minutes() -> None:
    assert [pool.backoff(n) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]


def test_a_file_that_is_no_config_is_reported_and_not_run(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "bad.json").write_text('{"writer": 3}')
    (tmp_path / "notjson.json").write_text("writer: x")
    (tmp_path / "ignored.yaml").write_text("{}")
    members = pool.Pool(tmp_path)
    with caplog.at_level(logging.INFO, logger="floe.pool"):
        members.refresh()
    assert sorted(members.members) == ["bad", "notjson"]
    assert all(m.state == "invalid" and m.thread is None for m in members.members.values())
    assert members.spark is None  # no session for members that cannot run
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "floe.pool"]
    assert {(line["member"], line["state"]) for line in lines} == {
        ("bad", "invalid"),
        ("notjson", "invalid"),
    }
    assert "not JSON" in next(line["error"] for line in lines if line["member"] == "notjson")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="floe.pool"):
        members.refresh()  # the same files: nothing new to say
    assert not [r for r in caplog.records if r.name == "floe.pool"]
    (tmp_path / "bad.json").unlink()
    members.refresh()
    assert sorted(members.members) == ["notjson"]
