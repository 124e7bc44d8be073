"""One Secret of Java-client Kafka settings serves Spark and the librdkafka side clients."""

import pytest

from floe_sparkapp.librdkafka import librdkafka_settings

pytestmark = pytest.mark.unit


def test_jaas_credentials_become_librdkafka_settings_and_java_only_ones_are_dropped():
    java = {
        "bootstrap.servers": "k:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="floe" password="p\\"w";',
        "ssl.truststore.location": "/etc/kafka/truststore.jks",
        "ssl.truststore.password": "x",
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }
    assert librdkafka_settings(java) == {
        "bootstrap.servers": "k:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "floe",
        "sasl.password": 'p\\"w',
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }


def test_explicit_librdkafka_credentials_win_over_the_jaas_line():
    settings = librdkafka_settings(
        {
            "sasl.username": "a",
            "sasl.password": "b",
            "sasl.jaas.config": 'x required username="c" password="d";',
        }
    )
    assert (settings["sasl.username"], settings["sasl.password"]) == ("a", "b")


def test_java_client_settings_librdkafka_does_not_have_are_left_to_spark():
    settings = librdkafka_settings(
        {
            "bootstrap.servers": "k:9093",
            "fetch.max.wait.ms": "100",
            "max.partition.fetch.bytes": "1048576",
            "fetch.wait.max.ms": "100",
            "client.id": "floe",
        }
    )
    assert settings == {
        "bootstrap.servers": "k:9093",
        "fetch.wait.max.ms": "100",
        "max.partition.fetch.bytes": "1048576",
        "client.id": "floe",
    }
