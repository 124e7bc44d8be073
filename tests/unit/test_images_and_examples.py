"""The container images, the shell scripts and the Argo CD health check, without a cluster.

The local stack builds and runs every image (tests/e2e/test_node.py); here the Dockerfiles are
linted (hadolint) and the pieces they copy in (the job's entry file, the requirements filter)
are run directly.
The health check runs in real Lua 5.1, the dialect of Argo CD's interpreter (gopher-lua),
against statuses computed by the operator's own status functions.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from floe_operator.settings import OperatorSettings
from floe_operator.status import Observation, status

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
SCRIPTS = sorted([*(ROOT / "hack").rglob("*.sh"), *IMAGES.rglob("*.sh")])
HEALTH_LUA = ROOT / "examples" / "gitops" / "argocd" / "health-kafkaicebergtopic.lua"
ARGOCD_CM_PATCH = HEALTH_LUA.with_name("argocd-cm-patch.yaml")
HEALTH_KEY = "resource.customizations.health.floe.dev_KafkaIcebergTopic"
OPERATION_HEALTH_LUA = HEALTH_LUA.with_name("health-kafkaicebergoperation.lua")
OPERATION_HEALTH_KEY = "resource.customizations.health.floe.dev_KafkaIcebergOperation"


def venv_tool(name: str) -> str:
    """A linter installed by a Python package into this interpreter's bin directory."""
    path = Path(sys.executable).parent / name
    assert path.exists(), f"{name} is missing: install the test extras (pip install -e '.[test]')"
    return str(path)


