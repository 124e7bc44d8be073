"""The KafkaIcebergTopic CRD on the real API server: defaults, and specs it refuses."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from floe_operator.render import Topic, job_config
from floe_operator.settings import OperatorSettings

from ..contract_cases import CASES, TRANSITIONS, VALID, changed, routed, upsert
from .kube import FLOE_CRD, admin_client, install_crd

pytestmark = pytest.mark.e2e

ARGS = ("floe.dev", "v1alpha1")


@pytest.fixture(scope="module")
def api(stack):
    admin = admin_client(stack)
    install_crd(admin, FLOE_CRD)
    return client.CustomObjectsApi(admin)


def create(api, namespace, body):
    return api.create_namespaced_custom_object(*ARGS, namespace, "kafkaicebergtopics", body)


def refusal(api, namespace, body) -> str:
    with pytest.raises(ApiException) as refused:
        create(api, namespace, body)
    assert refused.value.status == 422
    return json.loads(refused.value.body)["message"]


def test_a_valid_resource_is_accepted_with_defaults(api, namespace):
    created = create(api, namespace, VALID)
    spec = created["spec"]
    assert spec["table"]["partitioning"] == "day"
    assert spec["table"]["deletionPolicy"] == "Retain"
    assert spec["table"]["catalog"]["type"] == "sql"
    assert spec["commit"] == {
        "interval": "60s",
        "maxRecordsPerCommit": 2000000,
        "maxBytesPerCommit": "512Mi",
    }
    assert spec["kafka"]["isolationLevel"] == "read_committed"
    assert spec["spark"]["executor"] == {"cores": 1, "instances": 1, "memory": "1g"}
    assert spec["suspend"] is False


PREFIX = 'KafkaIcebergTopic.floe.dev "orders" is invalid: '


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.api[:60])
def test_invalid_specs_are_refused_with_a_message_that_says_what_to_change(api, namespace, case):
    """Each rule's refusal on the real API server; the operator and the job refuse the same
    specs in the same words (tests/unit/test_contract.py)."""
    assert refusal(api, namespace, case.body) == PREFIX + case.api


@pytest.mark.parametrize(
    "path, value, rendered, seconds",
    [
        (
            "spec.maintenance",
            {"compaction": {"targetFileSize": "1Mi"}},
            "maintenance.compaction.target_file_size_bytes",
            1_048_576,
        ),
        (
            "spec.maintenance",
            {"compaction": {"targetFileSize": "1m"}},  # Spark's way: 1 MiB
            "maintenance.compaction.target_file_size_bytes",
            1_048_576,
        ),
        (
            "spec.maintenance",
            {"compaction": {"targetFileSize": "1048576"}},
            "maintenance.compaction.target_file_size_bytes",
            1_048_576,
        ),
        (
            "spec.maintenance",
            {"compaction": {"targetFileSize": "1.5G"}},
            "maintenance.compaction.target_file_size_bytes",
            1_500_000_000,
        ),
        ("spec.commit", {"interval": "1d"}, "commit.interval_seconds", 86_400),
        ("spec.commit", {"interval": "23h59m59s"}, "commit.interval_seconds", 86_399),
        ("spec.commit", {"interval": "1s"}, "commit.interval_seconds", 1),
        ("spec.commit", {"interval": "1500ms"}, "commit.interval_seconds", 2),
        (
            "spec.maintenance",
            {"removeOrphans": {"olderThan": "1h"}},
            "maintenance.remove_orphans.older_than_seconds",
            3_600,
        ),
        (
            "spec.maintenance",
            {"removeOrphans": {"olderThan": "0.5d"}},
            "maintenance.remove_orphans.older_than_seconds",
            43_200,
        ),
        ("spec.maintenance", {"expireSnapshots": {"maxAge": "1m"}}, "snapshot_max_age_seconds", 60),
        (
            "spec.maintenance",
            {"expireSnapshots": {"maxAge": "1d12h"}},
            "snapshot_max_age_seconds",
            129_600,
        ),
    ],
)
def test_durations_and_sizes_at_their_bounds_are_accepted_and_the_operator_renders_them(
    api, namespace, path, value, rendered, seconds
):
    created = create(api, namespace, changed(path, value))
    config = job_config(Topic.from_body(created), OperatorSettings())  # no InvalidSpec either
    found = config
    for name in rendered.split("."):
        found = getattr(found, name)
    assert found == seconds


def test_an_upsert_resource_is_accepted_and_rendered_with_its_keys(api, namespace):
    created = create(api, namespace, upsert(["id", "customer.id"]))
    config = job_config(Topic.from_body(created), OperatorSettings())
    assert (config.table.mode, config.table.key_columns) == ("upsert", ("id", "customer.id"))


def test_a_cdc_resource_is_accepted_and_rendered_with_its_keys(api, namespace):
    body = upsert(["id"], format_="json")
    body["spec"]["table"]["mode"] = "cdc"
    config = job_config(Topic.from_body(create(api, namespace, body)), OperatorSettings())
    assert (config.table.mode, config.table.key_columns, config.value.format) == (
        "cdc",
        ("id",),
        "json",
    )


def test_a_routed_resource_is_accepted_and_rendered_with_each_tables_config(api, namespace):
    body = routed("inventory.customers", "inventory.orders")
    body["spec"]["routes"][0]["table"].update(mode="cdc", keyColumns=["id"])
    body["spec"]["routes"][0]["subject"] = "inventory-customers"
    config = job_config(Topic.from_body(create(api, namespace, body)), OperatorSettings())
    tables = [
        (d.table.identifier, d.table.mode, d.table.key_columns, d.value.schema_registry.subject)
        for d in config.destinations()
    ]
    assert tables == [
        ("analytics.orders", "append", (), "orders-value"),
        ("inventory.customers", "cdc", ("id",), "inventory-customers"),
        ("inventory.orders", "append", (), "orders-value"),
    ]
    assert [(r.field, r.values) for r in config.routes] == [
        ("source.table", ("customers",)),
        ("source.table", ("orders",)),
    ]


def test_a_decoded_key_is_accepted_and_rendered_with_the_values_registry(api, namespace):
    body = upsert([])
    body["spec"]["key"] = {"format": "avro", "subject": "orders-key"}
    config = job_config(Topic.from_body(create(api, namespace, body)), OperatorSettings())
    assert (config.key.format, config.key_registry().subject, config.key_registry().url) == (
        "avro",
        "orders-key",
        config.value.schema_registry.url,
    )
    assert config.table.key_columns == ()  # rows keyed by the key's fields


def test_the_topic_and_the_table_cannot_change(api, namespace):
    create(api, namespace, VALID)
    for message, (path, value) in TRANSITIONS.items():
        with pytest.raises(ApiException) as refused:
            api.patch_namespaced_custom_object(
                *ARGS, namespace, "kafkaicebergtopics", "orders", changed(path, value)
            )
        assert refused.value.status == 422
        assert json.loads(refused.value.body)["message"] == (
            f"{PREFIX}{path}: Invalid value: {message}"
        )


def test_kubectl_explain_describes_the_status_and_the_api_server_keeps_what_the_operator_writes(
    api, namespace, tmp_path
):
    """The status has a schema (generated from the operator's models): `kubectl explain` reads
    it, and a status as the planner writes it is kept whole, field for field."""
    import subprocess

    from floe_operator.plan import plan
    from floe_operator.view import RegistryView

    from ..unit.test_plan import SETTINGS, TOPIC, V3, steady

    # (a discovery cache of its own: one an earlier kubectl wrote before the CRD was served
    # would not know the short name for hours; and the API server's discovery follows a new
    # CRD a moment after it is established)
    cache = ["--cache-dir", str(tmp_path / "kube-cache")]

    deadline = time.monotonic() + 30
    while (
        explained := subprocess.run(
            ["kubectl", "explain", "kit.status", *cache], capture_output=True, text=True, timeout=60
        )
    ).returncode != 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert explained.returncode == 0, explained.stderr
    for field in ("landedThrough", "schemaChange", "offsets", "conditions", "maintenance"):
        assert field in explained.stdout, explained.stdout
    deeper = subprocess.run(
        ["kubectl", "explain", "kit.status.offsets.lag", *cache],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "the committed offsets move or the lag turns to or from zero" in " ".join(
        deeper.stdout.split()
    ), deeper.stdout

    body = dict(VALID, metadata={"name": "explained"})
    create(api, namespace, body)
    written = plan(TOPIC, steady(registry=RegistryView(3, V3)), {}, SETTINGS).status
    api.patch_namespaced_custom_object_status(
        *ARGS, namespace, "kafkaicebergtopics", "explained", {"status": written}
    )
    kept = api.get_namespaced_custom_object(*ARGS, namespace, "kafkaicebergtopics", "explained")[
        "status"
    ]
    assert kept == {k: v for k, v in written.items() if v is not None}
