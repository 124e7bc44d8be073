"""The KafkaIcebergTopic CRD, generated from the resource models.

``python -m floe_operator.crd`` prints it; ``crds/`` holds the output, never edited by hand
(a test fails when it is stale).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from .resource import (GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, KafkaIcebergTopicSpec,
                       KafkaIcebergTopicStatus)

_DROP = {"title"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Pydantic's JSON Schema to a Kubernetes structural schema: refs inlined, no nulls."""
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        node = {**target, **node}
        return _structural(node, defs)
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) == 1:
            node = {**options[0], **node}
            if node.get("default", ...) is None:
                node.pop("default")
            return _structural(node, defs)
        node["anyOf"] = options
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            result[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            result[key] = _structural(value, defs)
        else:
            result[key] = value
    if result.get("type") == "object" and "properties" in result and "additionalProperties" in result:
        result.pop("additionalProperties")  # extra="forbid": structural schemas prune instead
    if result.get("x-kubernetes-preserve-unknown-fields") and result.get("additionalProperties") is True:
        result.pop("additionalProperties")  # kept as written: any fields
    if isinstance(result.get("default"), dict) and "properties" in result:
        result["default"] = {}  # the API server fills the fields from their own defaults
    return result


def _schema(model: Any) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})
    return _structural(schema, defs)


def spec_schema() -> dict[str, Any]:
    return _schema(KafkaIcebergTopicSpec)


def _without_defaults(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_defaults(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: _without_defaults(value) for key, value in node.items() if key != "default"}


def status_schema() -> dict[str, Any]:
    """The status's schema, without defaults: the API server would fill in what the operator
    did not write, and the operator would see a change where there is none."""
    return _without_defaults(_schema(KafkaIcebergTopicStatus))


def _condition_column(kind: str) -> str:
    return f'.status.conditions[?(@.type=="{kind}")].status'


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": SINGULAR,
                      "shortNames": SHORT_NAMES, "categories": ["floe"]},
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Ready", "type": "string", "jsonPath": _condition_column("Ready")},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Lag", "type": "integer", "jsonPath": ".status.offsets.lag"},
                    {"name": "Freshness", "type": "date", "jsonPath": ".status.landedThrough",
                     "description": "age of the valid-through time of the last commit"},
                    {"name": "Snapshot", "type": "string", "jsonPath": ".status.table.snapshotId",
                     "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A Kafka topic kept landing in an Apache Iceberg table.",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": status_schema(),
                    },
                }},
            }],
        },
    }


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def render() -> str:
    header = "# Generated by `python -m floe_operator.crd` from operator/floe_operator/resource.py.\n"
    return header + yaml.dump(crd(), Dumper=_NoAliases, sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render())
