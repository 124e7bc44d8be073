"""Routing (``routes``): one topic carrying several source tables' Debezium change events,
routed by ``source.table`` to a table each, each with its own mode, keys and registry subject;
events of a table no route names, a tombstone and an undecodable record land in the topic's
own table.  A crash between two tables' commits of one batch neither loses nor duplicates a
record in any table."""

from __future__ import annotations

import contextlib

import pytest

from floe_sparkapp.config import parse_config
from floe_sparkapp.ledger import last_commit
from floe_sparkapp.table_writer import TableWriter

from .jobkit import (
    AvroProducer,
    assert_exactly_once,
    create_topic,
    job_config,
    load_table,
    route_table,
    run_once,
    table_rows,
)
from .test_job_cdc import ROW_V1, ROW_V2, Database, envelope

pytestmark = [pytest.mark.integration]

ORDER_ROW = [
    {"name": "id", "type": "int"},
    {"name": "customer", "type": "int"},
    {"name": "total", "type": "double"},
]
PRODUCT_ROW = [{"name": "id", "type": "int"}, {"name": "title", "type": "string"}]
AUDIT_ROW = [{"name": "id", "type": "int"}, {"name": "what", "type": "string"}]


def namespace(table: str) -> str:
    return f"inventory.public.{table}"


def subject(topic: str, table: str) -> str:
    """The registry's TopicRecordNameStrategy subject of a table's envelopes."""
    return f"{topic}-{namespace(table)}.Envelope"


def routed_config(stack, tmp_path, topic: str):
    base = job_config(stack, tmp_path, topic, max_records=60)
    data = base.model_dump(by_alias=True, mode="json", exclude_none=True)
    data["value"]["schemaRegistry"]["subject"] = subject(topic, "audit")
    stem = base.table.identifier

    def route(table: str, mode: str, keys: list[str]) -> dict:
        return {
            "field": "source.table",
            "values": [table],
            "subject": subject(topic, table),
            "table": {"identifier": f"{stem}_{table}", "mode": mode, "keyColumns": keys},
        }

    data["routes"] = [
        route("customers", "cdc", []),  # keyed by the Kafka key
        route("orders", "cdc", ["id"]),
        route("products", "append", []),
    ]
    return parse_config(data)


