"""A Replay's transactions against their size: what one costs with the replay's producer.

A Replay (``sparkapp/floe_sparkapp/replay.py``) produces a table's rows to a topic in Kafka
transactions of ``recordsPerTransaction`` records, each committed with the source offsets it
covers (``send_offsets_to_transaction``), so that a killed attempt's successor goes on after
the last. This times that loop alone, against the stack's broker: ``--transactions``
transactions of each size (``--sizes 1,10,100``, ~100-byte records), with the producer
settings the replay uses (``floe``) and with librdkafka's defaults for the retry backoff
(``default``: 100 ms), one after the other, each on a topic of its own.

Usage: python bench/replay_transactions.py [--sizes 1,10,100] [--transactions 200]
Needs the local stack (started if not running). Writes bench/results/replay_transactions.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import log, machine  # noqa: E402
from floe_sparkapp.replay import PRODUCER_SETTINGS  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "replay_transactions.json"
# The replay's producer, and the same with librdkafka's retry backoff.
SETTINGS = {
    "floe": PRODUCER_SETTINGS,
    "default": {k: v for k, v in PRODUCER_SETTINGS.items() if not k.startswith("retry.backoff")},
}


def one(bootstrap: str, settings: dict, size: int, transactions: int) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-replay-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic, **settings})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic})
    producer.init_transactions(60)
    value = b"x" * 100
    started = time.monotonic()
    for n in range(transactions):
        producer.begin_transaction()
        for _ in range(size):
            producer.produce(topic, value=value)
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, (n + 1) * size)], consumer.consumer_group_metadata(), 60
        )
        producer.commit_transaction(120)
    seconds = time.monotonic() - started
    consumer.close()
    return {
        "size": size,
        "transactions": transactions,
        "ms_per_transaction": round(seconds / transactions * 1000, 2),
        "records_per_second": round(size * transactions / seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100")
    parser.add_argument("--transactions", type=int, default=200)
    args = parser.parse_args()
    from hack import stack as local_stack

    state, _ = local_stack.ensure_up()
    bootstrap = local_stack.connection_env(state)["FLOE_KAFKA_BOOTSTRAP"]
    results = {name: [] for name in SETTINGS}
    for size in (int(s) for s in args.sizes.split(",")):
        for name, settings in SETTINGS.items():
            results[name].append(one(bootstrap, settings, size, args.transactions))
            log(f"{name} × {size}: {results[name][-1]}")
    RESULTS.write_text(
        json.dumps(
            {
                "command": "python bench/replay_transactions.py " + " ".join(sys.argv[1:]),
                "machine": machine(),
                "settings": SETTINGS,
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
