"""The API server as ``kubectl floe`` reaches it: a kubeconfig's identity and namespace, the
KafkaIcebergTopics, their Events, their job's driver pod, its log and its metrics.

Only the Kubernetes client: the plugin installs without the operator's and the job's
dependencies (``pip install floe``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from .names import GROUP, JOB_METRICS_PORT, OPERATION_PLURAL, PLURAL, VERSION


class Cluster:
    """One kubeconfig context's view of floe's resources."""

    def __init__(self, config_file: str | None = None, context: str | None = None):
        self.api = config.new_client_from_config(config_file=config_file, context=context)
        contexts, active = config.list_kube_config_contexts(config_file=config_file)
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        self.namespace: str | None = (chosen.get("context") or {}).get("namespace")
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    # --- the resources ----------------------------------------------------------------------

    def _listing(
        self, namespace: str | None, selector: str | None
    ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
        """The list call of a namespace's KafkaIcebergTopics (all when None): the function,
        its arguments and keywords (a watch streams the same call)."""
        keywords = {"label_selector": selector} if selector else {}
        if namespace is None:
            return self.custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL), keywords
        return (
            self.custom.list_namespaced_custom_object,
            (GROUP, VERSION, namespace, PLURAL),
            keywords,
        )

    def topics(
        self, namespace: str | None, selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The KafkaIcebergTopics of a namespace (all when None), sorted by namespace and name,
        and the list's resourceVersion (where a watch of the same topics goes on from)."""
        call, args, keywords = self._listing(namespace, selector)
        found = call(*args, **keywords)
        return (
            sorted(
                found["items"],
                key=lambda item: (item["metadata"].get("namespace", ""), item["metadata"]["name"]),
            ),
            found["metadata"]["resourceVersion"],
        )

    def topic(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
            return cast(dict[str, Any], found)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def watch_topics(
        self, namespace: str | None, selector: str | None = None, since: str | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) for every change after ``since`` (a resourceVersion)."""
        call, args, keywords = self._listing(namespace, selector)
        if since:
            keywords["resource_version"] = since
        for event in watch.Watch().stream(call, *args, **keywords):
            yield event["type"], event["object"]

    def create_operation(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        made = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, OPERATION_PLURAL, body
        )
        return cast(dict[str, Any], made)

    def operation(self, namespace: str, name: str) -> dict[str, Any]:
        found = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, OPERATION_PLURAL, name
        )
        return cast(dict[str, Any], found)

    def patch(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of the resource (its spec, or its annotations)."""
        patched = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, body
        )
        return cast(dict[str, Any], patched)

    def annotate(self, namespace: str, name: str, key: str, value: str) -> dict[str, Any]:
        return self.patch(namespace, name, {"metadata": {"annotations": {key: value}}})

    # --- what happened, and the job ---------------------------------------------------------

    def events(self, namespace: str, name: str) -> list[Any]:
        """The resource's Events, oldest first."""
        found = self.core.list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.name={name},involvedObject.kind=KafkaIcebergTopic",
        ).items

        def when(event: Any) -> str:
            stamp = event.last_timestamp or event.event_time or event.first_timestamp
            return stamp.isoformat() if stamp is not None else ""

        return sorted(found, key=when)

    def driver(self, item: dict[str, Any]) -> str | None:
        """The name of the resource's running (or last) driver pod, if there is one."""
        app = ((item.get("status") or {}).get("sparkApplication") or {}).get("name")
        if not app:
            return None
        pods: list[Any] = self.core.list_namespaced_pod(
            item["metadata"]["namespace"],
            label_selector=f"sparkoperator.k8s.io/app-name={app},spark-role=driver",
        ).items
        if not pods:
            return None
        newest: str | None = max(pods, key=lambda p: p.metadata.creation_timestamp).metadata.name
        return newest

    def logs(
        self, namespace: str, pod: str, *, follow: bool = False, tail: int | None = None
    ) -> Iterator[str]:
        args: dict[str, Any] = {"tail_lines": tail} if tail is not None else {}
        if follow:
            yield from watch.Watch().stream(
                self.core.read_namespaced_pod_log, pod, namespace, **args
            )
            return
        yield from self.core.read_namespaced_pod_log(pod, namespace, **args).splitlines()

    def job_metrics(self, namespace: str, pod: str) -> str:
        """The driver's Prometheus metrics, through the API server's pod proxy."""
        return self.core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod}:{JOB_METRICS_PORT}", namespace, "metrics"
        )