@contextlib.contextmanager
def crashing_before(destination, monkeypatch):
    """For the block, the driver stops between two tables' commits of a batch: before
    ``destination``'s (the block expects that error)."""
    commit_batch = TableWriter.commit_batch

    def crash(self, *args, **kwargs):
        if self.config.table.identifier == destination.table.identifier:
            raise RuntimeError("crashed between two tables' commits")
        return commit_batch(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(TableWriter, "commit_batch", crash)
        with pytest.raises(Exception, match="crashed between two tables' commits"):
            yield


def for_table(config, identifier: str):
    [found] = [d for d in config.destinations() if d.table.identifier == identifier]
    return found


def test_one_topic_routed_to_three_tables_exactly_once_through_a_crash_between_commits(
    stack, spark, tmp_path, unique_name, monkeypatch
):
    topic = f"routes-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=3)
    producer = AvroProducer(stack, topic, record_subjects=True)
    config = routed_config(stack, tmp_path, topic)
    audit, customers, orders, products = config.destinations()
    databases = {
        "customers": Database("customers"),
        "orders": Database("orders", blank={"customer": 0, "total": 0.0}),
        "products": Database("products", blank={}),
        "audit": Database("audit", blank={}),
    }
    schemas = {
        "customers": envelope(ROW_V1, namespace("customers")),
        "orders": envelope(ORDER_ROW, namespace("orders")),
        "products": envelope(PRODUCT_ROW, namespace("products")),
        "audit": envelope(AUDIT_ROW, namespace("audit")),
    }
    sent_to: dict[str, set] = {name: set() for name in databases}
    before = set()

    def send(table: str, op: str, row_id: int, **fields) -> None:
        value = databases[table].change(op, row_id, **fields)
        producer.send(key=f'{{"id":{row_id}}}'.encode(), value=value, schema=schemas[table])

    def note_sent() -> None:  # which table each record produced since the last call is for
        producer.flush()
        for position, record in producer.sent.items():
            if position in before:
                continue
            before.add(position)
            value = record["value"]
            table = value["source"]["table"] if value is not None else "audit"
            sent_to[table if table in sent_to else "audit"].add(position)

    # The snapshot: every table's rows read, an event of a table no route names (audit), a
    # tombstone and a record that is not Avro at all (both no route can take).
    for i in range(30):
        send("customers", "r", i, name=f"customer {i}")
        send("orders", "r", i, customer=i % 7, total=float(i))
    for i in range(20):
        send("products", "r", i, title=f"product {i}")
    for i in range(5):
        send("audit", "c", i, what=f"login {i}")
    producer.send(key=b"gone", value=None)
    producer.send(key=b"broken", raw=b"\x01not avro")
    note_sent()
    run_once(config, spark)

    # Changes of every table; the job crashes after a batch committed to the topic's own table
    # and to customers, before orders and products: those two are behind until it starts again.
    for i in range(30, 60):
        send("customers", "c", i, name=f"customer {i}")
        send("orders", "c", i, customer=i % 7, total=float(i))
    for i in range(0, 60, 3):
        send("customers", "u", i, email=f"c{i}@example.com")
        send("orders", "u", i, total=float(i) * 2)
    for i in range(0, 60, 10):
        send("customers", "d", i)
        send("orders", "d", i)
    for i in range(20, 30):
        send("products", "c", i, title=f"product {i}")
    send("audit", "c", 5, what="logout")
    note_sent()

    with crashing_before(orders, monkeypatch):
        run_once(config, spark)
    ahead = last_commit(load_table(customers), config.writer, topic).offsets
    behind = last_commit(load_table(orders), config.writer, topic).offsets
    assert sum(ahead.values()) > sum(behind.values()), (ahead, behind)
    run_once(config, spark)

    # customers' source table gains a column: only the customers table evolves.
    schemas["customers"] = envelope(ROW_V2, namespace("customers"))
    for i in range(60, 70):
        send("customers", "c", i, name=f"customer {i}", tier="gold")
    send("customers", "u", 1, tier="silver")
    note_sent()
    run_once(config, spark)

    for name, destination in (("customers", customers), ("orders", orders)):
        rows = table_rows(destination)
        # Spark and PyIceberg read the same rows through the deletion vectors (a row once
        # went missing from PyIceberg's read of orders here: which reader, if it recurs)
        by_spark = sorted(
            tuple(r)
            for r in spark.table(f"{destination.table.catalog.name}.{destination.table.identifier}")
            .select("kafka.partition", "kafka.offset", "value.id")
            .collect()
        )
        assert (
            sorted((r["kafka"]["partition"], r["kafka"]["offset"], r["value"]["id"]) for r in rows)
            == by_spark
        ), name
        assert {r["value"]["id"]: r["value"] for r in rows} == databases[name].rows, name
        assert len(rows) == len(databases[name].rows)
    assert [
        f.name for f in load_table(customers).schema().find_field("value").field_type.fields
    ] == ["id", "name", "email", "tier"]
    assert [f.name for f in load_table(orders).schema().find_field("value").field_type.fields] == [
        "id",
        "customer",
        "total",
    ]

    # Append tables: a row per record routed there, each once.
    assert_exactly_once(table_rows(products), dict.fromkeys(sent_to["products"]))
    assert {r["value"]["after"]["title"] for r in table_rows(products)} == {
        f"product {i}" for i in range(30)
    }
    unmatched = table_rows(audit)
    assert_exactly_once(unmatched, dict.fromkeys(sent_to["audit"]))
    assert sorted(r["value"]["after"]["what"] for r in unmatched if r["value"]) == sorted(
        [f"login {i}" for i in range(5)] + ["logout"]
    )
    [broken] = [r for r in unmatched if r["value_error"]]
    assert broken["value_raw"] == b"\x01not avro"
    assert "Confluent wire format" in broken["value_error"]
    [tombstone] = [r for r in unmatched if r["key"] == b"gone"]
    assert tombstone["value"] is None and tombstone["value_raw"] is None

    # Every table has the topic's offsets, each its own commit.
    for destination in (audit, customers, orders, products):
        assert (
            last_commit(load_table(destination), config.writer, topic).offsets
            == producer.next_offsets()
        ), destination.table.identifier


def test_json_values_are_routed_by_a_field(stack, spark, tmp_path, unique_name):
    from confluent_kafka import Producer

    topic = f"routes-json-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    base, data = sales_job(stack, tmp_path, topic)
    data["routes"] = [
        {
            "field": "region",
            "values": ["eu", "uk"],
            "table": route_table(data["table"], identifier=f"{base.table.identifier}_eu"),
        },
        {
            "field": "region",
            "values": ["us"],
            "table": route_table(
                data["table"],
                identifier=f"{base.table.identifier}_us",
                mode="upsert",
                keyColumns=["id"],
            ),
        },
    ]
    config = parse_config(data)
    default, europe, america = config.destinations()
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    payloads = [
        b'{"id": 1, "region": "eu"}',
        b'{"id": 2, "region": "uk"}',
        b'{"id": 4, "region": "us"}',
        b'{"id": 4, "region": "us", "later": 1}',
        b'{"id": 5, "region": "apac"}',
        b'{"id": 6}',
        b"not json",
    ]
    for i, payload in enumerate(payloads):
        producer.produce(topic, key=str(i).encode(), value=payload)
    producer.flush(30)

    run_once(config, spark)

    assert sorted(r["value"]["id"] for r in table_rows(europe)) == [1, 2]
    assert [r["key"] for r in table_rows(america)] == [b"3"]  # the last record of id 4
    rest = {r["key"]: r for r in table_rows(default)}  # no route's value, no field, not JSON
    assert {k: (r["value"] or {}).get("id") for k, r in rest.items()} == {
        b"4": 5,
        b"5": 6,
        b"6": None,
    }
    assert rest[b"6"]["value_raw"] == b"not json"


def test_maintenance_runs_each_action_on_every_table_of_a_routed_topic(
    stack, spark, tmp_path, unique_name
):
    import json

    from floe_sparkapp.__main__ import main
    from floe_sparkapp.maintenance import PROPERTY_PREFIX

    topic = f"routes-maint-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=1)
    producer = AvroProducer(stack, topic, record_subjects=True)
    config = routed_config(stack, tmp_path, topic)
    for table in ("customers", "orders", "products", "audit"):
        producer.send(
            key=b'{"id":1}',
            schema=envelope(
                {
                    "customers": ROW_V1,
                    "orders": ORDER_ROW,
                    "products": PRODUCT_ROW,
                    "audit": AUDIT_ROW,
                }[table],
                namespace(table),
            ),
            value=Database(table, blank={}).change(
                "c",
                1,
                **{
                    "customers": {"name": "a", "email": None},
                    "orders": {"customer": 1, "total": 1.0},
                    "products": {"title": "t"},
                    "audit": {"what": "w"},
                }[table],
            ),
        )
    producer.flush()
    run_once(config, spark)
    config_file = tmp_path / "job.json"
    config_file.write_text(config.to_json())

    assert main(["maintain", "--config", str(config_file), "--action", "expire-snapshots"]) == 0

    for destination in config.destinations():
        run = json.loads(load_table(destination).properties[PROPERTY_PREFIX + "expire-snapshots"])
        assert run["outcome"] == "Succeeded", destination.table.identifier


def sales_job(stack, tmp_path, topic: str):
    """The job config of a topic of plain JSON sales (its subject registered), and its data
    to add routes to."""
    import json

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    schema = {
        "type": "record",
        "name": "Sale",
        "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}],
    }
    SchemaRegistryClient({"url": stack.registry_url}).register_schema(
        f"{topic}-value", Schema(json.dumps(schema), "AVRO")
    )
    base = job_config(stack, tmp_path, topic, fmt="json")
    return base, base.model_dump(by_alias=True, mode="json", exclude_none=True)


def sales_config(stack, tmp_path, topic: str, routes: tuple[str, ...] = ("eu", "us")):
    """Sales (:func:`sales_job`) routed by region to a table each (``routes``, of eu and
    us); the rest to the topic's own table."""
    base, data = sales_job(stack, tmp_path, topic)
    data["routes"] = [
        {
            "field": "region",
            "values": [region],
            "table": route_table(data["table"], identifier=f"{base.table.identifier}_{region}"),
        }
        for region in routes
    ]
    return parse_config(data)


class Sales:
    """Produces sales; remembers each one's id by its position."""

    def __init__(self, stack, topic: str):
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": stack.bootstrap})
        self.sent: dict[tuple[int, int], int] = {}

    def send(self, region: str, ids: range) -> None:
        import json

        def delivered(error, message):
            assert error is None, error
            self.sent[(message.partition(), message.offset())] = int(message.key())

        for i in ids:
            self.producer.produce(
                self.topic,
                key=str(i).encode(),
                on_delivery=delivered,
                value=json.dumps({"id": i, "region": region}).encode(),
            )
        assert self.producer.flush(30) == 0


def ids(config) -> list[int]:
    return sorted(r["value"]["id"] for r in table_rows(config))


def sales_topic(stack, tmp_path, name: str):
    """A topic of sales (two partitions), its routed job config, and a producer of sales."""
    create_topic(stack.bootstrap, name, partitions=2)
    return sales_config(stack, tmp_path, name), Sales(stack, name)


def end_offsets(sales: Sales) -> dict[int, int]:
    return {p: max(o for q, o in sales.sent if q == p) + 1 for p, _ in sales.sent}


@pytest.mark.faults
def test_a_route_removed_and_added_again_lands_each_record_in_one_table(
    stack, spark, tmp_path, unique_name
):
    """While the eu route is gone, eu sales land in the topic's own table; added back, the eu
    table goes on from where the other tables are, not from its own older offsets: no sale is
    in two tables, none is missing."""
    topic = f"routes-again-{unique_name}".replace("_", "-")
    config, sales = sales_topic(stack, tmp_path, topic)
    default, europe, america = config.destinations()
    sales.send("eu", range(10))
    sales.send("us", range(100, 105))
    run_once(config, spark)

    sales.send("eu", range(10, 20))  # the eu route removed: the topic's own table takes these
    sales.send("us", range(105, 110))
    run_once(sales_config(stack, tmp_path, topic, routes=("us",)), spark)

    sales.send("eu", range(20, 30))  # the eu route back
    sales.send("us", range(110, 115))
    run_once(config, spark)

    assert ids(europe) == [*range(10), *range(20, 30)]
    assert ids(default) == list(range(10, 20))
    assert ids(america) == list(range(100, 115))
    every = table_rows(default) + table_rows(europe) + table_rows(america)
    assert_exactly_once(every, sales.sent)
    for destination in (default, europe, america):
        assert last_commit(load_table(destination), config.writer, topic).offsets == end_offsets(
            sales
        )


@pytest.mark.faults
@pytest.mark.parametrize("change", ["rolled back to its root", "dropped and created again"])
def test_a_route_table_emptied_goes_on_from_where_the_other_tables_are(
    stack, spark, tmp_path, unique_name, change
):
    """A route's table whose ``main`` a user rolled back to its empty root, or that was dropped
    and created again, goes on from where the topic's other tables are (going back would route
    to it records another table took while it was not there): the job neither stops nor
    restarts in a loop, and no other table gets a record twice."""
    from floe_sparkapp.catalog import load_catalog

    from .test_job_neighbour_faults import _root

    topic = f"routes-emptied-{unique_name}".replace("_", "-")
    config, sales = sales_topic(stack, tmp_path, topic)
    default, europe, america = config.destinations()
    sales.send("eu", range(10))
    sales.send("us", range(100, 105))
    sales.send("apac", range(200, 203))
    run_once(config, spark)
    assert ids(europe) == list(range(10))

    if change == "rolled back to its root":
        spark.sql(
            f"CALL {europe.table.catalog.name}.system.rollback_to_snapshot("
            f"'{europe.table.identifier}', {_root(load_table(europe))})"
        )
    else:
        load_catalog(europe.table.catalog).purge_table(europe.table.identifier)
    sales.send("eu", range(10, 20))
    sales.send("us", range(105, 110))
    sales.send("apac", range(203, 206))
    run_once(config, spark)

    assert ids(europe) == list(range(10, 20))
    assert ids(america) == list(range(100, 110))
    assert ids(default) == list(range(200, 206))
    for destination in (default, europe, america):
        assert last_commit(load_table(destination), config.writer, topic).offsets == end_offsets(
            sales
        )


SALE = {
    "type": "record",
    "name": "Sale",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "region", "type": "string"},
        {"name": "tier", "type": "string"},
    ],
}