def test_every_image_has_a_dockerfile():
    assert [p.parent.name for p in DOCKERFILES] == [
        "operator",
        "pause",
        "prometheus",
        "prometheus-operator",
        "spark",
        "spark-operator",
    ]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_passes_hadolint(dockerfile):
    linted = subprocess.run(
        [venv_tool("hadolint"), "--failure-threshold", "warning", "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shell_script_passes_shellcheck(script):
    checked = subprocess.run([venv_tool("shellcheck"), str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_kind_demo_is_among_the_checked_scripts():
    assert ROOT / "hack" / "kind-demo.sh" in SCRIPTS


def test_the_spark_image_matches_pyspark_and_the_operators_entry_file():
    dockerfile = (IMAGES / "spark" / "Dockerfile").read_text()
    pyspark = re.search(r'"pyspark==([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    # The connector jars are built for one exact Spark release: the image's Spark is pyspark's
    # own distribution, installed from pyproject.toml, and the pom resolves for the same one.
    assert "runtime_requirements.py /tmp/build/pyproject.toml operator job" in dockerfile
    assert f"-Dspark.version={pyspark}" in dockerfile
    main_file = OperatorSettings().job_main_file
    assert main_file.startswith("local://")
    assert f"COPY images/spark/floe_job.py {main_file[len('local://') :]}" in dockerfile


def test_hadoops_s3a_is_the_release_of_pysparks_hadoop_client():
    import pyspark

    pom = (ROOT / "hack" / "maven" / "spark" / "pom.xml").read_text()
    hadoop = re.search(r"<hadoop.version>([0-9.]+)</hadoop.version>", pom).group(1)
    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / f"hadoop-client-api-{hadoop}.jar").exists(), sorted(
        j.name for j in jars.glob("hadoop-client-*")
    )


def test_the_job_entry_file_runs_as_python_dash_m_floe_sparkapp(tmp_path):
    # A config that cannot be read stops both before Spark is touched, so nothing starts here.
    args = ["run", "--config", str(tmp_path / "missing.json")]
    as_module = subprocess.run(
        [sys.executable, "-m", "floe_sparkapp", *args], capture_output=True, text=True
    )
    as_file = subprocess.run(
        [sys.executable, str(IMAGES / "spark" / "floe_job.py"), *args],
        capture_output=True,
        text=True,
    )
    assert as_module.returncode == 2, as_module.stderr
    assert (as_file.returncode, as_file.stderr) == (as_module.returncode, as_module.stderr)
    assert as_file.stderr.startswith("floe: cannot read job config")


def test_the_images_install_their_extras_and_the_plugin_needs_only_the_api_client():
    def listed(*extras: str) -> set[str]:
        printed = subprocess.run(
            [
                sys.executable,
                str(IMAGES / "runtime_requirements.py"),
                str(ROOT / "pyproject.toml"),
                *extras,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return {
            re.match(r"[A-Za-z0-9._-]+", line).group(0).lower() for line in printed.splitlines()
        }

    plugin, operator = listed(), listed("operator")
    assert plugin == {"kubernetes", "pyyaml"}
    assert "pyspark" not in operator
    assert "pytest" not in operator  # a test extra
    assert {"kopf", "kubernetes", "pyiceberg", "confluent-kafka", "pydantic"} <= operator
    assert listed("operator", "job") == operator | {"pyspark"}
    for dockerfile, extras in (("operator", "operator"), ("spark", "operator job")):
        assert f"pyproject.toml {extras}" in " ".join(
            (IMAGES / dockerfile / "Dockerfile").read_text().replace("\\\n", " ").split()
        )


# The Argo CD health check.


def health(obj: dict, script: Path = HEALTH_LUA) -> dict:
    from lupa import lua51

    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script.read_text())
    return dict(result.items())


def topic(generation: int = 2, suspend: bool = False, observed: Observation | None = None):
    obj = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "KafkaIcebergTopic",
        "metadata": {"name": "orders", "namespace": "data", "generation": generation},
        "spec": {"suspend": suspend},
    }
    if observed is not None:
        obj["status"] = status(observed, None)
    return obj


def test_health_is_progressing_until_the_operator_writes_a_status():
    assert health(topic()) == {
        "status": "Progressing",
        "message": "Waiting for the floe operator to observe generation 2",
    }


def test_health_is_progressing_while_the_status_describes_an_older_generation():
    running = Observation(
        generation=1, app_state="RUNNING", app_name="floe-orders", table_exists=True, schema_id=1
    )
    assert status(running, None)["phase"] == "Running"
    assert health(topic(generation=2, observed=running)) == {
        "status": "Progressing",
        "message": "Waiting for the floe operator to observe generation 2",
    }


def test_health_is_healthy_when_ready():
    running = Observation(
        generation=2, app_state="RUNNING", app_name="floe-orders", table_exists=True, schema_id=1
    )
    assert health(topic(observed=running)) == {
        "status": "Healthy",
        "message": "the job is running and the table exists",
    }


def test_health_is_suspended_when_the_spec_says_so():
    suspended = Observation(generation=2, suspended=True, table_exists=True, schema_id=1)
    assert health(topic(suspend=True, observed=suspended)) == {
        "status": "Suspended",
        "message": "spec.suspend is true",
    }


def test_health_is_degraded_with_the_reason_of_an_invalid_spec():
    message = "spec.spark.checkpointLocation is required when the catalog has no warehouse"
    invalid = Observation(generation=2, invalid_spec=message)
    assert health(topic(observed=invalid)) == {"status": "Degraded", "message": message}


def test_health_is_degraded_when_the_job_failed_for_data_loss():
    error = "DataLoss: topic orders: Kafka retention deleted records the table has not got"
    failed = Observation(
        generation=2,
        app_state="FAILED",
        app_error=error,
        app_name="floe-orders",
        table_exists=True,
        schema_id=1,
    )
    assert health(topic(observed=failed)) == {"status": "Degraded", "message": error}


def test_health_is_progressing_while_the_job_starts():
    starting = Observation(
        generation=2, app_state="SUBMITTED", app_name="floe-orders", table_exists=True, schema_id=1
    )
    assert health(topic(observed=starting)) == {
        "status": "Progressing",
        "message": "SparkApplication floe-orders is SUBMITTED",
    }


def test_health_is_degraded_while_a_failing_change_is_rolled_back():
    rolled = Observation(
        generation=3,
        app_state="RUNNING",
        app_name="floe-orders",
        table_exists=True,
        schema_id=1,
        rolled_back="generation 3 did not become healthy within 10m",
    )
    assert health(topic(generation=3, observed=rolled)) == {
        "status": "Degraded",
        "message": "generation 3 did not become healthy within 10m",
    }


def test_an_operation_is_progressing_then_healthy_or_degraded_with_its_message():
    from floe_operator.operation import OperationWorld, plan

    def operation(status: dict | None) -> dict:
        obj = {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "KafkaIcebergOperation",
            "metadata": {"name": "undo", "namespace": "data", "generation": 1},
            "spec": {"topic": "orders", "type": "Rollback"},
        }
        return {**obj, "status": status} if status is not None else obj

    assert health(operation(None), OPERATION_HEALTH_LUA)["status"] == "Progressing"
    waiting = plan(
        OperationWorld(
            now_ms=1_795_000_000_000,
            name="undo",
            uid="u",
            generation=1,
            spec=None,
            invalid="rollback needs exactly one of snapshotId and before",
        )
    ).status
    assert health(operation(waiting), OPERATION_HEALTH_LUA) == {
        "status": "Degraded",
        "message": "invalid spec: rollback needs exactly one of snapshotId and before",
    }
    assert health(
        operation({"phase": "Running", "message": "moving main back"}), OPERATION_HEALTH_LUA
    ) == {"status": "Progressing", "message": "moving main back"}
    assert health(operation({"phase": "Succeeded", "message": "done"}), OPERATION_HEALTH_LUA) == {
        "status": "Healthy",
        "message": "done",
    }


def test_the_argocd_cm_patch_installs_the_same_scripts():
    patch = yaml.safe_load(ARGOCD_CM_PATCH.read_text())
    assert (patch["kind"], patch["metadata"]["name"]) == ("ConfigMap", "argocd-cm")
    for key, script in ((HEALTH_KEY, HEALTH_LUA), (OPERATION_HEALTH_KEY, OPERATION_HEALTH_LUA)):
        assert patch["data"][key] == script.read_text(), (
            f"argocd-cm-patch.yaml is stale: copy {script.name} into it"
        )
