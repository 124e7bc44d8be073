"""Repair in the job (``python -m floe_sparkapp operate``): the rows a table kept raw decoded
again once their cause is fixed, each record still one row."""

from __future__ import annotations

import json
import time

import pytest

from floe_sparkapp.config import parse_config
from floe_sparkapp.contract import OperationRequest
from floe_sparkapp.ledger import OPERATION, ancestors, operation_record
from floe_sparkapp.operations import OperationRefused, operate
from floe_sparkapp.repair import LEFT_OUT

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    consume_to_end,
    create_topic,
    job_config,
    killed_after_first,
    load_table,
    route_table,
    run_once,
    table_rows,
)
from .test_job_roundtrip import V1, normalize, order

pytestmark = pytest.mark.integration

WIDE = {
    **V1,
    "fields": [
        f if f["name"] != "quantity" else {"name": "quantity", "type": "long"} for f in V1["fields"]
    ],
}


def request(uid: str, **repair) -> OperationRequest:
    return OperationRequest.model_validate(
        {"uid": uid, "name": uid, "type": "Repair", "repair": repair}
    )


def raw_rows(config) -> list[dict]:
    return [r for r in table_rows(config) if r["value"] is None and r["value_raw"] is not None]


def test_a_repair_decodes_the_rows_kept_raw_once_their_cause_is_fixed_and_goes_on_after_a_kill(
    stack, spark, tmp_path, unique_name
):
    """Records that needed a wider column were kept raw under ``schemaEvolution: none``; once
    the spec allows additive changes, a dry run counts them (and says why two garbage records
    would stay raw), then a repair killed after its first commit is run again: every record is
    one row, the wide ones decoded, the garbage still raw, and a third run changes nothing."""
    from floe_sparkapp import repair

    topic = f"repair-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    for i in range(10):
        producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    frozen = parse_config(
        {
            **json.loads(job_config(stack, tmp_path, topic).to_json()),
            "schemaEvolution": {"mode": "none"},
        }
    )
    run_once(frozen, spark)
    for i in range(10, 30):
        producer.send(key=f"wide-{i}".encode(), value=order(i, 1), schema=WIDE)
    producer.send(key=b"garbage-1", raw=b"not avro at all", partition=0)
    producer.send(key=b"garbage-2", raw=b"\x00\x00", partition=1)
    producer.flush()
    run_once(frozen, spark)
    assert len(raw_rows(frozen)) == 22
    wide_id = next(r["kafka"]["schema_id"] for r in raw_rows(frozen) if r["key"] == b"wide-10")
    config = with_evolution(json.loads(frozen.to_json()), "additive")

    dry = operate(config, request("dry", dryRun=True), spark)
    assert dry["wouldRepair"] == 20 and dry["selected"] == 22 and dry["stayRaw"] == 2
    assert dry["stayRawByReason"]["not_framed"]["count"] == 2
    assert any("Confluent" in e for e in dry["stayRawByReason"]["not_framed"]["errors"])
    assert dry["wouldEvolve"] == [f"schema id {wide_id}: value.quantity: int widened to long"]
    assert len(raw_rows(config)) == 22  # a dry run changes no row, and no schema
    assert str(load_table(config).schema().find_field("value.quantity").field_type) == "int"
    assert operation_record(load_table(config), "dry") == dry

    with killed_after_first(repair.Repair, "_merge"):
        operate(config, request("fix", rowsPerCommit=4), spark)
    assert len(raw_rows(config)) == 22 - 4
    outcome = operate(config, request("fix", rowsPerCommit=4), spark)
    assert outcome["repaired"] == 20 and outcome["stayRaw"] == 2
    assert outcome["selected"] == 18  # the second run selected what the first left raw
    commits = [
        s for s in ancestors(load_table(config)) if (s.summary or {}).get(OPERATION) == "fix"
    ]
    assert outcome["commits"] == len(commits) >= 6  # 4 rows of one partition a commit
    assert str(load_table(config).schema().find_field("value.quantity").field_type) == "long"

    rows = table_rows(config)
    assert_exactly_once(rows, producer.sent)
    for row in rows:
        sent = producer.sent[(row["kafka"]["partition"], row["kafka"]["offset"])]
        assert row["key"] == sent["key"]
        if sent["value"] is None:  # the garbage: still raw, as it came
            assert row["value"] is None and row["value_raw"] == sent["payload"]
            continue
        assert normalize(row["value"]) == normalize(sent["value"])
        assert row["value_raw"] is None and row["value_error"] is None

    again = operate(config, request("fix", rowsPerCommit=4), spark)
    assert again["selected"] == 2 and again["repaired"] == 20

    def lineage(row: dict) -> tuple:
        return row["kafka"]["partition"], row["kafka"]["offset"]

    assert sorted(table_rows(config), key=lineage) == sorted(rows, key=lineage)


