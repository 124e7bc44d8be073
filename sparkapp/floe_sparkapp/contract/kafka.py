"""Where the records come from: the Kafka topic and its client's settings, and the schema
registry the values' schemas are read from."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import KAFKA_TOPIC, SecretRef, _Model


class KafkaSpec(_Model):
    bootstrap_servers: str = Field(min_length=1, description="host:port[,host:port...]")
    topic: str = Field(pattern=KAFKA_TOPIC, description="The topic to land.")
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="Where the very first start reads from; later starts continue "
        "from the offsets committed in the table.",
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    consumer_group: str | None = Field(
        None,
        description="Consumer group the committed offsets are reported to "
        "(default: floe.<namespace>.<name>).",
    )
    properties: dict[str, str] = Field(
        default_factory=dict, description="Extra Kafka client settings, without secrets."
    )
    auth_secret_ref: SecretRef | None = Field(
        None,
        description="Secret whose keys are Kafka client settings with secret values "
        "(for example sasl.jaas.config).",
    )


class SchemaRegistrySpec(_Model):
    url: str = Field(pattern=r"^https?://", description="Confluent-compatible registry URL.")
    subject: str = Field(min_length=1, description="Subject of the value schema.")
    auth_secret_ref: SecretRef | None = Field(
        None, description="Secret with key basic.auth.user.info (user:password)."
    )
