"""floe's monitoring as the chart ships it: the alert rules, unit-tested with promtool."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from .kube import ROOT

pytestmark = pytest.mark.e2e

CHART = str(ROOT / "charts" / "floe-operator")
ALERT_TESTS = ROOT / "tests" / "alerts" / "floe_rules_test.yaml"
MONITORING = ["--set", "metrics.podMonitor.enabled=true", "--set",
              "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true"]


def rendered(*settings: str) -> list[dict]:
    out = subprocess.run(["helm", "template", "floe", CHART, *settings], capture_output=True,
                         text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def rule_groups(docs: list[dict]) -> list[dict]:
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    return rule["spec"]["groups"]


def test_every_alert_fires_and_stays_quiet_as_its_promtool_cases_say(stack, tmp_path):
    groups = rule_groups(rendered(*MONITORING))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(ALERT_TESTS, tmp_path)
    checked = subprocess.run(["promtool", "check", "rules", "rules.yaml"], cwd=tmp_path,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(["promtool", "test", "rules", ALERT_TESTS.name], cwd=tmp_path,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Each alert has an evaluation where it fires and one where it does not (its cases also
    # hold resources that never fire: the firing evaluations list exactly those that do).
    cases = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"]}
    evaluations = [t for case in cases for t in case["alert_rule_test"]]
    assert {t["alertname"] for t in evaluations if t["exp_alerts"]} == alerts
    assert {t["alertname"] for t in evaluations if not t["exp_alerts"]} == alerts


def test_the_job_alerts_need_the_jobs_podmonitor(stack):
    without = {rule["alert"] for group in rule_groups(rendered(
        "--set", "metrics.prometheusRule.enabled=true")) for rule in group["rules"]}
    assert without == {"FloeTopicNotReady", "FloeLagGrowing", "FloeTableStale",
                       "FloeRepeatedFailovers", "FloeMaintenanceFailing"}
