"""Backfill in the job (``python -m floe_sparkapp operate``): a range of the topic landed in
the table beside the streaming job, each record once."""

from __future__ import annotations

import json
import time

import pytest

from floe_sparkapp.config import parse_config
from floe_sparkapp.contract import OperationRequest
from floe_sparkapp.ledger import OPERATION, ancestors, last_commit
from floe_sparkapp.operations import operate

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    killed_after_first,
    load_table,
    run_once,
    streaming,
    table_rows,
    wait_for_rows,
)
from .test_job_roundtrip import normalize, produce_orders

pytestmark = pytest.mark.integration


def _committed(config) -> dict[int, int]:
    try:
        return last_commit(load_table(config), config.writer, config.kafka.topic).offsets
    except Exception:  # noqa: BLE001 - not made yet
        return {}


def request(uid: str, **backfill) -> OperationRequest:
    return OperationRequest.model_validate(
        {"uid": uid, "name": uid, "type": "Backfill", "backfill": backfill}
    )


def test_a_backfill_lands_the_history_a_latest_job_skipped_once_beside_the_job(
    stack, spark, tmp_path, unique_name
):
    """A job that started at ``latest`` on a topic with 40 records lands only what came after;
    a backfill (7 offsets a commit), killed after its first commit and run again while the job
    keeps landing, brings the 40 in: every record is one row, and the table's offsets stay
    the job's."""
    from floe_sparkapp import backfill

    topic = f"backfill-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 40)
    config = parse_config(
        {
            **json.loads(job_config(stack, tmp_path, topic).to_json()),
            "kafka": {
                "bootstrapServers": stack.bootstrap,
                "topic": topic,
                "startingOffsets": "latest",
            },
        }
    )
    with streaming(config, spark) as (failures, _):
        produced = 40
        # The job lands what comes once it has started (at latest): until then, more history
        deadline = time.monotonic() + 300
        while len(_committed(config)) < 2:
            assert time.monotonic() < deadline and not failures, failures
            produce_orders(producer, produced, 4)
            produced += 4
            time.sleep(3)

        with killed_after_first(backfill.Backfill, "_chunk"):
            operate(config, request("fill", recordsPerCommit=7), spark)
        produce_orders(producer, produced, 10)  # the job lands these meanwhile
        produced += 10
        outcome = operate(config, request("fill", recordsPerCommit=7), spark)
        assert outcome["landed"] >= 40, outcome  # the history, in both runs
        assert outcome["leftOut"] == {}
        commits = [
            s for s in ancestors(load_table(config)) if (s.summary or {}).get(OPERATION) == "fill"
        ]
        assert outcome["commits"] == len(commits) >= 6
        rows = wait_for_rows(config, produced)
        assert not failures, failures
    assert_exactly_once(rows, producer.sent)
    for row in rows:
        sent = producer.sent[(row["kafka"]["partition"], row["kafka"]["offset"])]
        assert row["key"] == sent["key"]
        assert normalize(row["value"]) == normalize(sent["value"])
    # The ledger is the job's: the backfill's commits carry no offsets, and the job's newest
    # commit says where Kafka's records end.
    assert last_commit(load_table(config), config.writer, topic).offsets == producer.next_offsets()
    again = operate(config, request("again"), spark)  # everything is there: nothing lands
    assert again["landed"] == 0 and again["commits"] == 0
    assert len(table_rows(config)) == produced


def test_a_backfill_into_a_new_table_leaves_offsets_a_resource_goes_on_from(
    stack, spark, tmp_path, unique_name
):
    """A table rebuilt from the topic: a backfill into a new table lands every record Kafka has
    (eight offsets a commit), those it cannot decode raw and in the dead-letter topic, once;
    and a job made for that table afterwards goes on from its offsets: each record once."""
    from .jobkit import consume_to_end

    topic = f"rebuild-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    dlq = f"{topic}.dlq"
    create_topic(stack.bootstrap, dlq, partitions=1)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 15)
    bad = {f"bad-{i}".encode(): f"not avro {i}".encode() for i in range(3)}
    for i, (key, payload) in enumerate(bad.items()):
        producer.send(key=key, raw=payload, partition=i % 2)
    produce_orders(producer, 15, 15)
    producer.flush()
    positions = {record["key"]: position for position, record in producer.sent.items()}
    config = job_config(stack, tmp_path, topic, dead_letter=dlq)
    rebuilt = f"{config.table.identifier}_rebuilt"
    outcome = operate(config, request("rebuild", into=rebuilt, recordsPerCommit=8), spark)
    assert outcome["into"] == rebuilt and outcome["landed"] == 33, outcome
    assert outcome["undecodable"] == 3 and "deadLetterError" not in outcome, outcome
    dead = consume_to_end(stack, dlq)
    assert sorted(m.key() for m in dead) == sorted(bad)
    for message in dead:
        headers = dict(message.headers())
        assert message.value() == bad[message.key()]
        assert headers["floe.table"].decode() == rebuilt
        assert (int(headers["floe.partition"]), int(headers["floe.offset"])) == positions[
            message.key()
        ]
    data = json.loads(config.to_json())
    landing = parse_config(
        {
            **data,
            "writer": "data/rebuilt",
            "table": {**data["table"], "identifier": rebuilt},
            "checkpointLocation": str(tmp_path / "rebuilt-checkpoint"),
        }
    )
    assert (
        last_commit(load_table(landing), landing.writer, topic).offsets == producer.next_offsets()
    )
    produce_orders(producer, 30, 10)
    run_once(landing, spark)
    rows = table_rows(landing)
    assert_exactly_once(rows, producer.sent)
    assert sorted(row["value_raw"] for row in rows if row["value_error"]) == sorted(bad.values())
    assert len(consume_to_end(stack, dlq)) == len(bad)  # the job sent none of them again
    with pytest.raises(Exception, match="one of the topic's tables"):
        operate(config, request("self", into=config.table.identifier), spark)
