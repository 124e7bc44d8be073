"""Fixtures for tests against the local kube-apiserver."""

from __future__ import annotations

import pytest
from kubernetes import client

from .kube import admin_client


@pytest.fixture
def namespace(stack, unique_name):
    """A fresh namespace for one test, deleted afterwards."""
    core = client.CoreV1Api(admin_client(stack))
    name = unique_name.replace("_", "-")[:50]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)
