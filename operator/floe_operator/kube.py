"""The one module that talks to the Kubernetes API.

Creation is idempotent (409 is success, then the object is brought to the desired spec), reads
of missing objects answer None, and API trouble becomes an error kopf retries later.
"""

from __future__ import annotations

import base64
import functools
from typing import Any, cast

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import redact
from .errors import retry_later
from .names import GROUP, PLURAL, VERSION
from .render import SPARK_API

SPARK_GROUP, SPARK_VERSION = SPARK_API.split("/")
SPARK_PLURAL = "sparkapplications"


@functools.lru_cache(maxsize=1)
def _api() -> client.ApiClient:
    """The operator's identity: its pod's account, else the kubeconfig's."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def core() -> client.CoreV1Api:
    return client.CoreV1Api(_api())


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(_api())


def _temporary(what: str, error: ApiException) -> kopf.TemporaryError:
    return retry_later(f"{what}: {error.status} {error.reason}", delay=10)


def _apply(body: dict[str, Any], create: Any, replace: Any) -> None:
    """Creates the object, or replaces the one there (the body is the whole desired object:
    the planner applies it only when its hash differs from the one there)."""
    meta = body["metadata"]
    what = f"{body['kind']} {meta['name']}"
    try:
        create(meta["namespace"], body)
    except ApiException as error:
        if error.status != 409:
            raise _temporary(f"creating {what}", error) from None
        try:
            replace(meta["name"], meta["namespace"], body)
        except ApiException as replace_error:
            raise _temporary(f"updating {what}", replace_error) from None


def rbac() -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(_api())


def ensure_owned(*bodies: dict[str, Any]) -> bool:
    """Creates each object (a ServiceAccount, a RoleBinding), or adds the body's owner to the
    owners of the one there if floe made it; True if any was created."""
    made = False
    for body in bodies:
        meta = body["metadata"]
        kind, name, namespace = body["kind"], meta["name"], meta["namespace"]
        api, suffix = {
            "ServiceAccount": (core(), "service_account"),
            "RoleBinding": (rbac(), "role_binding"),
        }[kind]
        try:
            getattr(api, f"create_namespaced_{suffix}")(namespace, body)
            made = True
            continue
        except ApiException as error:
            if error.status != 409:
                raise _temporary(f"creating {kind} {name}", error) from None
        try:
            there = getattr(api, f"read_namespaced_{suffix}")(name, namespace)
            labels = there.metadata.labels or {}
            # The owners as the API spells them (camelCase), to send back with the new one.
            owners = _api().sanitize_for_serialization(there.metadata.owner_references or [])
            if labels.get("app.kubernetes.io/managed-by") == "floe" and meta["ownerReferences"][0][
                "uid"
            ] not in {o["uid"] for o in owners}:
                getattr(api, f"patch_namespaced_{suffix}")(
                    name,
                    namespace,
                    {
                        "metadata": {
                            "ownerReferences": owners + meta["ownerReferences"],
                            "resourceVersion": there.metadata.resource_version,
                        }
                    },
                )
        except ApiException as error:
            raise _temporary(f"owning {kind} {name}", error) from None
    return made


def apply_config_map(body: dict[str, Any]) -> None:
    api = core()
    _apply(body, api.create_namespaced_config_map, api.replace_namespaced_config_map)


def get_spark_application(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found = custom().get_namespaced_custom_object(
            SPARK_GROUP, SPARK_VERSION, namespace, SPARK_PLURAL, name
        )
        return cast(dict[str, Any], found)
    except ApiException as error:
        if error.status == 404:
            return None
        raise _temporary(f"reading SparkApplication {name}", error) from None


def spark_applications(namespace: str, selector: str) -> list[dict[str, Any]]:
    """The SparkApplications of ``namespace`` that ``selector`` (labels) selects."""
    try:
        found = custom().list_namespaced_custom_object(
            SPARK_GROUP, SPARK_VERSION, namespace, SPARK_PLURAL, label_selector=selector
        )
        items: list[dict[str, Any]] = cast(dict[str, Any], found)["items"]
        return items
    except ApiException as error:
        raise _temporary(f"listing SparkApplications {selector}", error) from None


def create_spark_application(body: dict[str, Any]) -> dict[str, Any] | None:
    """Creates the application and returns it; None if one by that name exists already."""
    meta = body["metadata"]
    try:
        made = custom().create_namespaced_custom_object(
            SPARK_GROUP, SPARK_VERSION, meta["namespace"], SPARK_PLURAL, body
        )
        return cast(dict[str, Any], made)
    except ApiException as error:
        if error.status == 409:
            return None
        raise _temporary(f"creating SparkApplication {meta['name']}", error) from None


def delete_spark_application(namespace: str, name: str) -> None:
    try:
        custom().delete_namespaced_custom_object(
            SPARK_GROUP, SPARK_VERSION, namespace, SPARK_PLURAL, name
        )
    except ApiException as error:
        if error.status != 404:
            raise _temporary(f"deleting SparkApplication {name}", error) from None


def running_pods(namespace: str, app: str) -> list[str]:
    """The pods of a SparkApplication (its driver and executors) that have not ended, terminating
    ones included: what may still write to its table."""
    try:
        pods: list[Any] = (
            core()
            .list_namespaced_pod(namespace, label_selector=f"{SPARK_GROUP}/app-name={app}")
            .items
        )
    except ApiException as error:
        raise _temporary(f"listing the pods of {app}", error) from None
    return sorted(
        pod.metadata.name
        for pod in pods
        if (pod.status.phase if pod.status else None) not in ("Succeeded", "Failed")
    )


def job_metrics(namespace: str, pod: str, port: int) -> str:
    """A driver's Prometheus metrics, through the API server's pod proxy."""
    return core().connect_get_namespaced_pod_proxy_with_path(
        f"{pod}:{port}", namespace, "metrics", _request_timeout=10
    )


def secret_data(namespace: str, name: str) -> dict[str, str]:
    """A Secret's keys and values (never logged, never put on a status)."""
    try:
        secret = core().read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            raise retry_later(f"Secret {name} not found in {namespace}", delay=30) from None
        raise _temporary(f"reading Secret {name}", error) from None
    data = {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}
    redact.remember(data)
    return data


def batch() -> client.BatchV1Api:
    return client.BatchV1Api(_api())


def apply_cron_job(body: dict[str, Any]) -> None:
    api = batch()
    _apply(body, api.create_namespaced_cron_job, api.replace_namespaced_cron_job)


def delete_cron_job(namespace: str, name: str) -> None:
    try:
        batch().delete_namespaced_cron_job(name, namespace, propagation_policy="Background")
    except ApiException as error:
        if error.status != 404:
            raise _temporary(f"deleting CronJob {name}", error) from None


def annotate_topic(namespace: str, name: str, key: str, value: str) -> None:
    custom().patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"annotations": {key: value}}}
    )


def get_topic(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found = custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return cast(dict[str, Any], found)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
