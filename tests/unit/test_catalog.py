"""The settings Spark and PyIceberg are given for one catalog."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from floe_sparkapp.catalog import pyiceberg_properties, s3a_conf, spark_conf
from floe_sparkapp.config import ConfigError, SecretSource
from floe_sparkapp.contract import CatalogSpec
from floe_sparkapp.fileio import ArrowFileIO

pytestmark = pytest.mark.unit


def test_sql_catalog_names_the_same_database_and_warehouse_on_both_sides():
    catalog = CatalogSpec(
        type="sql", name="lake", uri="jdbc:sqlite:/data/cat.db", warehouse="file:///data/wh"
    )

    spark = spark_conf(catalog)
    assert spark["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert spark["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert spark["spark.sql.catalog.lake.uri"] == "jdbc:sqlite:/data/cat.db"
    assert spark["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert pyiceberg_properties(catalog) == {
        "uri": "sqlite:////data/cat.db",
        "warehouse": "file:///data/wh",
        "py-io-impl": "floe_sparkapp.fileio.ArrowFileIO",
    }


def test_s3_warehouse_uses_s3fileio_and_secrets_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAKE_SECRET", "topsecret")
    spec = CatalogSpec(
        type="sql",
        name="lake",
        uri="jdbc:postgresql://db:5432/iceberg",
        warehouse="s3://b/p",
        properties={
            "s3.endpoint": "http://s3:9000",
            "s3.path-style-access": "true",
            "s3.access-key-id": "ak",
            "jdbc.user": "floe",
        },
    )
    catalog = spec.with_secrets(
        SecretSource(
            env={"s3.secret-access-key": "LAKE_SECRET", "jdbc.password": "LAKE_SECRET"}
        ).values("c")
    )

    spark = spark_conf(catalog)
    assert spark["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert spark["spark.sql.catalog.lake.s3.secret-access-key"] == "topsecret"
    py = pyiceberg_properties(catalog)
    assert py["uri"] == "postgresql+psycopg2://floe:topsecret@db:5432/iceberg"
    assert py["s3.force-virtual-addressing"] == "false"
    assert "topsecret" not in spec.model_dump_json()


def test_a_checkpoint_in_the_warehouses_bucket_reaches_it_as_the_catalog_does():
    catalog = CatalogSpec(
        type="sql",
        name="lake",
        uri="jdbc:postgresql://db:5432/iceberg",
        warehouse="s3://lake/wh",
        properties={
            "s3.endpoint": "http://minio:9000",
            "s3.path-style-access": "true",
            "s3.access-key-id": "ak",
            "client.region": "us-east-1",
            "jdbc.user": "floe",
        },
    ).with_secrets({"s3.secret-access-key": "topsecret"})
    scoped = "spark.hadoop.fs.s3a.bucket.lake."

    assert s3a_conf(catalog, "s3a://lake/wh/_floe/checkpoints/data/orders") == {
        scoped + "endpoint": "http://minio:9000",
        scoped + "path.style.access": "true",
        scoped + "access.key": "ak",
        scoped + "secret.key": "topsecret",
        scoped + "endpoint.region": "us-east-1",
    }
    # What the user set for S3A (spec.spark.conf), globally or for the bucket, stays theirs.
    assert set(
        s3a_conf(catalog, "s3a://lake/cp", {"spark.hadoop.fs.s3a.endpoint", scoped + "secret.key"})
    ) == {scoped + "path.style.access", scoped + "access.key", scoped + "endpoint.region"}
    # Another bucket, another store or a warehouse elsewhere: the catalog's keys stay its own.
    assert s3a_conf(catalog, "s3a://other/cp") == {}
    assert s3a_conf(catalog, "file:///checkpoints/data/orders") == {}
    on_disk = CatalogSpec(
        uri="jdbc:sqlite:/c.db", warehouse="file:///w", properties={"s3.access-key-id": "ak"}
    )
    assert s3a_conf(on_disk, "s3a://lake/cp") == {}


def test_temporary_keys_reach_the_checkpoint_with_their_session_token():
    catalog = CatalogSpec(
        uri="jdbc:sqlite:/c.db",
        warehouse="s3a://lake/w",
        properties={
            "s3.access-key-id": "ak",
            "s3.secret-access-key": "sk",
            "s3.session-token": "tok",
        },
    )
    conf = s3a_conf(catalog, "s3a://lake/w/cp")
    assert conf["spark.hadoop.fs.s3a.bucket.lake.session.token"] == "tok"
    assert conf["spark.hadoop.fs.s3a.bucket.lake.aws.credentials.provider"] == (
        "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    )


def test_a_missing_secret_variable_is_named():
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE not set"):
        SecretSource(env={"s3.secret-access-key": "NOT_SET_ANYWHERE"}).values("catalog")


def test_a_catalog_name_spark_cannot_address_is_refused():
    with pytest.raises(ValidationError, match="name"):
        CatalogSpec(name="my-lake", uri="jdbc:sqlite:/c.db", warehouse="file:///w")


def test_secret_properties_come_from_a_mounted_secret_directory(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "s3.secret-access-key").write_text("fromfile\n")
    (secret / "..data").mkdir()  # Kubernetes' bookkeeping in a Secret volume
    catalog = CatalogSpec(uri="jdbc:sqlite:/c.db", warehouse="s3://b/w").with_secrets(
        SecretSource(dir=str(secret)).values("catalog")
    )

    assert spark_conf(catalog)["spark.sql.catalog.floe.s3.secret-access-key"] == "fromfile"
    assert "..data" not in "".join(spark_conf(catalog))


def test_a_new_sql_catalog_opened_by_two_processes_at_once_opens_in_both(tmp_path, monkeypatch):
    """The other process made the catalog's tables between this one's check and its CREATE
    TABLE: SQLite refuses the second CREATE, and the catalog opens on the tables now there."""
    from pyiceberg.catalog.sql import SqlCatalog, SqlCatalogBaseTable

    from floe_sparkapp.catalog import load_catalog

    catalog = CatalogSpec(
        type="sql",
        name="lake",
        uri=f"jdbc:sqlite:{tmp_path / 'c.db'}",
        warehouse=f"file://{tmp_path / 'wh'}",
    )
    init = SqlCatalog._init_catalog
    raced = []

    def racing(self):
        if not raced:
            raced.append(True)
            SqlCatalog("lake", uri=f"sqlite:///{tmp_path / 'c.db'}")  # the other one, first
            # This one's CREATE TABLE, as issued after it found no tables.
            SqlCatalogBaseTable.metadata.create_all(self.engine, checkfirst=False)
        init(self)

    monkeypatch.setattr(SqlCatalog, "_init_catalog", racing)
    opened = load_catalog(catalog)
    opened.create_namespace("analytics")
    assert raced and list(opened.list_namespaces()) == [("analytics",)]


def test_gcs_warehouse_uses_gcsfileio_and_pyiceberg_reads_it_without_credentials_when_told():
    catalog = CatalogSpec(
        type="sql",
        name="lake",
        uri="jdbc:sqlite:/c.db",
        warehouse="gs://bucket/wh",
        properties={"gcs.service.host": "http://gcs:4443", "gcs.no-auth": "true"},
    )

    assert spark_conf(catalog)["spark.sql.catalog.lake.io-impl"] == (
        "org.apache.iceberg.gcp.gcs.GCSFileIO"
    )
    py = pyiceberg_properties(catalog)
    assert py["gcs.service.host"] == "http://gcs:4443" and py["gcs.no-auth"] == "true"
    store = ArrowFileIO(py)._initialize_gcs_fs()
    assert type(store).__name__ == "GcsFileSystem"


def test_adls_warehouse_uses_adlsfileio_and_pyiceberg_reaches_the_same_account():
    host = "acct.dfs.core.windows.net"
    catalog = CatalogSpec(
        type="sql",
        name="lake",
        uri="jdbc:sqlite:/c.db",
        warehouse=f"abfss://lake@{host}/wh",
        properties={
            f"adls.connection-string.{host}": "http://az:10000/acct",
            "adls.auth.shared-key.account.name": "acct",
            "adls.auth.shared-key.account.key": "a2V5",
        },
    )

    assert spark_conf(catalog)["spark.sql.catalog.lake.io-impl"] == (
        "org.apache.iceberg.azure.adlsv2.ADLSFileIO"
    )
    py = pyiceberg_properties(catalog)
    assert (py["adls.account-name"], py["adls.account-key"]) == ("acct", "a2V5")
    assert py["adls.blob-storage-authority"] == py["adls.dfs-storage-authority"] == "az:10000"
    assert py["adls.blob-storage-scheme"] == py["adls.dfs-storage-scheme"] == "http"
    # A location's path starts at its container (PyIceberg's own reads the netloc as one).
    assert ArrowFileIO.parse_location(f"abfss://lake@{host}/wh/t/metadata/v1.json") == (
        "abfss",
        f"lake@{host}",
        "lake/wh/t/metadata/v1.json",
    )


def test_adls_on_azure_itself_names_the_account_by_its_host():
    catalog = CatalogSpec(
        type="rest",
        name="lake",
        uri="https://catalog",
        warehouse="abfss://lake@acct.dfs.core.windows.net/wh",
    )

    py = pyiceberg_properties(catalog)
    assert py["adls.account-name"] == "acct"
    assert "adls.blob-storage-authority" not in py  # Azure's own endpoints
