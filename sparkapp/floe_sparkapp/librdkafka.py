"""Kafka settings are written for the Java client (the one Spark's Kafka source uses); the job's
and the operator's side clients are confluent-kafka, on librdkafka. This translates one to the
other, so a single Secret serves both."""

from __future__ import annotations

import functools
import logging
import re

_JAAS_OPTION = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
log = logging.getLogger("floe.kafka")
_JAVA_ONLY = (
    "ssl.truststore.",
    "ssl.keystore.",
    "sasl.login.",
    "sasl.client.callback.",
    "sasl.jaas.",
    "key.deserializer",
    "value.deserializer",
    "ssl.protocol",
    "ssl.enabled.protocols",
    "ssl.trustmanager.",
    "ssl.keymanager.",
)


def librdkafka_settings(java: dict[str, str]) -> dict[str, str]:
    """Java-client settings for librdkafka: sasl.jaas.config's username and password become
    sasl.username and sasl.password; settings only the Java client knows are left out (those
    named above, and any name librdkafka does not have: a consumer's tuning for Spark's source,
    say ``fetch.max.wait.ms``, is no reason for the side clients to fail)."""
    settings = {
        key: value
        for key, value in java.items()
        if not key.startswith(_JAVA_ONLY) and _librdkafka_has(key)
    }
    jaas = dict(_JAAS_OPTION.findall(java.get("sasl.jaas.config", "")))
    for option in ("username", "password"):
        if option in jaas:
            settings.setdefault(f"sasl.{option}", jaas[option])
    return settings


@functools.cache
def _librdkafka_has(key: str) -> bool:
    """Whether librdkafka has a setting of that name (a client made with it alone says)."""
    from confluent_kafka import Consumer, KafkaException

    try:
        Consumer(
            {"group.id": "floe-probe", "log_level": 0, key: _PROBE_VALUES.get(key, "1")}
        ).close()
    except KafkaException as error:
        if "No such configuration property" in str(error):
            log.info(
                "Kafka setting %s is the Java client's only: Spark's source uses it, "
                "floe's librdkafka clients go without it",
                key,
            )
            return False
    except Exception:  # noqa: BLE001 - the name exists; its value is for the client to judge
        pass
    return True


# Probe values where "1" is not one of a setting's allowed values (only the name is probed).
_PROBE_VALUES = {
    "security.protocol": "plaintext",
    "sasl.mechanism": "PLAIN",
    "sasl.mechanisms": "PLAIN",
    "isolation.level": "read_committed",
    "auto.offset.reset": "earliest",
    "client.dns.lookup": "use_all_dns_ips",
}
