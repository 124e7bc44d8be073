"""Secret values are masked in log records (and so in Events) and on the status."""

from __future__ import annotations

import logging

import pytest

from floe_operator import redact

pytestmark = pytest.mark.unit


@pytest.fixture
def remembered(monkeypatch):
    monkeypatch.setattr(redact, "_values", set())
    redact.remember(
        {
            "sasl.jaas.config": 'PlainLoginModule required password="hunter2-long";',
            "s3.access-key-id": "floe",
            "basic.auth.user.info": "u:pw12",
            "client.region": "eu-west-1",
        }
    )


def test_long_values_and_sensitive_keys_are_masked_short_plain_values_are_not(remembered):
    text = (
        'password="hunter2-long"; key floe; auth u:pw12; region eu-west-1; '
        'PlainLoginModule required password="hunter2-long";'
    )
    assert redact.redact(text) == 'password="***"; key floe; auth ***; region ***; ***'
    assert redact.redact_all({"a": ["eu-west-1", 3, None], "b": {"c": "x u:pw12"}}) == {
        "a": ["***", 3, None],
        "b": {"c": "x ***"},
    }


def test_log_records_and_their_tracebacks_are_masked(remembered, caplog):
    logger = logging.getLogger("floe.test.redact")
    logger.addFilter(redact.RedactingFilter())
    try:
        raise RuntimeError("cannot reach eu-west-1 with u:pw12")
    except RuntimeError:
        logger.exception("failed for %s", "u:pw12")
    record = caplog.records[-1]
    assert record.getMessage() == "failed for ***"
    assert "RuntimeError: cannot reach *** with ***" in record.exc_text
    assert "pw12" not in caplog.text and "eu-west-1" not in caplog.text