def test_a_repair_refuses_a_table_it_cannot_repair(stack, spark, tmp_path, unique_name):
    config = job_config(stack, tmp_path, f"norepair-{unique_name}".replace("_", "-"), fmt="raw")
    with pytest.raises(OperationRefused, match=r"value.format is raw"):
        operate(config, request("raw"), spark)
    with pytest.raises(OperationRefused, match=r"analytics.other is not one of the topic's"):
        operate(config, request("other", table="analytics.other"), spark)


def orders_with_dead_letters(stack, topic: str) -> tuple[str, AvroProducer]:
    """A topic of two partitions holding 10 orders of the first schema, and its dead-letter
    topic (named)."""
    dead = f"{topic}-dlq"
    create_topic(stack.bootstrap, topic, partitions=2)
    create_topic(stack.bootstrap, dead, partitions=1)
    producer = AvroProducer(stack, topic)
    for i in range(10):
        producer.send(key=f"v1-{i}".encode(), value=order(i, 1), schema=V1)
    producer.flush()
    return dead, producer


def with_evolution(data: dict, mode: str):
    """A job config of ``data`` with its schema evolution's ``mode``."""
    return parse_config({**data, "schemaEvolution": {"mode": mode}})


def test_a_repair_re_drives_the_dead_letters_whose_raw_rows_were_deleted(
    stack, spark, tmp_path, unique_name
):
    """A user read the undecodable records from the dead-letter topic and deleted their raw
    rows from the table; once the cause is fixed, a repair lands them from the dead letters,
    decoded, with their own lineage (timestamp and headers as they came), once however often
    it runs."""
    topic = f"redrive-{unique_name}".replace("_", "-")
    dead, producer = orders_with_dead_letters(stack, topic)
    frozen = with_evolution(
        json.loads(job_config(stack, tmp_path, topic, dead_letter=dead).to_json()), "none"
    )
    run_once(frozen, spark)
    minute_ago = int(time.time() * 1000) - 60_000  # (days ago, retention would delete them)
    for i in range(10, 18):
        producer.send(
            key=f"wide-{i}".encode(),
            value=order(i, 1),
            schema=WIDE,
            headers=[("trace", f"t{i}".encode())],
            timestamp_ms=minute_ago + i,
        )
    producer.flush()
    run_once(frozen, spark)
    assert len(raw_rows(frozen)) == 8
    spark.sql(
        f"DELETE FROM {frozen.table.catalog.name}.{frozen.table.identifier} "
        "WHERE value_raw IS NOT NULL"
    )
    assert len(table_rows(frozen)) == 10
    config = with_evolution(json.loads(frozen.to_json()), "additive")

    dry = operate(config, request("look", dryRun=True), spark)
    assert dry["deadLetters"] == {
        "read": 8,
        "missing": 8,
        "landed": 0,
        "wouldLand": 8,
        "stayUndecodable": 0,
    }
    assert len(table_rows(config)) == 10
    outcome = operate(config, request("redrive"), spark)
    assert outcome["selected"] == 0 and outcome["repaired"] == 0
    assert outcome["deadLetters"]["landed"] == 8 and outcome["deadLetters"]["missing"] == 8
    rows = table_rows(config)
    assert_exactly_once(rows, producer.sent)
    for row in rows:
        sent = producer.sent[(row["kafka"]["partition"], row["kafka"]["offset"])]
        assert normalize(row["value"]) == normalize(sent["value"])
        if sent["key"].startswith(b"wide-"):
            i = int(sent["key"].decode().split("-")[1])
            assert round(row["kafka"]["timestamp"].timestamp() * 1000) == minute_ago + i
            assert row["kafka"]["headers"] == [{"key": "trace", "value": f"t{i}".encode()}]
    again = operate(config, request("redrive"), spark)
    assert again["deadLetters"]["missing"] == 0 and again["deadLetters"]["landed"] == 8
    assert len(table_rows(config)) == 18


def quantity_type(config) -> str:
    return str(load_table(config).schema().find_field("value.quantity").field_type)


