"""What the operator renders for a KafkaIcebergTopic: the job config and the SparkApplication."""

from __future__ import annotations

import json

import pytest

from floe_operator.render import Topic, config_map, cron_jobs, job_fingerprint, spark_application
from floe_operator.settings import OperatorSettings
from floe_sparkapp.config import parse_config
from floe_sparkapp.units import duration_seconds, size_bytes

pytestmark = pytest.mark.unit

BODY = {
    "metadata": {"name": "orders", "namespace": "data", "uid": "u-1", "generation": 3},
    "spec": {
        "kafka": {
            "bootstrapServers": "kafka:9092",
            "topic": "orders",
            "authSecretRef": {"name": "kafka-auth"},
        },
        "value": {
            "format": "avro",
            "schemaRegistry": {
                "url": "http://registry:8081",
                "subject": "orders-value",
                "authSecretRef": {"name": "sr"},
            },
        },
        "table": {
            "catalog": {
                "uri": "jdbc:postgresql://pg:5432/iceberg",
                "warehouse": "s3://lake/wh",
                "secretRef": {"name": "lake"},
                "properties": {"s3.endpoint": "http://minio:9000"},
            },
            "identifier": "analytics.orders",
        },
        "commit": {"interval": "1m30s"},
        "deadLetter": {"topic": "orders.dlq"},
    },
}


def test_durations_and_sizes():
    assert [duration_seconds(d) for d in ("60s", "1m30s", "2h", "1500ms", "7d")] == [
        60,
        90,
        7200,
        2,
        7 * 86_400,
    ]
    assert [size_bytes(s) for s in ("256Mi", "1G", "2g", "512k", "100")] == [
        256 * 2**20,
        10**9,
        2 * 2**30,
        512 * 2**10,
        100,
    ]