def test_fan_out_lands_a_record_in_every_table_whose_route_matches_through_a_crash(
    stack, spark, tmp_path, unique_name, monkeypatch
):
    """fanOut: a sale of a gold customer in the EU lands in both the eu and the gold tables;
    one matching no route in the topic's own table. A crash between two tables' commits of a
    batch loses and doubles nothing in either."""
    topic = f"fanout-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    producer = AvroProducer(stack, topic)
    base = job_config(stack, tmp_path, topic)
    data = base.model_dump(by_alias=True, mode="json", exclude_none=True)
    stem = base.table.identifier
    data["routes"] = [
        {"field": "region", "values": ["eu"], "table": {"identifier": f"{stem}_eu"}},
        {"field": "tier", "values": ["gold", "platinum"], "table": {"identifier": f"{stem}_gold"}},
    ]
    data["fanOut"] = True
    config = parse_config(data)
    rest, eu, gold = config.destinations()
    regions, tiers = ("eu", "us", "apac"), ("gold", "silver", "platinum", "basic")

    def produce(start_at: int, count: int) -> None:
        for i in range(start_at, start_at + count):
            producer.send(
                key=f"s{i}".encode(),
                schema=SALE,
                value={"id": i, "region": regions[i % 3], "tier": tiers[i % 4]},
            )
        producer.flush()

    def expected(table) -> dict:
        def takes(value: dict) -> bool:
            if table is eu:
                return value["region"] == "eu"
            if table is gold:
                return value["tier"] in ("gold", "platinum")
            return value["region"] != "eu" and value["tier"] not in ("gold", "platinum")

        return {position: None for position, sent in producer.sent.items() if takes(sent["value"])}

    produce(0, 120)
    run_once(config, spark)
    produce(120, 120)
    with crashing_before(gold, monkeypatch):
        run_once(config, spark)
    assert sum(last_commit(load_table(eu), config.writer, topic).offsets.values()) > sum(
        last_commit(load_table(gold), config.writer, topic).offsets.values()
    )
    run_once(config, spark)

    for destination in (rest, eu, gold):
        rows = table_rows(destination)
        assert_exactly_once(rows, expected(destination))
        assert (
            last_commit(load_table(destination), config.writer, topic).offsets
            == producer.next_offsets()
        ), destination.table.identifier
    both = [r["value"]["id"] for r in table_rows(eu) if r["value"]["tier"] in ("gold", "platinum")]
    assert both and set(both) <= {r["value"]["id"] for r in table_rows(gold)}


