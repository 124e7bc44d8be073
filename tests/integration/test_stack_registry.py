"""The stack's schema registry, through confluent-kafka's Python client and Avro serdes."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = pytest.mark.integration

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "floe.smoke",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
V2 = {
    **V1,
    "fields": V1["fields"] + [{"name": "quantity", "type": ["null", "int"], "default": None}],
}


def test_two_versions_registered_and_read_back_by_id(stack, unique_name):
    client = SchemaRegistryClient({"url": stack.registry_url})
    subject = f"{unique_name}-value"

    id1 = client.register_schema(subject, Schema(json.dumps(V1), "AVRO"))
    id2 = client.register_schema(subject, Schema(json.dumps(V2), "AVRO"))

    assert id1 != id2
    assert client.get_versions(subject) == [1, 2]
    fresh = SchemaRegistryClient({"url": stack.registry_url})  # no client-side cache
    assert json.loads(fresh.get_schema(id1).schema_str)["fields"] == V1["fields"]
    assert json.loads(fresh.get_schema(id2).schema_str)["fields"] == V2["fields"]
    latest = fresh.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, id2)


def test_avro_serializer_round_trip(stack, unique_name):
    client = SchemaRegistryClient({"url": stack.registry_url})
    topic = unique_name
    serializer = AvroSerializer(client, json.dumps(V2))
    context = SerializationContext(topic, MessageField.VALUE)

    payload = serializer({"id": 7, "item": "apple", "quantity": 3}, context)

    assert payload[0] == 0  # Confluent wire format: magic byte, 4-byte schema id, Avro body
    schema_id = int.from_bytes(payload[1:5], "big")
    assert client.get_latest_version(f"{topic}-value").schema_id == schema_id
    reader = AvroDeserializer(SchemaRegistryClient({"url": stack.registry_url}))
    assert reader(payload, context) == {"id": 7, "item": "apple", "quantity": 3}
