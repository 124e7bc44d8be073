"""Spark with the stack's connector jars: Kafka source to Iceberg, on local disk and on S3."""

from __future__ import annotations

import boto3
import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F

from floe_sparkapp.catalog import load_catalog, register_in
from floe_sparkapp.config import SecretSource
from floe_sparkapp.contract import CatalogSpec

from .test_stack_kafka import create_topic

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, count: int) -> dict[tuple[int, int], bytes]:
    """Produces ``count`` records; returns value by (partition, offset) as the broker assigned."""
    delivered: dict[tuple[int, int], bytes] = {}

    def on_delivery(error, message):
        assert error is None, error
        delivered[(message.partition(), message.offset())] = message.value()

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(
            topic, key=str(i).encode(), value=f"record-{i}".encode(), on_delivery=on_delivery
        )
    assert producer.flush(30) == 0
    return delivered


def test_kafka_source_to_iceberg_sql_catalog_read_back_by_pyiceberg(
    stack, spark, tmp_path, unique_name
):
    topic = f"spark-{unique_name}"
    create_topic(stack.bootstrap, topic, partitions=2)
    produced = produce(stack.bootstrap, topic, 200)
    catalog = CatalogSpec(
        name="floe_smoke",
        uri=f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        warehouse=f"file://{tmp_path / 'warehouse'}",
    )
    register_in(spark, catalog)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS floe_smoke.db")
    spark.sql(
        f"CREATE TABLE floe_smoke.db.{unique_name} (part INT, off BIGINT, value STRING) "
        "USING iceberg"
    )

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select(
            F.col("partition").alias("part"),
            F.col("offset").alias("off"),
            F.col("value").cast("string").alias("value"),
        )
    )
    query = (
        stream.writeStream.format("iceberg")
        .outputMode("append")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .toTable(f"floe_smoke.db.{unique_name}")
    )
    query.awaitTermination(300)
    assert query.exception() is None

    table = load_catalog(catalog).load_table(f"db.{unique_name}")
    rows = table.scan().to_arrow().to_pylist()
    assert {(r["part"], r["off"]): r["value"].encode() for r in rows} == produced
    assert len(rows) == len(produced)


def test_iceberg_table_on_s3(stack, spark, tmp_path, unique_name):
    env = stack.env
    prefix = f"smoke/{unique_name}"
    catalog = CatalogSpec(
        name="floe_s3",
        uri=f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        warehouse=f"s3://{env['FLOE_S3_BUCKET']}/{prefix}",
        properties={
            "s3.endpoint": env["FLOE_S3_ENDPOINT"],
            "s3.path-style-access": "true",
            "s3.access-key-id": env["FLOE_S3_ACCESS_KEY"],
            "client.region": env["FLOE_S3_REGION"],
        },
    ).with_secrets(
        SecretSource(env={"s3.secret-access-key": "FLOE_S3_SECRET_KEY"}).values("catalog")
    )
    register_in(spark, catalog)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS floe_s3.db")
    rows = [(i, f"name-{i}") for i in range(50)]
    spark.createDataFrame(rows, "id INT, name STRING").writeTo("floe_s3.db.people").using(
        "iceberg"
    ).create()

    back = spark.table("floe_s3.db.people").orderBy("id").collect()
    assert [(r.id, r.name) for r in back] == rows

    # The files are on the S3 server, not on local disk.
    client = boto3.client(
        "s3",
        endpoint_url=env["FLOE_S3_ENDPOINT"],
        aws_access_key_id=env["FLOE_S3_ACCESS_KEY"],
        aws_secret_access_key=env["FLOE_S3_SECRET_KEY"],
        region_name=env["FLOE_S3_REGION"],
    )
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=env["FLOE_S3_BUCKET"], Prefix=prefix
        )
        for o in page.get("Contents", [])
    ]
    assert any(k.endswith(".parquet") for k in keys)
    assert any(k.endswith(".metadata.json") for k in keys)
    # PyIceberg reads the same table through S3 too.
    assert load_catalog(catalog).load_table("db.people").scan().to_arrow().num_rows == 50


def test_a_rest_catalog_that_asks_for_sigv4_is_signed_by_both_sides(
    stack, spark, unique_name, monkeypatch
):
    """The route to AWS Glue's and S3 Tables' Iceberg REST endpoints (docs: Catalogs): with
    `rest.sigv4-enabled`, Spark (iceberg-aws-bundle) and PyIceberg (boto3) sign each request
    with the AWS credentials they find. The stack's REST catalog server takes any signature, so
    a table made and read through it shows that both clients carry what signing needs."""
    env = stack.env
    keys = {
        "AWS_ACCESS_KEY_ID": "AKIAFLOETEST",
        "AWS_SECRET_ACCESS_KEY": "floe-test-secret",
        "AWS_REGION": "us-east-1",
    }
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    system = spark._jvm.java.lang.System  # the shared JVM: its credentials chain reads these
    for name, value in (
        ("aws.accessKeyId", keys["AWS_ACCESS_KEY_ID"]),
        ("aws.secretAccessKey", keys["AWS_SECRET_ACCESS_KEY"]),
        ("aws.region", keys["AWS_REGION"]),
    ):
        system.setProperty(name, value)
    catalog = CatalogSpec(
        type="rest",
        name="signed",
        uri=env["FLOE_REST_CATALOG_URI"],
        warehouse=env["FLOE_REST_CATALOG_WAREHOUSE"],
        properties={
            "rest.sigv4-enabled": "true",
            "rest.signing-name": "glue",
            "rest.signing-region": "us-east-1",
            "s3.endpoint": env["FLOE_S3_ENDPOINT"],
            "s3.path-style-access": "true",
            "s3.access-key-id": env["FLOE_S3_ACCESS_KEY"],
            "s3.secret-access-key": env["FLOE_S3_SECRET_KEY"],
            "client.region": env["FLOE_S3_REGION"],
        },
    )
    register_in(spark, catalog)
    try:
        spark.sql("CREATE NAMESPACE IF NOT EXISTS signed.sigv4")
        spark.createDataFrame([(1, "a"), (2, "b")], "id INT, name STRING").writeTo(
            f"signed.sigv4.{unique_name}"
        ).using("iceberg").create()
        table = load_catalog(catalog).load_table(f"sigv4.{unique_name}")
        assert sorted((r["id"], r["name"]) for r in table.scan().to_arrow().to_pylist()) == [
            (1, "a"),
            (2, "b"),
        ]
        # And what PyIceberg sends is signed, with the credentials and the service asked for.
        import requests

        uri = env["FLOE_REST_CATALOG_URI"]
        adapter = load_catalog(catalog)._session.get_adapter(uri)
        request = requests.Request("GET", f"{uri}/v1/config").prepare()
        adapter.add_headers(request)
        signature = request.headers["Authorization"]
        assert signature.startswith("AWS4-HMAC-SHA256 Credential=AKIAFLOETEST/"), signature
        assert "/us-east-1/glue/aws4_request" in signature
    finally:
        for name in ("aws.accessKeyId", "aws.secretAccessKey", "aws.region"):
            system.clearProperty(name)