@pytest.mark.faults
def test_a_repair_leaves_the_dead_letters_of_a_batch_never_committed_to_the_job(
    stack, spark, tmp_path, unique_name, monkeypatch
):
    """A batch sends its undecodable records to the dead-letter topic before its commit, and
    the driver is killed in between: the table has neither their rows nor their offsets.  Once
    their cause is fixed, a repair re-driving the dead letters lands none of them (the job
    lands that batch again itself), says so on its outcome, and does not evolve the table for
    them; the job then lands every record once."""
    from floe_sparkapp.commit import BranchCommitter

    topic = f"uncommitted-{unique_name}".replace("_", "-")
    dead, producer = orders_with_dead_letters(stack, topic)
    frozen = with_evolution(
        json.loads(job_config(stack, tmp_path, topic, dead_letter=dead).to_json()), "none"
    )
    run_once(frozen, spark)
    for i in range(10, 18):
        producer.send(key=f"wide-{i}".encode(), value=order(i, 1), schema=WIDE)
    producer.flush()

    def killed(*args, **kwargs):
        raise RuntimeError("killed after the dead letters were sent")

    with monkeypatch.context() as patched:
        patched.setattr(BranchCommitter, "append", killed)
        with pytest.raises(Exception, match="killed after the dead letters were sent"):
            run_once(frozen, spark)
    assert len(consume_to_end(stack, dead)) == 8
    assert len(table_rows(frozen)) == 10
    config = with_evolution(json.loads(frozen.to_json()), "additive")

    outcome = operate(config, request("redrive"), spark)
    assert len(table_rows(config)) == 10, "the repair landed records the job lands again"
    letters = outcome["deadLetters"]
    assert letters["read"] == 8 and letters["missing"] == 0 and letters["landed"] == 0
    assert letters["leftOut"] == {"uncommitted": {"count": 8, "why": LEFT_OUT["uncommitted"]}}
    assert quantity_type(config) == "int"  # not evolved for the records left out

    run_once(config, spark)
    rows = table_rows(config)
    assert_exactly_once(rows, producer.sent)
    assert not [r for r in rows if r["value"] is None]  # the job decoded them, each once
    assert quantity_type(config) == "long"


@pytest.mark.faults
def test_a_repair_re_drives_into_each_of_a_routed_topics_tables_only_its_own_dead_letters(
    stack, spark, tmp_path, unique_name
):
    """The even orders go to a route's table, the rest to the topic's own; both tables kept
    the wide records raw, each sending its own to the one dead-letter topic, and their raw
    rows were deleted.  A repair of each table lands its own dead letters and leaves out the
    other's (a repair of that table re-drives them): each record is in its own table, once."""
    topic = f"redrive-routes-{unique_name}".replace("_", "-")
    dead, producer = orders_with_dead_letters(stack, topic)
    data = json.loads(job_config(stack, tmp_path, topic, dead_letter=dead).to_json())
    even = f"{data['table']['identifier']}_even"
    data["routes"] = [
        {
            "field": "item",
            "values": [f"item-{i}" for i in range(0, 18, 2)],
            "table": route_table(data["table"], identifier=even),
        }
    ]
    frozen = with_evolution(data, "none")
    run_once(frozen, spark)
    for i in range(10, 18):
        producer.send(key=f"wide-{i}".encode(), value=order(i, 1), schema=WIDE)
    producer.flush()
    run_once(frozen, spark)
    assert [len(raw_rows(table)) for table in frozen.destinations()] == [4, 4]
    for table in frozen.destinations():
        spark.sql(
            f"DELETE FROM {table.table.catalog.name}.{table.table.identifier} "
            "WHERE value_raw IS NOT NULL"
        )
    config = with_evolution(json.loads(frozen.to_json()), "additive")

    other = {"otherTable": {"count": 4, "why": LEFT_OUT["otherTable"]}}
    for uid, table in (("own", {}), ("route", {"table": even})):
        letters = operate(config, request(uid, **table), spark)["deadLetters"]
        assert letters["read"] == 8 and letters["missing"] == 4 and letters["landed"] == 4
        assert letters["leftOut"] == other
    own_rows, even_rows = (table_rows(table) for table in config.destinations())
    assert_exactly_once(own_rows + even_rows, producer.sent)
    assert {r["value"]["item"] for r in even_rows} == {f"item-{i}" for i in range(0, 18, 2)}
    assert not [r for r in own_rows + even_rows if r["value"] is None]