@pytest.mark.faults
@pytest.mark.parametrize("change", ["a route removed", "a route added"])
def test_a_routing_change_after_a_partial_batch_finishes_it_with_the_routing_it_began_with(
    stack, spark, tmp_path, unique_name, monkeypatch, change
):
    """A batch committed to the topic's own table, not yet to its routes' (the driver stopped
    between two tables' commits), then the routes changed before the job started again: the
    batch is finished with the routing it began with (a removed route's table still gets its
    records; a route added takes none the own table already holds), and only then does the new
    routing apply.  The checkpoint is kept in one case and lost in the other."""
    import shutil

    topic = f"routes-partial-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    sales = Sales(stack, topic)
    before, after = (
        (("eu", "us"), ("us",)) if change == "a route removed" else (("eu",), ("eu", "us"))
    )
    old = sales_config(stack, tmp_path, topic, routes=before)
    new = sales_config(stack, tmp_path, topic, routes=after)
    default, europe, america = sales_config(stack, tmp_path, topic).destinations()
    sales.send("eu", range(10))
    sales.send("us", range(100, 105))
    sales.send("apac", range(200, 203))
    run_once(old, spark)

    sales.send("eu", range(10, 20))
    sales.send("us", range(105, 110))
    sales.send("apac", range(203, 206))
    with crashing_before(europe, monkeypatch):
        run_once(old, spark)
    partial_end = end_offsets(sales)
    assert last_commit(load_table(default), old.writer, topic).offsets == partial_end
    assert last_commit(load_table(europe), old.writer, topic).offsets != partial_end
    if change == "a route added":
        shutil.rmtree(old.checkpoint_location)

    run_once(new, spark)  # the partial batch finished as it began, then the new routes
    sales.send("eu", range(20, 30))
    sales.send("us", range(110, 115))
    run_once(new, spark)

    if change == "a route removed":  # eu's table got the batch it was in; eu went on to table
        assert ids(europe) == list(range(20))
        assert ids(america) == list(range(100, 115))
        assert ids(default) == [*range(20, 30), *range(200, 206)]
        assert last_commit(load_table(europe), old.writer, topic).offsets == partial_end
    else:  # us's sales of the partial batch stay in the own table; the us table from there
        assert ids(europe) == list(range(30))
        assert ids(america) == list(range(110, 115))
        assert ids(default) == [*range(100, 110), *range(200, 206)]
    every = table_rows(default) + table_rows(europe) + table_rows(america)
    assert_exactly_once(every, sales.sent)
    for destination in new.destinations():
        assert last_commit(load_table(destination), new.writer, topic).offsets == end_offsets(
            sales
        ), destination.table.identifier


