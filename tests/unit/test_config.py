"""The job's config: the resource's spec (the contract's models) and what the operator adds,
round trip through JSON, and bad configs named field by field, in the contract's words."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from floe_sparkapp.config import ConfigError, load_config, parse_config

pytestmark = pytest.mark.unit

GOOD = {
    "writer": "data/orders",
    "kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"},
    "value": {
        "format": "avro",
        "schemaRegistry": {"url": "http://registry:8081", "subject": "orders-value"},
    },
    "table": {
        "catalog": {"type": "sql", "uri": "jdbc:sqlite:/data/c.db", "warehouse": "s3://lake/wh"},
        "identifier": "analytics.orders",
    },
    "checkpointLocation": "s3a://lake/checkpoints/data/orders",
}


def with_(path: str, value):
    data = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


def test_config_round_trips_through_json_with_defaults():
    config = parse_config(GOOD)
    again = parse_config(config.to_json())
    assert again == config
    assert config.commit.interval_seconds == 60
    assert config.kafka.isolation_level == "read_committed"
    assert config.table.partitioning == "day"
    assert config.consumer_group == "floe.data.orders"
    assert json.loads(config.to_json())["kafka"]["bootstrapServers"] == "kafka:9092"


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("kafka.topic", ..., "kafka.topic: Field required"),
        ("kafka.topic", "bad topic!", "kafka.topic: String should match pattern"),
        (
            "value.schemaRegistry",
            ...,
            "value: schemaRegistry is required when format is avro, json "
            "or protobuf: the table schema comes from the registry (use "
            "format raw to keep the bytes only; for plain JSON without a "
            "registry, declare columns or set inferSchema)",
        ),
        (
            "value.format",
            "xml",
            "value.format: Input should be 'avro', 'json', 'protobuf' or 'raw'",
        ),
        (
            "value.message",
            "shop.Order",
            "message names a Protobuf message: it needs format protobuf",
        ),
        ("table.identifier", "orders", "table.identifier: String should match pattern"),
        (
            "table.catalog.uri",
            "sqlite:/c.db",
            "table.catalog: a sql catalog needs uri: "
            "jdbc:postgresql://host:port/db or jdbc:sqlite:/path",
        ),
        (
            "table.partitioning",
            "week",
            "table.partitioning: Input should be 'hour', 'day', 'month' or 'none'",
        ),
        ("writer", "orders", "writer: String should match pattern"),
        ("table.keyColumns", ["id"], "table: keyColumns apply to modes upsert and cdc only"),
        ("table.mode", "merge", "table.mode: Input should be 'append', 'upsert' or 'cdc'"),
        ("kafka.brokers", "x", "kafka.brokers: Extra inputs are not permitted"),
    ],
)
def test_bad_configs_name_the_field_and_what_is_wrong(path, value, message):
    with pytest.raises(ConfigError) as error:
        parse_config(with_(path, value))
    assert str(error.value).startswith("invalid job config: ")
    assert message in str(error.value)


def test_the_entry_point_refuses_a_bad_config_before_starting_spark(tmp_path):
    bad = tmp_path / "job.json"
    bad.write_text(json.dumps(with_("commit", {"interval": "0s"})))

    result = subprocess.run(
        [sys.executable, "-m", "floe_sparkapp", "run", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2
    assert result.stderr.strip() == (
        "floe: invalid job config: commit: commit.interval must be between 1s and 1d"
    )


def test_a_missing_or_broken_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="cannot read job config"):
        load_config(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        load_config(broken)


def test_upsert_keys_are_value_field_paths_and_a_raw_topic_has_none():
    upsert = with_("table.mode", "upsert")
    upsert["table"]["keyColumns"] = ["id", "customer.id"]
    assert parse_config(upsert).table.key_columns == ("id", "customer.id")
    for columns, message in [
        (["id", "id"], "table: keyColumns names a field twice"),
        (["value.id!"], "table.keyColumns.0: String should match pattern"),
        ([f"k{i}" for i in range(9)], "table.keyColumns: Tuple should have at most 8 items"),
    ]:
        upsert["table"]["keyColumns"] = columns
        with pytest.raises(ConfigError) as error:
            parse_config(upsert)
        assert message in str(error.value)
    raw = with_("value.format", "raw")
    raw["table"].update(mode="upsert", keyColumns=["id"])
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert (
        "table.keyColumns name value fields, and a raw topic's value has none: leave "
        "keyColumns out to key rows by the Kafka key"
    ) in str(error.value)
    raw["table"]["keyColumns"] = []
    assert parse_config(raw).table.mode == "upsert"  # keyed by the Kafka key


def test_cdc_reads_decoded_envelopes_keyed_by_fields_of_the_row():
    cdc = with_("table.mode", "cdc")
    cdc["table"]["keyColumns"] = ["id"]
    assert parse_config(cdc).table.key_columns == ("id",)
    raw = with_("value.format", "raw")
    raw["table"]["mode"] = "cdc"
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert "table.mode cdc reads Debezium change events: value.format must be avro or json" in str(
        error.value
    )


def route(field: str, values: list[str], identifier: str, **table) -> dict:
    return {"field": field, "values": values, "table": {"identifier": identifier, **table}}


def test_routes_give_each_table_its_own_config_and_subject():
    routed = with_(
        "routes",
        [
            {
                **route("source.table", ["customers"], "crm.customers", mode="cdc"),
                "subject": "inventory-customers",
            },
            route("region", ["eu", "uk"], "analytics.orders_eu"),
        ],
    )
    config = parse_config(routed)
    default, customers, europe = config.destinations()
    assert default == config
    assert (customers.table.identifier, customers.table.mode, customers.routes) == (
        "crm.customers",
        "cdc",
        (),
    )
    assert customers.table.catalog == config.table.catalog  # every table is in the topic's
    assert customers.value.schema_registry.subject == "inventory-customers"
    assert europe.value.schema_registry.subject == "orders-value"  # the topic's own
    assert {d.writer for d in config.destinations()} == {"data/orders"}
    assert parse_config(json.loads(config.to_json())) == config


def test_a_routing_is_told_apart_by_its_digest_and_a_job_made_again_with_a_recorded_one():
    """What decides a record's tables (routes, fanOut, the conversions) has a digest recorded
    with each routed commit; the job as it was is made again from the routing it recorded,
    the rest of its spec as it is now."""
    eu = route("region", ["eu"], "analytics.orders_eu")
    config = parse_config(with_("routes", [eu, route("region", ["us"], "analytics.orders_us")]))
    changed = [
        parse_config(with_("routes", [eu])),
        parse_config({**with_("routes", [eu]), "fanOut": True}),
        parse_config(with_("routes", [route("region", ["eu", "uk"], "analytics.orders_eu")])),
        parse_config(with_("routes", [{**eu, "subject": "orders-eu"}])),
    ]
    digests = {c.routing_digest() for c in [config, *changed]}
    assert len(digests) == 5
    assert parse_config(json.loads(config.to_json())).routing_digest() == config.routing_digest()
    assert config.recorded_routing() == (
        ("analytics.orders", "analytics.orders_eu", "analytics.orders_us"),
        config.routing_digest(),
    )
    assert parse_config(GOOD).recorded_routing() == ((), None)
    later = parse_config({**with_("routes", [eu]), "commit": {"interval": "5s"}})
    before = later.routed_as(config.routing())
    assert before.routing_digest() == config.routing_digest()
    assert [d.table.identifier for d in before.destinations()] == [
        "analytics.orders",
        "analytics.orders_eu",
        "analytics.orders_us",
    ]
    assert before.commit.interval == "5s"  # the rest as the job has it now


@pytest.mark.parametrize(
    "routes, fmt, message",
    [
        (
            [route("region", ["eu"], "analytics.orders")],
            "avro",
            "each route needs a table of its own: routes[].table.identifier must differ from "
            "table.identifier and from each other",
        ),
        (
            [route("region", ["eu"], "analytics.eu"), route("region", ["uk"], "analytics.eu")],
            "avro",
            "each route needs a table of its own",
        ),
        (
            [route("region", ["eu"], "analytics.eu")],
            "raw",
            "routes pick a table by a value field, and a raw topic's value has none",
        ),
        (
            [route("region", [], "analytics.eu")],
            "avro",
            "routes.0.values: Tuple should have at least 1 item",
        ),
        ([route("region!", ["eu"], "analytics.eu")], "avro", "routes.0.field: String should match"),
        (
            [
                {
                    **route("region", ["eu"], "analytics.eu"),
                    "table": {
                        **route("region", ["eu"], "analytics.eu")["table"],
                        "catalog": GOOD["table"]["catalog"],
                    },
                }
            ],
            "avro",
            "routes.0.table.catalog: Extra inputs are not permitted",
        ),  # the topic's catalog
    ],
)
def test_bad_routes_say_what_to_change(routes, fmt, message):
    data = with_("routes", routes)
    data["value"]["format"] = fmt
    with pytest.raises(ConfigError) as error:
        parse_config(data)
    assert message in str(error.value)


def test_a_decoded_key_names_its_subject_in_the_values_registry():
    keyed = with_("key", {"format": "avro", "subject": "orders-key"})
    config = parse_config(keyed)
    assert config.key.decoded and config.key_registry().subject == "orders-key"
    assert config.key_registry().url == "http://registry:8081"
    assert not parse_config(GOOD).key.decoded and parse_config(GOOD).key_registry() is None
    with pytest.raises(ConfigError) as error:
        parse_config(with_("key", {"format": "json"}))
    assert (
        "key: key.subject is required when key.format is avro, json or protobuf: the "
        "key_fields column comes from the registry (use format raw to keep the key's bytes "
        "only)"
    ) in str(error.value)
    keyed["routes"] = [{**route("region", ["eu"], "analytics.eu"), "keySubject": "eu-key"}]
    default, europe = parse_config(keyed).destinations()
    assert (default.key_registry().subject, europe.key_registry().subject) == (
        "orders-key",
        "eu-key",
    )


def test_the_secrets_values_come_from_their_mounts_or_the_environment(tmp_path, monkeypatch):
    mounted = tmp_path / "catalog"
    mounted.mkdir()
    (mounted / "jdbc.password").write_text("from-the-secret\n")
    (mounted / "..data").mkdir()  # Kubernetes' bookkeeping in a Secret volume
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "basic.auth.user.info").write_text("floe:pw")
    monkeypatch.setenv("KAFKA_JAAS", "jaas-config")
    data = with_(
        "secrets",
        {
            "catalog": {"dir": str(mounted)},
            "registry": {"dir": str(registry)},
            "kafka": {"env": {"sasl.jaas.config": "KAFKA_JAAS"}},
        },
    )
    config = parse_config(data)
    assert config.catalog().properties == {"jdbc.password": "from-the-secret"}
    assert config.table.catalog.properties == {}  # the config itself holds no secret
    assert config.registry_auth() == "floe:pw"
    from floe_sparkapp.config import kafka_client_settings

    assert kafka_client_settings(config) == {"sasl.jaas.config": "jaas-config"}
    monkeypatch.delenv("KAFKA_JAAS")
    with pytest.raises(ConfigError, match=r"secrets.kafka.env: environment variable.*KAFKA_JAAS"):
        kafka_client_settings(config)


def test_the_job_sizes_its_shuffles_to_its_cores_unless_the_spec_sets_them():
    from floe_sparkapp.session import shuffle_partitions

    assert shuffle_partitions({"spark.app.name": "floe data/orders"}, 2) == "2"
    assert shuffle_partitions({}, 8) == "8"
    assert shuffle_partitions({"spark.sql.shuffle.partitions": "64"}, 2) is None
    # On a cluster: the executors asked for, registered or not yet.
    assert (
        shuffle_partitions({"spark.executor.instances": "3", "spark.executor.cores": "4"}, 2)
        == "12"
    )
    assert shuffle_partitions({"spark.executor.instances": "1"}, 2) == "2"
