"""The operator's own settings, from FLOE_* environment variables, validated at start-up."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .resource import PodSpec


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLOE_", extra="ignore")

    spark_image: str = Field("floe/floe-spark:0.1.0", description="Default image of the Spark job.")
    spark_service_account: str = Field(
        "floe-spark", description="Default ServiceAccount of Spark drivers."
    )
    spark_account_role: str | None = Field(
        None,
        description="A ClusterRole holding what a Spark driver needs in its namespace "
        "(its executor pods, their services and ConfigMaps). Set: where a "
        "resource's driver runs as spark_service_account and no such "
        "ServiceAccount exists, the operator makes it, bound to this role in "
        "the namespace, owned by the resources that use it (removed with the "
        "last). Unset: the accounts are made by someone else (the chart, for "
        "the namespaces it serves), and a missing one is named on the status.",
    )
    spark_pod: PodSpec = Field(
        default_factory=PodSpec,
        description="Defaults of every job's pods, under each resource's spec.spark (JSON of "
        "the same fields: imagePullSecrets, nodeSelector, tolerations, affinity, "
        "priorityClassName, podLabels, podAnnotations, env, envFrom, "
        "podSecurityContext, securityContext).",
    )
    job_main_file: str = Field(
        "local:///opt/floe/floe_job.py", description="The job's entry point inside the image."
    )
    checkpoint_root: str | None = Field(
        None,
        description="Root for checkpoints when a resource names none "
        "(default: the table's warehouse).",
    )
    peering: str | None = Field(
        None,
        description="Name of the KopfPeering (or ClusterKopfPeering, cluster-wide) object "
        "the replicas share; only the one with the highest priority acts. "
        "Unset: standalone (one replica only).",
    )
    peering_priority: int | None = Field(
        None,
        description="This replica's priority in the peering (default: random, so two "
        "replicas never tie; a tie would pause both).",
    )
    peering_lifetime: int = Field(
        60,
        ge=10,
        description="Seconds after which a silent replica counts as dead and a "
        "paused one takes over.",
    )
    refresh_seconds: float = Field(
        10,
        ge=1,
        le=3600,
        description="Seconds between two refreshes of a resource's status "
        "from its table and Kafka (each costs a catalog read and "
        "a Kafka offsets request; the status is written only when "
        "it changed).",
    )
    failover_backoff_seconds: float = Field(
        10,
        ge=1,
        le=3600,
        description="Seconds the operator waits before recreating a failed "
        "job the first time; the wait doubles with each "
        "failover in a row.",
    )
    failover_backoff_max_seconds: float = Field(
        300, ge=1, le=86400, description="The longest wait before recreating a failed job."
    )
    failover_reset_seconds: float = Field(
        600,
        ge=10,
        description="Seconds a job recreated by a failover must run without dying "
        "again before its failover count (and so the backoff) starts "
        "from zero.",
    )
    deletion_wait_seconds: float = Field(
        300,
        ge=0,
        description="How long a deleted resource waits for its job's pods to stop "
        "before its table is dropped (deletionPolicy Delete) and the "
        "resource goes; after it, floe goes on without them.",
    )
    submit_wait_seconds: float = Field(
        30,
        ge=0,
        le=3600,
        description="How long a deleted resource waits for spark-operator to "
        "take up its SparkApplication (spark-submit makes the "
        "driver pod within seconds); an application not taken "
        "up by then is taken to be unseen (spark-operator down, "
        "or not serving the namespace) and deleted at once.",
    )
    stall_intervals: float = Field(
        5,
        ge=2,
        le=1000,
        description="A running job that has committed nothing for this many "
        "commit intervals (and at least stall_min_seconds) while "
        "Kafka has records past its table's offsets is stalled: "
        "Ready turns False (reason Stalled) saying what the job "
        "is doing.",
    )
    stall_min_seconds: float = Field(
        120,
        ge=0,
        le=86400,
        description="The shortest time without a commit that is called a "
        "stall, however short the commit interval.",
    )
    metrics_port: int = Field(
        9090, ge=0, le=65535, description="Port of the Prometheus /metrics endpoint (0: off)."
    )
    log_format: Literal["json", "text"] = Field(
        "json",
        description="The operator's and the jobs' log lines: one JSON object per line, or text.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="The operator's log level (a job's: its spec.spark.logLevel)."
    )