@pytest.mark.faults
def test_a_backfill_of_a_route_added_later_leaves_the_records_another_table_took(
    stack, spark, tmp_path, unique_name
):
    """Before the eu route existed, the topic's own table took the eu sales; a Backfill of the
    eu table afterwards lands none of them again (a record lands in one table): it says how
    many another table holds.  Records no table has (lost to a roll back) it still lands."""
    from floe_sparkapp.contract import OperationRequest
    from floe_sparkapp.operations import operate

    topic = f"routes-backfill-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    sales = Sales(stack, topic)
    config = sales_config(stack, tmp_path, topic)
    default, europe, america = config.destinations()
    sales.send("eu", range(10))  # to the own table: no eu route yet
    sales.send("us", range(100, 105))
    run_once(sales_config(stack, tmp_path, topic, routes=("us",)), spark)
    sales.send("eu", range(10, 20))
    run_once(config, spark)
    assert ids(default) == list(range(10)) and ids(europe) == list(range(10, 20))

    def backfill(uid: str) -> dict:
        return operate(
            config,
            OperationRequest.model_validate(
                {
                    "uid": uid,
                    "name": uid,
                    "type": "Backfill",
                    "backfill": {"table": europe.table.identifier},
                }
            ),
            spark,
        )

    outcome = backfill("fill")
    assert ids(europe) == list(range(10, 20)) and ids(default) == list(range(10))
    assert (outcome["landed"], outcome["heldElsewhere"]) == (0, 10), outcome

    name = f"{europe.table.catalog.name}.{europe.table.identifier}"
    spark.sql(f"DELETE FROM {name} WHERE value.id >= 15")  # rows lost, in no other table
    outcome = backfill("fill-again")
    assert (outcome["landed"], outcome["heldElsewhere"]) == (5, 10), outcome
    every = table_rows(default) + table_rows(europe) + table_rows(america)
    assert_exactly_once(every, sales.sent)


def test_a_routed_topic_starting_at_latest_lands_in_each_table_what_came_after(
    stack, spark, tmp_path, unique_name
):
    """``startingOffsets: latest`` on a routed topic: the first start records where it began on
    every table, and each table then lands only its records that came after, across starts."""
    topic = f"routes-latest-{unique_name}".replace("_", "-")
    create_topic(stack.bootstrap, topic, partitions=2)
    sales = Sales(stack, topic)
    base = sales_config(stack, tmp_path, topic)
    data = base.model_dump(by_alias=True, mode="json", exclude_none=True)
    data["kafka"]["startingOffsets"] = "latest"
    config = parse_config(data)
    default, europe, america = config.destinations()
    sales.send("eu", range(5))  # history: skipped
    sales.send("us", range(100, 105))
    run_once(config, spark)
    started = end_offsets(sales)
    for destination in (default, europe, america):
        assert last_commit(load_table(destination), config.writer, topic).offsets == started
    sales.send("eu", range(5, 10))
    sales.send("apac", range(200, 203))
    run_once(config, spark)
    sales.send("us", range(105, 110))
    run_once(config, spark)
    assert ids(europe) == list(range(5, 10))
    assert ids(america) == list(range(105, 110))
    assert ids(default) == list(range(200, 203))
