"""Write, audit, publish (``table.branch``): the job lands in a branch, exactly once through a
lost commit reply and a lost checkpoint; ``main`` moves only when published (to the branch's
head or to one of its snapshots), a ``main`` changed outside floe is not forced, maintenance
works on the branch, and an upsert table merges there."""

from __future__ import annotations

import datetime as dt
import shutil

import pytest

from floe_sparkapp.commit import BranchCommitter
from floe_sparkapp.ledger import ancestors, head, last_commit, publish
from floe_sparkapp.maintenance import maintain

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    run_once,
    table_rows,
    with_maintenance,
    with_sections,
)
from .test_job_roundtrip import V1, order, produce_orders

pytestmark = [pytest.mark.integration]


@pytest.fixture
def topic(stack, unique_name):
    name = f"branch-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, name, partitions=3)
    return name


def table_ref(config) -> str:
    return f"{config.table.catalog.name}.{config.table.identifier}"


def branch_rows(config, ref: str = "audit") -> list[dict]:
    table = load_table(config)
    return table.scan(snapshot_id=head(table, ref).snapshot_id).to_arrow().to_pylist()


def test_a_branch_lands_exactly_once_and_main_moves_only_when_published(
    stack, spark, tmp_path, topic, monkeypatch
):
    producer = AvroProducer(stack, topic)
    config = with_sections(
        job_config(stack, tmp_path, topic, max_records=40), table={"branch": "audit"}
    )
    produce_orders(producer, 0, 100)

    # The first batch's commit lands, and its reply is lost: the job looks and finds it on the
    # branch (not on main, which does not move).
    real = BranchCommitter._commit_metadata
    lost: list[int] = []

    def reply_lost(self, operations, base, metadata):
        real(self, operations, base, metadata)
        if not lost:
            lost.append(1)
            raise RuntimeError("Connection reset: the catalog's reply was lost")

    with monkeypatch.context() as patched:
        patched.setattr(BranchCommitter, "_commit_metadata", reply_lost)
        run_once(config, spark)
    assert lost
    table = load_table(config)
    root = table.current_snapshot().snapshot_id
    assert table.refs()["audit"].snapshot_ref_type.value == "branch"
    assert spark.table(table_ref(config)).count() == 0  # main's readers see nothing yet
    assert_exactly_once(branch_rows(config), producer.sent)
    ended = last_commit(table, config.writer, topic, ref="audit").offsets
    assert sum(ended.values()) == 100
    assert last_commit(table, config.writer, topic).offsets == {}  # main has no commit

    # Publishing moves main to the branch's head: main's readers see every record once.
    published = publish(table, "audit")
    assert published.moved and published.error is None
    table = load_table(config)
    assert table.current_snapshot().snapshot_id == head(table, "audit").snapshot_id
    assert_exactly_once(table_rows(config), producer.sent)
    assert publish(load_table(config), "audit").moved is False  # published already

    # More batches after a lost checkpoint: they go on from the branch's offsets, not main's.
    shutil.rmtree(config.checkpoint_location)
    produce_orders(producer, 100, 80)
    run_once(config, spark)
    table = load_table(config)
    assert_exactly_once(branch_rows(config), producer.sent)
    assert len(table_rows(config)) == 100
    # Published up to one of the branch's snapshots: main has what that snapshot has.
    on_branch = [s for s in ancestors(table, ref="audit") if s.summary.get("floe.offsets")]
    middle = on_branch[1]
    done = publish(table, "audit", middle.snapshot_id)
    assert done.moved and load_table(config).current_snapshot().snapshot_id == middle.snapshot_id
    held = last_commit(load_table(config), config.writer, topic).offsets
    assert len(table_rows(config)) == sum(held.values())
    assert 100 < sum(held.values()) < 180
    refused = publish(load_table(config), "audit", root)
    assert refused.error is None and not refused.moved  # main has it already

    # Compaction works on the branch: main stays where it was published, and the branch's head
    # still has main in its history, so it publishes.
    compact = with_maintenance(config, compaction={"min_input_files": 2})
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)
    outcome = maintain(compact, "compaction", spark, now=later)
    assert outcome["rewritten_data_files_count"] > 1, outcome
    assert "skipped" in maintain(compact, "rewrite-manifests", spark)
    table = load_table(config)
    assert table.current_snapshot().snapshot_id == middle.snapshot_id
    assert head(table, "audit").summary.operation.value == "replace"
    assert_exactly_once(branch_rows(config), producer.sent)
    assert publish(table, "audit").moved
    assert_exactly_once(table_rows(config), producer.sent)

    # A main changed outside floe is not forced: the publish says what to do.
    spark.sql(f"DELETE FROM {table_ref(config)} WHERE kafka.offset = 0")
    produce_orders(producer, 180, 10)
    run_once(config, spark)
    table = load_table(config)
    diverged = publish(table, "audit")
    assert not diverged.moved and "is not an ancestor of branch audit" in diverged.error
    assert len(table_rows(config)) == 180 - 3  # the user's delete, and nothing of the branch


