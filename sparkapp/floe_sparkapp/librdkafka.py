"""Kafka settings are written for the Java client (the one Spark's Kafka source uses); the job's
and the operator's side clients are confluent-kafka, on librdkafka. This translates one to the
other, so a single Secret serves both."""

from __future__ import annotations

import re

_JAAS_OPTION = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAVA_ONLY = ("ssl.truststore.", "ssl.keystore.", "sasl.login.", "sasl.client.callback.",
              "sasl.jaas.", "key.deserializer", "value.deserializer", "ssl.protocol",
              "ssl.enabled.protocols", "ssl.trustmanager.", "ssl.keymanager.")


def librdkafka_settings(java: dict[str, str]) -> dict[str, str]:
    """Java-client settings for librdkafka: sasl.jaas.config's username and password become
    sasl.username and sasl.password; settings only the Java client knows are left out."""
    settings = {key: value for key, value in java.items() if not key.startswith(_JAVA_ONLY)}
    jaas = dict(_JAAS_OPTION.findall(java.get("sasl.jaas.config", "")))
    for option in ("username", "password"):
        if option in jaas:
            settings.setdefault(f"sasl.{option}", jaas[option])
    return settings
