"""The planner's decision on the driver's ServiceAccount: made (with its RoleBinding) where the
operator makes accounts, else named on the status when missing, the job waiting for it."""

from __future__ import annotations

from ..render import Topic
from ..settings import OperatorSettings
from ..view import World
from .actions import Decisions, EnsureAccount


def plan_account(
    topic: Topic, world: World, settings: OperatorSettings, decided: Decisions
) -> bool:
    """Whether the driver's ServiceAccount is there (or made by this visit's actions) so the
    job can be created. With FLOE_SPARK_ACCOUNT_ROLE the operator makes the default account
    where it is missing; otherwise a missing one is named on the status, and the job waits for
    it instead of failing at every submission."""
    children = world.children
    if not children.account_seen:
        return True  # not watched: spark-operator's submission says
    own = topic.spec.spark.service_account
    name = own or settings.spark_service_account
    found = children.account
    if settings.spark_account_role and not own:
        if found is None or (found.managed and topic.uid not in found.owners):
            decided.act(EnsureAccount(name, settings.spark_account_role))
        return True
    if found is not None:
        return True
    namespace = topic.namespace
    message = (
        f"ServiceAccount {name} not found in namespace {namespace}: the Spark driver runs "
        "as it, with a Role to manage its executor pods, their services and ConfigMaps "
        f"there. Let the chart make both (helm upgrade <release> charts/floe-operator "
        f"--reuse-values --set 'watch.namespaces={{<the namespaces it has>,{namespace}}}'"
        ", or leave watch.namespaces empty and the operator makes them), or name an "
        "account that has such a Role in spec.spark.serviceAccount"
    )
    decided.say(account_missing=message)  # the status's change posts its Warning Event
    return False