def test_the_job_config_carries_the_spec_and_names_secrets_only_by_mount_path():
    topic = Topic.from_body(BODY)
    rendered = config_map(topic, OperatorSettings())

    assert rendered["metadata"]["name"] == "floe-orders-job"
    assert rendered["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    config = parse_config(rendered["data"]["job.json"])
    assert config.writer == "data/orders"
    assert config.generation == 3
    assert config.commit.interval_seconds == 90
    assert (config.secrets.kafka.dir, config.secrets.catalog.dir, config.secrets.registry.dir) == (
        "/etc/floe/secrets/kafka",
        "/etc/floe/secrets/catalog",
        "/etc/floe/secrets/registry",
    )
    # The spec as the user wrote it, the same models: nothing renamed, the pods' settings left out.
    spec = topic.spec.model_dump(exclude={"spark", "auto_rollback"})
    assert config.model_dump(include=set(spec)) == spec
    assert "spark" not in json.loads(rendered["data"]["job.json"])
    assert config.checkpoint_location == "s3a://lake/wh/_floe/checkpoints/data/orders"
    assert config.dead_letter.topic == "orders.dlq"


def test_the_spark_application_mounts_config_and_secrets_and_is_owned():
    app = spark_application(Topic.from_body(BODY), OperatorSettings(spark_image="img:1"))

    assert app["metadata"]["name"] == "floe-orders"
    assert app["metadata"]["ownerReferences"][0] == {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "KafkaIcebergTopic",
        "name": "orders",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec = app["spec"]
    assert spec["image"] == "img:1"
    assert spec["arguments"] == ["run", "--config", "/etc/floe/job/job.json"]
    # Mounted through pod templates (no webhook needed), the same in driver and executors.
    for role, container in (
        ("driver", "spark-kubernetes-driver"),
        ("executor", "spark-kubernetes-executor"),
    ):
        pod = spec[role]["template"]["spec"]
        assert [c["name"] for c in pod["containers"]] == [container]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["/etc/floe/job"]["configMap"] == {"name": "floe-orders-job"}
        assert {path: v["secret"]["secretName"] for path, v in mounts.items() if "secret" in v} == {
            "/etc/floe/secrets/kafka": "kafka-auth",
            "/etc/floe/secrets/catalog": "lake",
            "/etc/floe/secrets/registry": "sr",
        }
    assert spec["driver"]["serviceAccount"] == "floe-spark"
    assert "secret" not in json.dumps(spec["sparkConf"]).lower()


def test_the_specs_own_volumes_reach_every_spark_and_maintenance_pod():
    body = json.loads(json.dumps(BODY))
    body["spec"]["spark"] = {
        "volumes": [{"name": "data", "hostPath": {"path": "/srv/lake", "type": "Directory"}}],
        "volumeMounts": [{"name": "data", "mountPath": "/srv/lake"}],
    }
    topic = Topic.from_body(body)
    settings = OperatorSettings()
    app = spark_application(topic, settings)["spec"]
    pods = [
        app["driver"]["template"]["spec"],
        app["executor"]["template"]["spec"],
        *(
            job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            for job in cron_jobs(topic, settings)
        ),
    ]
    for pod in pods:
        assert {"name": "data", "hostPath": {"path": "/srv/lake", "type": "Directory"}} in pod[
            "volumes"
        ]
        assert {"name": "data", "mountPath": "/srv/lake"} in pod["containers"][0]["volumeMounts"]


def test_pods_are_placed_by_the_operators_defaults_and_the_resource_alike():
    """Pull secrets, node selector, tolerations, affinity, priority class, labels,
    annotations, environment and security contexts reach the driver, the executors and the
    maintenance pods; the resource adds to the chart's defaults and wins where both set a key."""
    body = json.loads(json.dumps(BODY))
    toleration = {"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    body["spec"]["spark"] = {
        "imagePullSecrets": [{"name": "team-registry"}],
        "nodeSelector": {"pool": "streaming"},
        "tolerations": [toleration],
        "affinity": affinity,
        "podLabels": {"team": "orders", "app.kubernetes.io/managed-by": "x"},
        "podAnnotations": {"cost-center": "42"},
        "env": [
            {"name": "TZ", "value": "UTC"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}},
        ],
        "envFrom": [{"secretRef": {"name": "lake-env"}}],
        "podSecurityContext": {"runAsUser": 185},
        "securityContext": {"readOnlyRootFilesystem": False},
    }
    topic = Topic.from_body(body)
    settings = OperatorSettings(
        spark_pod={
            "imagePullSecrets": [{"name": "mirror"}],
            "nodeSelector": {"pool": "batch", "arch": "amd64"},
            "priorityClassName": "data-streaming",
            "env": [{"name": "TZ", "value": "Europe/Paris"}],
            "podSecurityContext": {"fsGroup": 185},
        }
    )
    app = spark_application(topic, settings)["spec"]
    jobs = cron_jobs(topic, settings)
    metadata = [
        app["driver"],
        app["executor"],
        *(job["spec"]["jobTemplate"]["spec"]["template"]["metadata"] for job in jobs),
    ]
    pods = [
        app["driver"]["template"]["spec"],
        app["executor"]["template"]["spec"],
        *(job["spec"]["jobTemplate"]["spec"]["template"]["spec"] for job in jobs),
    ]
    assert len(pods) == 2 + len(jobs) and jobs
    for meta in metadata:
        assert meta["labels"]["team"] == "orders"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "floe"  # floe's own win
        assert meta["annotations"] == {"cost-center": "42"}
    for pod in pods:
        assert pod["imagePullSecrets"] == [{"name": "mirror"}, {"name": "team-registry"}]
        assert pod["nodeSelector"] == {"pool": "streaming", "arch": "amd64"}
        assert pod["tolerations"] == [toleration]
        assert pod["affinity"] == affinity
        assert pod["priorityClassName"] == "data-streaming"
        assert pod["securityContext"]["runAsUser"] == 185
        assert pod["securityContext"]["fsGroup"] == 185
        container = pod["containers"][0]
        env = {v["name"]: v for v in container["env"]}
        assert (
            env["TZ"]["value"] == "UTC"
            and len([v for v in container["env"] if v["name"] == "TZ"]) == 1
        )
        assert env["TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "t", "key": "k"}}
        assert container["envFrom"] == [{"secretRef": {"name": "lake-env"}}]
        assert container["securityContext"]["readOnlyRootFilesystem"] is False
    maintenance = pods[2]
    # The maintenance pods keep their hardening under the settings that do not undo it.
    assert maintenance["securityContext"]["runAsNonRoot"] is True
    assert maintenance["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "HOME", "value": "/tmp"} in maintenance["containers"][0]["env"]


def test_pod_settings_unset_render_the_pods_as_before():
    """An operator upgrade that brings the pod settings restarts no job: unset, they add
    nothing to the SparkApplication, so its fingerprint stays."""
    topic = Topic.from_body(json.loads(json.dumps(BODY)))
    app = spark_application(topic, OperatorSettings())["spec"]
    for role, container in (
        ("driver", "spark-kubernetes-driver"),
        ("executor", "spark-kubernetes-executor"),
    ):
        assert (
            set(app[role])
            - {"labels", "cores", "memory", "serviceAccount", "template", "instances"}
            == set()
        )
        template = app[role]["template"]
        assert set(template) == {"spec"} and set(template["spec"]) == {"containers", "volumes"}
        own = {"env", "ports"} if role == "driver" else set()  # the metrics port
        assert set(template["spec"]["containers"][0]) == {"name", "volumeMounts", *own}
        assert template["spec"]["containers"][0]["name"] == container


def test_the_jobs_log_json_lines_at_the_specs_level():
    body = json.loads(json.dumps(BODY))
    body["spec"].setdefault("spark", {})["logLevel"] = "debug"
    topic = Topic.from_body(body)
    app = spark_application(topic, OperatorSettings())["spec"]
    [driver] = app["driver"]["template"]["spec"]["containers"]
    assert {"name": "FLOE_LOG_LEVEL", "value": "debug"} in driver["env"]
    assert {"name": "FLOE_LOG_FORMAT", "value": "json"} in driver["env"]
    assert app["sparkConf"]["spark.log.structuredLogging.enabled"] == "true"
    crons = cron_jobs(topic, OperatorSettings())
    assert crons
    for cron in crons:
        [maintain] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        assert {"name": "FLOE_LOG_LEVEL", "value": "debug"} in maintain["env"]
    text = spark_application(topic, OperatorSettings(log_format="text"))["spec"]
    assert "spark.log.structuredLogging.enabled" not in text["sparkConf"]


def test_the_driver_serves_its_metrics_on_a_named_port():
    topic = Topic.from_body(json.loads(json.dumps(BODY)))
    app = spark_application(topic, OperatorSettings())["spec"]
    [driver] = app["driver"]["template"]["spec"]["containers"]
    assert driver["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert {"name": "FLOE_METRICS_PORT", "value": "9464"} in driver["env"]
    assert "ports" not in app["executor"]["template"]["spec"]["containers"][0]


def test_the_drivers_account_is_bound_to_the_drivers_role_and_owned_but_not_controlled():
    """Several resources of a namespace share the account: each an owner, none its controller,
    so the garbage collector removes it with the last."""
    from floe_operator.render import spark_account

    topic = Topic.from_body(json.loads(json.dumps(BODY)))
    account, binding = spark_account(topic, "floe-spark", "floe-floe-operator-spark")
    for body in (account, binding):
        meta = body["metadata"]
        assert (meta["name"], meta["namespace"]) == ("floe-spark", "data")
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "floe"
        [owner] = meta["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "KafkaIcebergTopic",
            "u-1",
            False,
        )
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "floe-floe-operator-spark",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "floe-spark", "namespace": "data"}
    ]


def test_a_volume_mount_must_name_a_volume():
    from floe_operator.resource import KafkaIcebergTopicSpec

    spec = json.loads(json.dumps(BODY["spec"]))
    spec["spark"] = {"volumeMounts": [{"name": "data", "mountPath": "/srv/lake"}]}
    with pytest.raises(
        ValueError,
        match=r"every volumeMounts entry must name a volume in "
        r"spark.volumes",
    ):
        KafkaIcebergTopicSpec.model_validate(spec)


def with_spec(**changes) -> dict:
    body = json.loads(json.dumps(BODY))
    body["spec"].update(changes)
    return body


def test_one_cron_job_per_enabled_maintenance_action_with_its_schedule_and_settings():
    topic = Topic.from_body(
        with_spec(
            maintenance={
                "compaction": {"schedule": "*/30 * * * *", "targetFileSize": "128Mi"},
                "removeOrphans": {"enabled": False},
                "resources": {"cores": 2, "memory": "3g"},
            }
        )
    )
    jobs = {j["metadata"]["name"]: j for j in cron_jobs(topic, OperatorSettings())}
    assert sorted(jobs) == [
        "floe-orders-compaction",
        "floe-orders-expire-snapshots",
        "floe-orders-rewrite-manifests",
    ]
    compaction = jobs["floe-orders-compaction"]
    assert compaction["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    spec = compaction["spec"]
    assert (spec["schedule"], spec["concurrencyPolicy"], spec["timeZone"]) == (
        "*/30 * * * *",
        "Forbid",
        "Etc/UTC",
    )
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (1, 3)
    assert spec["suspend"] is False
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "floe/floe-spark:0.1.0"
    assert container["command"] == [
        "/opt/spark/bin/spark-submit",
        "--master",
        "local[2]",
        "--driver-memory",
        "3g",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.log.structuredLogging.enabled=true",
        "/opt/floe/floe_job.py",
        "maintain",
        "--config",
        "/etc/floe/job/job.json",
        "--action",
        "compaction",
    ]
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "4301Mi"},
        "limits": {"memory": "4301Mi"},
    }
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts) == {
        "/etc/floe/job",
        "/tmp",
        "/etc/floe/secrets/kafka",
        "/etc/floe/secrets/catalog",
        "/etc/floe/secrets/registry",
    }
    config = parse_config(config_map(topic, OperatorSettings())["data"]["job.json"])
    assert config.maintenance.compaction.target_file_size_bytes == 128 * 2**20
    assert config.maintenance.remove_orphans.older_than_seconds == 3 * 86_400

    suspended = cron_jobs(Topic.from_body(with_spec(suspend=True)), OperatorSettings())
    assert all(j["spec"]["suspend"] for j in suspended)


