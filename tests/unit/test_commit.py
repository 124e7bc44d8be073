"""What the commit path waits for and what it gives up on (no services)."""

import pytest

from floe_sparkapp.commit import unanswered

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError("timed out"),
        RuntimeError(
            "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) server closed "
            "the connection unexpectedly"
        ),
        RuntimeError(
            "requests.exceptions.ConnectionError: HTTPConnectionPool(host='db', port=1): "
            "Max retries exceeded"
        ),
        RuntimeError(
            "An error occurred while calling o1.save.\n: org.apache.iceberg.jdbc."
            "UncheckedSQLException: Database Connection failed"
        ),
        RuntimeError(
            "software.amazon.awssdk.core.exception.SdkClientException: Unable to execute "
            "HTTP request: Connection reset"
        ),
        RuntimeError(
            "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a "
            "node assignment"
        ),
    ],
)
def test_a_neighbour_that_did_not_answer_is_waited_for(error):
    assert unanswered(error)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CheckpointAhead: batch 3 of data/orders would start above table t's offsets"),
        RuntimeError("the table is written by data/other (its table property floe.writer)"),
        RuntimeError("org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist"),
        ValueError("invalid literal for int() with base 10: 'x'"),
    ],
)
def test_a_refusal_that_trying_again_cannot_change_is_not(error):
    assert not unanswered(error)