@pytest.mark.faults
def test_publishing_the_first_half_of_an_upsert_batch_is_refused_and_main_stays(
    stack, spark, tmp_path, topic
):
    """An upsert batch deletes its keys' rows on its branch, then adds its records: the
    snapshot between is no state of the table between batches.  Publishing it is refused,
    naming the snapshots before and after the batch, and main does not move."""
    producer = AvroProducer(stack, topic)
    config = with_sections(
        job_config(stack, tmp_path, topic, mode="upsert", max_records=20), table={"branch": "audit"}
    )
    for i in range(40):  # two batches over the same 20 keys: the second replaces their rows
        producer.send(
            key=f"k{i % 20}".encode(),
            value={**order(i % 20, 1), "item": f"v{i}"},
            schema=V1,
            partition=0,
        )
    producer.flush()
    run_once(config, spark)

    table = load_table(config)
    halves = [
        s
        for s in ancestors(table, ref="audit")
        if s.parent_snapshot_id is not None and not s.summary.get("floe.writer")
    ]
    assert halves, [s.summary for s in ancestors(table, ref="audit")]
    refused = publish(table, "audit", halves[0].snapshot_id)
    assert not refused.moved and refused.error.startswith(
        f"snapshot {halves[0].snapshot_id} is the first half of an upsert batch on branch audit"
    )
    assert spark.table(table_ref(config)).count() == 0  # main did not move
    assert publish(load_table(config), "audit").moved  # the branch's head is whole
    assert {r["key"].decode(): r["value"]["item"] for r in table_rows(config)} == {
        f"k{k}": f"v{20 + k}" for k in range(20)
    }


def test_an_upsert_table_merges_on_its_branch_and_publishes_the_last_record_per_key(
    stack, spark, tmp_path, topic
):
    producer = AvroProducer(stack, topic)
    config = with_sections(
        job_config(stack, tmp_path, topic, mode="upsert", max_records=30), table={"branch": "audit"}
    )
    expected = {}
    for i in range(60):
        value = {**order(i % 20, 1), "item": f"v{i}"}
        producer.send(key=f"k{i % 20}".encode(), value=value, schema=V1, partition=0)
        expected[f"k{i % 20}"] = value["item"]
    producer.send(key=b"k3", raw=None, partition=0)  # a tombstone deletes k3
    expected.pop("k3")
    producer.flush()
    run_once(config, spark)

    assert spark.table(table_ref(config)).count() == 0
    on_branch = {r["key"].decode(): r["value"]["item"] for r in branch_rows(config)}
    assert on_branch == expected and len(branch_rows(config)) == len(expected)
    assert publish(load_table(config), "audit").moved
    rows = table_rows(config)
    assert {r["key"].decode(): r["value"]["item"] for r in rows} == expected
    assert len(rows) == len(expected)
    # No batch branch is left behind, only the resource's own refs.
    assert set(load_table(config).refs()) - {"main", "audit"} == {
        name for name in load_table(config).refs() if name.startswith("floe_offsets_")
    }
