"""Partitioning: by time on ``kafka.timestamp`` (``partitioning``), and by Iceberg's transforms
of value, key and lineage fields (``partitionBy``), evolved by a spec change: each file holds
one partition's records, the rows are the records, once."""

from __future__ import annotations

import collections
import datetime as dt

import pytest
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    run_once,
    table_rows,
)
from .test_job_roundtrip import V1, order, produce_orders

pytestmark = pytest.mark.integration

HOUR_MS, DAY_MS = 3_600_000, 86_400_000


def files_by_partition(config) -> dict[tuple, int]:
    """Records per partition value (and partition spec) of the table's data files."""
    table = load_table(config)
    counts: dict[tuple, int] = collections.Counter()
    for task in table.scan().plan_files():
        file = task.file
        names = [field.name for field in table.specs()[file.spec_id].fields]
        counts[
            (file.spec_id, tuple(sorted((name, file.partition[i]) for i, name in enumerate(names))))
        ] += file.record_count
    return dict(counts)


@pytest.mark.parametrize("partitioning", ["hour", "month"])
def test_time_partitioning_puts_each_record_in_its_hour_or_month(
    stack, spark, tmp_path, unique_name, partitioning
):
    topic = f"part-{partitioning}-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2, config={"retention.ms": "-1"})
    producer = AvroProducer(stack, topic)
    step = HOUR_MS if partitioning == "hour" else 31 * DAY_MS
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    times = [int(start.timestamp() * 1000) + (i % 3) * step + i for i in range(90)]
    for i, at in enumerate(times):
        producer.send(key=f"k{i}".encode(), value=order(i, 1), schema=V1, timestamp_ms=at)
    producer.flush()
    config = job_config(stack, tmp_path, topic)
    config = config.model_copy(
        update={"table": config.table.model_copy(update={"partitioning": partitioning})}
    )

    run_once(config, spark)

    assert_exactly_once(table_rows(config), producer.sent)
    name = f"kafka_timestamp_{partitioning}"
    assert [f.name for f in load_table(config).spec().fields] == [name]
    since_epoch = (
        (lambda ms: ms // HOUR_MS)
        if partitioning == "hour"
        else (
            lambda ms: (
                (dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).year - 1970) * 12
                + dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).month
                - 1
            )
        )
    )
    expected = collections.Counter(since_epoch(at) for at in times)
    assert files_by_partition(config) == {
        (0, ((name, value),)): count for value, count in expected.items()
    }


def test_value_fields_partition_the_table_and_a_spec_change_evolves_it(
    stack, spark, tmp_path, unique_name
):
    topic = f"part-value-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    produce_orders(producer, 0, 80)
    config = job_config(stack, tmp_path, topic)
    config = config.model_copy(
        update={
            "table": config.table.model_copy(
                update={
                    "partitioning": "none",
                    "partition_by": ("bucket(4, value.id)", "truncate(1, value.status)"),
                }
            )
        }
    )

    run_once(config, spark)

    assert_exactly_once(table_rows(config), producer.sent)
    bucket = BucketTransform(4).transform(LongType())
    expected = collections.Counter((bucket(i), "P" if i % 2 else "N") for i in range(80))
    assert files_by_partition(config) == {
        (0, (("value_id_bucket_4", b), ("value_status_truncate_1", s))): n
        for (b, s), n in expected.items()
    }

    # A spec change: days of the timestamp and the status itself. The job started again
    # evolves the table to a new partition spec; the files written before keep theirs.
    evolved = config.model_copy(
        update={
            "table": config.table.model_copy(
                update={"partitioning": "day", "partition_by": ("value.status",)}
            )
        }
    )
    produce_orders(producer, 80, 40)
    run_once(evolved, spark)

    table = load_table(evolved)
    assert [f.name for f in table.spec().fields if str(f.transform) != "void"] == [
        "kafka_timestamp_day",
        "value_status",
    ]
    assert len(table.specs()) == 2
    assert_exactly_once(table_rows(evolved), producer.sent)
    by_spec = collections.Counter()
    for (spec_id, _), count in files_by_partition(evolved).items():
        by_spec[spec_id] += count
    assert by_spec == {0: 80, table.spec().spec_id: 40}
    statuses = {
        dict(p)["value_status"]
        for (spec_id, p) in files_by_partition(evolved)
        if spec_id == table.spec().spec_id
    }
    assert statuses == {"NEW", "PAID"}
