"""The driver's ServiceAccount and its RoleBinding, shared by the resources that use them."""

from __future__ import annotations

import copy
from typing import Any

from .topic import MANAGED_BY, Topic, owner_reference


def spark_account(topic: Topic, name: str, role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The driver's ServiceAccount and the RoleBinding that grants it ``role`` (a ClusterRole)
    in the resource's namespace, both owned by the resource among any others that use them:
    the garbage collector removes them with the last."""
    owner = {**owner_reference(topic), "controller": False, "blockOwnerDeletion": False}
    meta = {
        "name": name,
        "namespace": topic.namespace,
        "labels": {**MANAGED_BY, "app.kubernetes.io/name": "floe-spark"},
        "ownerReferences": [owner],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": copy.deepcopy(meta)}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": copy.deepcopy(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": topic.namespace}],
    }
    return account, binding