def test_long_names_get_children_of_their_own_within_kubernetes_limits():
    def topic(name: str) -> Topic:
        return Topic.from_body({**BODY, "metadata": {**BODY["metadata"], "name": name}})

    short = topic("orders")
    assert (short.child_name, short.label) == ("floe-orders", "orders")
    assert next(j["metadata"]["name"] for j in cron_jobs(short, OperatorSettings())) == (
        "floe-orders-compaction"
    )

    # Four actions of a 46-character name; two names that share their first 58 characters.
    prefix = "orders-" + "x" * 51
    topics = [topic("y" * 46), topic(prefix + "-a"), topic(prefix + "-b")]
    children = [t.child_name for t in topics]
    crons = [j["metadata"]["name"] for t in topics for j in cron_jobs(t, OperatorSettings())]
    assert len(set(children)) == 3 and all(len(c) <= 63 for c in children)
    assert len(set(crons)) == 12 and all(len(c) <= 52 for c in crons)
    assert all(
        c.endswith(("-compaction", "-expire-snapshots", "-remove-orphans", "-rewrite-manifests"))
        for c in crons
    )
    # Label values are at most 63 characters too; each topic's own.
    long = topic("z" * 100)
    labels = spark_application(long, OperatorSettings())["metadata"]["labels"]
    assert len(labels["floe.dev/topic"]) == 63 and labels["floe.dev/topic"] != topic("z" * 99).label
    # A name rendered the same on every visit: the operator finds its children again.
    assert topic(prefix + "-a").child_name == children[1]


