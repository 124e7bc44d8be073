"""The KafkaIcebergTopic CRD, generated from the resource models.

``python -m floe_operator.crd`` prints it; ``crds/`` holds the output, never edited by hand
(a test fails when it is stale).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from . import operation
from .names import GROUP, KIND, PLURAL, VERSION
from .resource import SHORT_NAMES, SINGULAR, KafkaIcebergTopicSpec, KafkaIcebergTopicStatus

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
    if "const" in node:  # not in Kubernetes' schemas: a one-value enum
        node["enum"] = [node.pop("const")]
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
    if (
        result.get("type") == "object"
        and "properties" in result
        and "additionalProperties" in result
    ):
        result.pop("additionalProperties")  # extra="forbid": structural schemas prune instead
    kept = result.get("x-kubernetes-preserve-unknown-fields")
    if kept and result.get("additionalProperties") is True:
        result.pop("additionalProperties")  # kept as written: any fields
    if isinstance(result.get("default"), dict) and "properties" in result:
        result["default"] = {}  # the API server fills the fields from their own defaults
    return result


def _schema(model: Any) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})
    structural: dict[str, Any] = _structural(schema, defs)
    return structural


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
    schema: dict[str, Any] = _without_defaults(_schema(KafkaIcebergTopicStatus))
    return schema


def _condition_column(kind: str) -> str:
    return f'.status.conditions[?(@.type=="{kind}")].status'


def _definition(
    kind: str,
    plural: str,
    singular: str,
    short_names: list[str],
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[dict[str, Any]],
    required: list[str],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": singular,
                "shortNames": short_names,
                "categories": ["floe"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": required,
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd() -> dict[str, Any]:
    """The KafkaIcebergTopic CRD."""
    return _definition(
        KIND,
        PLURAL,
        SINGULAR,
        SHORT_NAMES,
        "A Kafka topic kept landing in an Apache Iceberg table.",
        spec_schema(),
        status_schema(),
        [
            {"name": "Ready", "type": "string", "jsonPath": _condition_column("Ready")},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Lag", "type": "integer", "jsonPath": ".status.offsets.lag"},
            {
                "name": "Freshness",
                "type": "date",
                "jsonPath": ".status.landedThrough",
                "description": "age of the valid-through time of the last commit",
            },
            {
                "name": "Snapshot",
                "type": "string",
                "jsonPath": ".status.table.snapshotId",
                "priority": 1,
            },
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        ["spec"],
    )


def operation_crd() -> dict[str, Any]:
    """The KafkaIcebergOperation CRD: its spec cannot change once applied (an operation runs
    once; another is another object)."""
    spec = _schema(operation.OperationSpec)
    spec["x-kubernetes-validations"] = [
        *spec.get("x-kubernetes-validations", []),
        {
            "rule": "self == oldSelf",
            "message": "an operation cannot change once applied: "
            "create another (a new name) instead",
        },
    ]
    return _definition(
        operation.KIND,
        operation.PLURAL,
        operation.SINGULAR,
        operation.SHORT_NAMES,
        "An operation on a KafkaIcebergTopic's table (Rollback), run once by the operator.",
        spec,
        _without_defaults(_schema(operation.OperationStatus)),
        [
            {"name": "Topic", "type": "string", "jsonPath": ".spec.topic"},
            {"name": "Type", "type": "string", "jsonPath": ".spec.type"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        ["spec"],
    )


# The files of crds/: each CRD, and the module of the models it is generated from.
FILES = {
    "floe.dev_kafkaicebergtopics.yaml": (crd, "resource.py"),
    "floe.dev_kafkaicebergoperations.yaml": (operation_crd, "operation/"),
}


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(name: str = "floe.dev_kafkaicebergtopics.yaml") -> str:
    definition, source = FILES[name]
    header = (
        f"# Generated by `python -m floe_operator.crd {name}` from "
        f"operator/floe_operator/{source}.\n"
    )
    return header + yaml.dump(definition(), Dumper=_NoAliases, sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render(*sys.argv[1:2]))
