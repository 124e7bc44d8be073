"""The catalog settings Spark and PyIceberg are given for one SQL catalog."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from floe_sparkapp.catalog import S3Settings, SqliteCatalog

pytestmark = pytest.mark.unit


def test_spark_and_pyiceberg_name_the_same_database_and_warehouse():
    catalog = SqliteCatalog(name="lake", database=Path("/data/cat.db"), warehouse="file:///data/wh")

    spark = catalog.spark_conf()
    assert spark["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert spark["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert spark["spark.sql.catalog.lake.uri"] == "jdbc:sqlite:/data/cat.db"
    assert spark["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert catalog.pyiceberg_properties() == {"uri": "sqlite:////data/cat.db",
                                              "warehouse": "file:///data/wh"}


def test_s3_warehouse_settings_reach_both_sides_and_the_secret_stays_out_of_repr():
    s3 = S3Settings(endpoint="http://127.0.0.1:9000", access_key_id="ak",
                    secret_access_key="topsecret")
    catalog = SqliteCatalog(name="lake", database=Path("/c.db"), warehouse="s3://b/p", s3=s3)

    spark = catalog.spark_conf()
    assert spark["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert spark["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert spark["spark.sql.catalog.lake.s3.secret-access-key"] == "topsecret"
    assert catalog.pyiceberg_properties()["s3.endpoint"] == "http://127.0.0.1:9000"
    assert "topsecret" not in repr(catalog)


def test_a_catalog_name_spark_cannot_address_is_refused():
    with pytest.raises(ValidationError, match="name"):
        SqliteCatalog(name="my-lake", database=Path("/c.db"), warehouse="file:///w")