def test_only_a_change_the_job_depends_on_restarts_it():
    settings = OperatorSettings()
    base = job_fingerprint(Topic.from_body(BODY), settings)
    maintenance = Topic.from_body(with_spec(maintenance={"compaction": {"schedule": "@daily"}}))
    assert job_fingerprint(maintenance, settings) == base
    removed = Topic.from_body(with_spec(maintenance={"removeOrphans": {"olderThan": "1d"}}))
    assert job_fingerprint(removed, settings) == base
    # The job expires snapshots as it commits: their retention is the job's too.
    retention = Topic.from_body(with_spec(maintenance={"expireSnapshots": {"retainLast": 20}}))
    assert job_fingerprint(retention, settings) != base
    interval = Topic.from_body(with_spec(commit={"interval": "10s"}))
    assert job_fingerprint(interval, settings) != base
    assert spark_application(interval, settings)["metadata"]["annotations"][
        "floe.dev/job-fingerprint"
    ] == job_fingerprint(interval, settings)


@pytest.mark.parametrize(
    "interval, expire, age, expiring",
    [
        ("10s", {}, 100 * 10, True),  # by default: retainLast commit intervals
        ("2s", {"retainLast": 30}, 300, True),  # but at least 5 minutes, for readers
        ("1m", {"retainLast": 30}, 30 * 60, True),
        ("1m", {"maxAge": "7d"}, 7 * 86_400, True),
        ("10s", {"enabled": False}, 100 * 10, False),
    ],
)
def test_snapshots_expire_past_retain_last_commit_intervals_unless_max_age_is_set(
    interval, expire, age, expiring
):
    topic = Topic.from_body(
        with_spec(commit={"interval": interval}, maintenance={"expireSnapshots": expire})
    )
    config = parse_config(config_map(topic, OperatorSettings())["data"]["job.json"])
    assert config.snapshot_max_age_seconds == age
    assert config.maintenance.expire_snapshots.enabled is expiring


