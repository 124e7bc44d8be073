"""Pure functions from a KafkaIcebergTopic to the children the operator keeps in place.

Each resource gets a ConfigMap holding the job config and a SparkApplication
(sparkoperator.k8s.io/v1beta2) running ``python -m floe_sparkapp run`` on it; both are named
after the resource, owned by it, and mount the referenced Secrets as files.  The mounts are pod
templates, which kubeflow spark-operator passes to spark-submit as they are: nothing depends on
its mutating webhook.  Nothing here talks to the API server.

A module per object rendered; the names are all here, where the operator and the tests import
them from:

- :mod:`.topic`: :class:`Topic`, the resource as the render functions need it, and what names,
  owns and labels its children;
- :mod:`.config`: the job's config and its ConfigMap, the checkpoint and the Secrets' mounts;
- :mod:`.pods`: what the job's pods and the maintenance pods share (volumes, placement,
  containers' environment, metadata, logging);
- :mod:`.application`: the SparkApplication, the job fingerprint, an operation's attempts;
- :mod:`.maintenance`: the maintenance CronJobs;
- :mod:`.account`: the driver's ServiceAccount and RoleBinding;
- :mod:`.rendered`: :func:`desired`, all of a resource's rendered once per spec, stamped.
"""

from __future__ import annotations

from ..names import RESTART
from .account import spark_account
from .application import (
    DRIVER_CONTAINER,
    EXECUTOR_CONTAINER,
    NOT_THE_JOBS,
    SPARK_API,
    SPARK_CONF_DEFAULTS,
    job_fingerprint,
    operation_application,
    operation_labels,
    spark_application,
)
from .config import (
    CATALOG_SECRET_DIR,
    DRIVER_CHECKPOINTS,
    JOB_CONFIG_DIR,
    JOB_CONFIG_KEY,
    KAFKA_SECRET_DIR,
    REGISTRY_SECRET_DIR,
    checkpoint_location,
    config_map,
    job_config,
    secret_refs,
)
from .maintenance import MAINTENANCE_ACTIONS, SPARK_SUBMIT, cron_job_name, cron_jobs
from .rendered import APPLIED, Desired, desired, stamped
from .topic import MANAGED_BY, Topic, bounded_name, owner_reference

__all__ = [
    "APPLIED",
    "CATALOG_SECRET_DIR",
    "DRIVER_CHECKPOINTS",
    "DRIVER_CONTAINER",
    "EXECUTOR_CONTAINER",
    "JOB_CONFIG_DIR",
    "JOB_CONFIG_KEY",
    "KAFKA_SECRET_DIR",
    "MAINTENANCE_ACTIONS",
    "MANAGED_BY",
    "NOT_THE_JOBS",
    "REGISTRY_SECRET_DIR",
    "RESTART",
    "SPARK_API",
    "SPARK_CONF_DEFAULTS",
    "SPARK_SUBMIT",
    "Desired",
    "Topic",
    "bounded_name",
    "checkpoint_location",
    "config_map",
    "cron_job_name",
    "cron_jobs",
    "desired",
    "job_config",
    "job_fingerprint",
    "operation_application",
    "operation_labels",
    "owner_reference",
    "secret_refs",
    "spark_account",
    "spark_application",
    "stamped",
]
