"""One contract: the resource's spec, the operator's validation and the job's config are the
same models, and each rule refuses a spec in the same words wherever it is checked."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from floe_operator.handlers import _invalid
from floe_operator.resource import KafkaIcebergTopicSpec
from floe_sparkapp import contract
from floe_sparkapp.config import ConfigError, JobConfig, parse_config

from ..contract_cases import CASES, TRANSITIONS, VALID
from .test_crd import CRD_FILE

pytestmark = pytest.mark.unit


def models(root: type[BaseModel]) -> set[type[BaseModel]]:
    """``root`` and every model its fields hold, their bases among them."""
    found: set[type[BaseModel]] = set()

    def visit(model: type[BaseModel]) -> None:
        for klass in model.__mro__:
            if (
                isinstance(klass, type)
                and issubclass(klass, BaseModel)
                and klass not in found
                and klass is not BaseModel
            ):
                found.add(klass)
                for field in klass.model_fields.values():
                    for inner in _types(field.annotation):
                        visit(inner)

    visit(root)
    return found


def _types(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [t for arg in getattr(annotation, "__args__", ()) for t in _types(arg)]


RULES = [
    rule
    for model in sorted(models(KafkaIcebergTopicSpec), key=lambda m: m.__name__)
    for rule in model.__dict__.get("RULES", ())
]


def crd_rules() -> list[tuple[str, str]]:
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.extend(
                (v["rule"], v["message"]) for v in node.get("x-kubernetes-validations", [])
            )
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(yaml.safe_load(CRD_FILE.read_text()))
    return found


def test_the_job_config_is_the_spec_and_what_the_operator_adds():
    spec = set(contract.TopicSpec.model_fields)
    assert set(JobConfig.model_fields) - spec == {
        "writer",
        "generation",
        "checkpoint_location",
        "secrets",
    }
    assert set(KafkaIcebergTopicSpec.model_fields) - spec == {"spark", "auto_rollback"}
    assert issubclass(JobConfig, contract.TopicSpec)
    assert issubclass(KafkaIcebergTopicSpec, contract.TopicSpec)


def test_a_route_table_and_the_topics_table_are_one_model():
    route = contract.RouteSpec.model_fields["table"].annotation
    assert route is contract.TableLayout and issubclass(contract.TableSpec, route)


def test_every_rule_is_in_the_crd_in_its_own_words():
    assert RULES and all(isinstance(rule, contract.Rule) for rule in RULES)
    in_crd = crd_rules()
    for rule in RULES:
        assert (rule.cel, rule.message) in in_crd, rule.message


def test_every_rule_has_a_case_that_breaks_it():
    covered = {case.rule for case in CASES} | set(TRANSITIONS)
    assert {rule.message for rule in RULES} == covered - {None}
    assert {rule.message for rule in RULES if rule.holds is None} == set(TRANSITIONS)


OPERATORS = {"spark", "autoRollback"}  # the spec's fields the operator alone reads


def job_data(spec: dict[str, Any]) -> dict[str, Any]:
    """The job config the operator would hand over for ``spec`` (the pods' settings left out)."""
    data = {k: v for k, v in copy.deepcopy(spec).items() if k not in OPERATORS}
    return {**data, "writer": "data/orders", "checkpointLocation": "s3a://lake/cp"}


def test_the_valid_spec_is_valid_everywhere():
    KafkaIcebergTopicSpec.model_validate(VALID["spec"])
    parse_config(job_data(VALID["spec"]))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.api[:60])
def test_the_operator_and_the_job_refuse_what_the_api_server_refuses(case):
    """In the rule's words, as the API server gives them (tests/e2e/test_crd_validation.py)."""
    with pytest.raises(ValidationError) as operator:
        KafkaIcebergTopicSpec.model_validate(case.body["spec"])
    said = _invalid(operator.value)  # what the status says
    if case.rule is not None:
        assert case.rule in said, said
    if OPERATORS & set(case.body["spec"]):
        return  # the job has no pods' settings, and does not roll itself back
    with pytest.raises(ConfigError) as job:
        parse_config(job_data(case.body["spec"]))
    if case.rule is not None:
        assert case.rule in str(job.value), str(job.value)


def test_a_zero_interval_is_refused_where_the_user_applies_it():
    zero = [case for case in CASES if case.body["spec"].get("commit") == {"interval": "0s"}]
    assert zero and zero[0].api.endswith("commit.interval must be between 1s and 1d")


def test_the_kubectl_plugin_knows_the_reasons_a_row_is_kept_raw():
    """The plugin installs without the job's package, so it keeps its own copy of them."""
    from floe_operator import cli
    from floe_sparkapp.contract import RAW_REASONS

    assert cli.RAW_REASONS == RAW_REASONS