def test_orphans_younger_than_an_hour_are_never_a_valid_threshold():
    from pydantic import ValidationError

    from floe_operator.handlers import _invalid

    with pytest.raises(ValidationError) as invalid:
        Topic.from_body(with_spec(maintenance={"removeOrphans": {"olderThan": "30m"}}))
    assert _invalid(invalid.value) == (
        "spec.maintenance.removeOrphans: removeOrphans.olderThan must be at least 1h: a younger "
        "unreferenced file may belong to a commit still in flight"
    )


def test_the_schema_evolution_mode_reaches_the_job():
    for mode in ("additive", "none"):
        topic = Topic.from_body(with_spec(schemaEvolution={"mode": mode}))
        job = parse_config(config_map(topic, OperatorSettings())["data"]["job.json"])
        assert job.schema_evolution.mode == mode


@pytest.mark.parametrize("warehouse", ["gs://lake/wh", "abfss://lake@acct.dfs.core.windows.net/wh"])
def test_a_warehouse_spark_has_no_file_system_for_keeps_the_checkpoint_in_the_driver(warehouse):
    body = json.loads(json.dumps(BODY))
    body["spec"]["table"]["catalog"]["warehouse"] = warehouse
    topic = Topic.from_body(body)
    config = parse_config(config_map(topic, OperatorSettings())["data"]["job.json"])
    assert config.checkpoint_location == "file:///var/lib/floe/checkpoints/data/orders"

    spec = spark_application(topic, OperatorSettings(spark_image="img:1"))["spec"]
    driver = spec["driver"]["template"]["spec"]
    assert {"name": "checkpoints", "emptyDir": {}} in driver["volumes"]
    assert {"name": "checkpoints", "mountPath": "/var/lib/floe/checkpoints"} in (
        driver["containers"][0]["volumeMounts"]
    )
    executor = spec["executor"]["template"]["spec"]
    assert "checkpoints" not in [v["name"] for v in executor["volumes"]]
