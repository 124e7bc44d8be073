"""Two operator replicas sharing a KopfPeering: only one acts; when it dies, the other takes
over."""

from __future__ import annotations

import pytest
from kubernetes import client

from .kube import ROOT, SPARK_CRD, admin_client, install_crd, wait_until
from .test_operator_faults import APPS, apps, create_topic_resource, topic

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

PEERING = ("kopf.dev", "v1", "kopfpeerings")


def peers(api, namespace) -> dict:
    return (
        api.get_namespaced_custom_object(*PEERING[:2], namespace, PEERING[2], "floe").get("status")
        or {}
    )


def test_only_the_leading_replica_acts_and_the_other_takes_over_when_it_dies(
    stack, operator_control, namespace, tmp_path
):
    admin = admin_client(stack)
    install_crd(admin, SPARK_CRD)
    install_crd(admin, ROOT / "crds" / "kopf.dev_kopfpeerings.yaml")
    api = client.CustomObjectsApi(admin)
    api.create_namespaced_custom_object(
        *PEERING[:2],
        namespace,
        PEERING[2],
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "floe"}},
    )
    peering = {"FLOE_PEERING": "floe", "FLOE_PEERING_LIFETIME": "10"}
    leader = operator_control.start(FLOE_PEERING_PRIORITY="200", **peering)
    assert wait_until(lambda: len(peers(api, namespace)) == 1, timeout=60)
    standby = operator_control.start(FLOE_PEERING_PRIORITY="100", **peering)
    assert wait_until(lambda: len(peers(api, namespace)) == 2, timeout=60)
    assert sorted(p["priority"] for p in peers(api, namespace).values()) == [100, 200]

    create_topic_resource(api, stack, namespace, tmp_path)
    assert wait_until(
        lambda: (topic(api, namespace) or {}).get("status", {}).get("observedGeneration") == 1,
        timeout=60,
    )
    assert len(apps(api, namespace)) == 1
    standby_log = operator_control.log(standby).read_text()
    assert "kopf.objects" not in standby_log, standby_log[-3000:]  # it handled nothing
    assert "created SparkApplication floe-orders" in operator_control.log(leader).read_text()

    operator_control.kill(leader)  # no goodbye: the standby waits out the leader's lifetime
    api.patch_namespaced_custom_object(
        "floe.dev",
        "v1alpha1",
        namespace,
        "kafkaicebergtopics",
        "orders",
        {"spec": {"commit": {"interval": "5s"}}},
    )
    assert wait_until(
        lambda: (topic(api, namespace) or {}).get("status", {}).get("observedGeneration") == 2,
        timeout=90,
    ), operator_control.log(standby).read_text()[-3000:]
    standby_log = operator_control.log(standby).read_text()
    assert "Resuming operations after the pause" in standby_log
    assert "spec changed (generation 1 -> 2)" in standby_log
    children = apps(api, namespace)
    assert len(children) == 1
    assert children[0]["metadata"]["annotations"]["floe.dev/generation"] == "2"
    assert APPS[0] in children[0]["apiVersion"]
