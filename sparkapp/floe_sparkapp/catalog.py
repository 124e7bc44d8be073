"""One Iceberg catalog, seen the same way from Spark and from PyIceberg.

The embedded default is a SQL catalog: Spark uses Iceberg's ``JdbcCatalog`` and PyIceberg
its ``SqlCatalog`` on the same database, under the same catalog name (both key their
``iceberg_tables`` rows by it).  Catalog properties are passed to both sides, by Iceberg's
(Java) names; the few that PyIceberg spells differently are translated here.  A warehouse on
``s3://`` uses Iceberg's S3FileIO, on ``gs://`` its GCSFileIO, on ``abfs://`` or ``abfss://``
its ADLSFileIO; PyIceberg reads all three through :class:`floe_sparkapp.fileio.ArrowFileIO`.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any
from urllib.parse import quote, urlparse

from . import format_v3
from .config import ConfigError
from .contract import CatalogSpec

SPARK_TYPES = {"rest": "rest"}
# Iceberg's FileIO for a warehouse's scheme (Spark's side).
FILE_IOS = {
    "s3": "org.apache.iceberg.aws.s3.S3FileIO",
    "s3a": "org.apache.iceberg.aws.s3.S3FileIO",
    "gs": "org.apache.iceberg.gcp.gcs.GCSFileIO",
    "abfs": "org.apache.iceberg.azure.adlsv2.ADLSFileIO",
    "abfss": "org.apache.iceberg.azure.adlsv2.ADLSFileIO",
}
# Iceberg's ADLS settings: an account's endpoint (keyed by the account's host, as in a
# location's container@host), and a shared key.
ADLS_ENDPOINT_PREFIX = "adls.connection-string."
ADLS_SHARED_KEY_NAME = "adls.auth.shared-key.account.name"
ADLS_SHARED_KEY = "adls.auth.shared-key.account.key"


# The stores Spark reaches through a Hadoop file system in floe's image (S3 through S3A): its
# checkpoints.
HADOOP_SCHEMES = ("s3", "s3a", "file", "hdfs")
# The stores whose listing for remove-orphans goes through Hadoop: those it reaches with no
# settings of the catalog's (an object store is listed through the table's FileIO, with the
# catalog's own endpoint and keys: Hadoop has no file system for ``s3://``, and its S3A
# settings are made for the checkpoint's bucket only).
HADOOP_LISTED = ("file", "hdfs")


def scheme_of(location: str) -> str:
    """A location's scheme (``s3``, ``gs``, ``abfss``, ``file``; empty for a bare path)."""
    return location.split("://", 1)[0].lower() if "://" in location else ""


def hadoop_reaches(location: str) -> bool:
    """Whether Spark's Hadoop file systems in floe's image reach ``location``."""
    return scheme_of(location) in (*HADOOP_SCHEMES, "")


def hadoop_lists(location: str) -> bool:
    """Whether remove-orphans lists ``location`` through Hadoop (or through the table's FileIO)."""
    return scheme_of(location) in (*HADOOP_LISTED, "")


def warehouse_scheme(catalog: CatalogSpec) -> str:
    """The scheme of the catalog's warehouse (empty when it has none)."""
    return scheme_of(catalog.warehouse or "")


def sqlalchemy_uri(jdbc_uri: str, props: dict[str, str]) -> str:
    """PyIceberg's SqlCatalog takes a SQLAlchemy URI for the database Spark reaches by JDBC."""
    rest = jdbc_uri.removeprefix("jdbc:")
    if rest.startswith("sqlite:"):
        path = rest.removeprefix("sqlite:").removeprefix("file:")
        return f"sqlite:///{path}"
    if rest.startswith("postgresql://"):
        user, password = props.get("jdbc.user"), props.get("jdbc.password")
        auth = ""
        if user:
            auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
        return f"postgresql+psycopg2://{auth}{rest.removeprefix('postgresql://')}"
    raise ConfigError(
        f"catalog uri {jdbc_uri!r}: only jdbc:sqlite: and jdbc:postgresql:// "
        "databases are supported for the sql catalog"
    )


def spark_conf(catalog: CatalogSpec) -> dict[str, str]:
    """Spark settings that register the catalog under ``spark.sql.catalog.<name>``."""
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    if catalog.type == "sql":
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
    else:
        conf[f"{prefix}.type"] = SPARK_TYPES[catalog.type]
    if catalog.uri:
        conf[f"{prefix}.uri"] = catalog.uri
    if catalog.warehouse:
        conf[f"{prefix}.warehouse"] = catalog.warehouse
        if warehouse_scheme(catalog) in FILE_IOS:
            conf[f"{prefix}.io-impl"] = FILE_IOS[warehouse_scheme(catalog)]
    for key, value in catalog.properties.items():
        conf[f"{prefix}.{key}"] = value
    return conf


# Spark's checkpoints go through Hadoop's S3A; the catalog's S3 settings, by their S3A names.
S3A_OPTIONS = {
    "s3.endpoint": "endpoint",
    "s3.path-style-access": "path.style.access",
    "s3.access-key-id": "access.key",
    "s3.secret-access-key": "secret.key",
    "s3.session-token": "session.token",
    "client.region": "endpoint.region",
}


def s3a_conf(
    catalog: CatalogSpec, location: str, given: AbstractSet[str] = frozenset()
) -> dict[str, str]:
    """Hadoop S3A settings for a checkpoint ``location`` in the warehouse's bucket: the catalog's
    endpoint, path style, keys and region, for that bucket alone (``fs.s3a.bucket.<b>.*``), so
    the checkpoint is written where and as the table is. A key the user set in ``given``
    (Spark settings, globally or for the bucket) stays theirs; a checkpoint elsewhere, or a
    catalog without S3 keys (the pods' own identity), gets nothing."""
    warehouse = catalog.warehouse or ""
    bucket = location.removeprefix("s3a://").split("/", 1)[0]
    if (
        not location.startswith("s3a://")
        or not warehouse.startswith(("s3://", "s3a://"))
        or (warehouse.split("://", 1)[1].split("/", 1)[0] != bucket)
    ):
        return {}
    props = catalog.properties
    conf = {}
    for prop, option in S3A_OPTIONS.items():
        scoped = f"spark.hadoop.fs.s3a.bucket.{bucket}.{option}"
        if prop in props and not {scoped, f"spark.hadoop.fs.s3a.{option}"} & set(given):
            conf[scoped] = props[prop]
    if conf.get(f"spark.hadoop.fs.s3a.bucket.{bucket}.session.token"):
        conf[f"spark.hadoop.fs.s3a.bucket.{bucket}.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    return conf


def pyiceberg_properties(catalog: CatalogSpec) -> dict[str, str]:
    props = catalog.properties
    result: dict[str, str] = dict(props)
    if catalog.type == "sql":
        result["uri"] = sqlalchemy_uri(catalog.uri or "", props)
    else:
        result["type"] = catalog.type
        if catalog.uri:
            result["uri"] = catalog.uri
    if catalog.warehouse:
        result["warehouse"] = catalog.warehouse
    if props.get("s3.path-style-access") == "true":
        result["s3.force-virtual-addressing"] = "false"
    if "client.region" in props:
        result.setdefault("s3.region", props["client.region"])
    result.update(_adls_arrow_properties(catalog))
    result.setdefault("py-io-impl", "floe_sparkapp.fileio.ArrowFileIO")
    return result


def _adls_arrow_properties(catalog: CatalogSpec) -> dict[str, str]:
    """Iceberg's ADLS settings as PyIceberg's Arrow FileIO takes them, for the warehouse's
    account (``abfs[s]://container@account-host/...``): the account's name (the shared key's, or
    the host's first label) and key, and an endpoint of the account's own path (an emulator's,
    ``http://host:port/account``) as its Blob and Data Lake authorities."""
    if warehouse_scheme(catalog) not in ("abfs", "abfss"):
        return {}
    props = catalog.properties
    host = urlparse(catalog.warehouse or "").netloc.rsplit("@", 1)[-1]
    result = {"adls.account-name": props.get(ADLS_SHARED_KEY_NAME) or host.split(".", 1)[0]}
    if ADLS_SHARED_KEY in props:
        result["adls.account-key"] = props[ADLS_SHARED_KEY]
    endpoint = urlparse(props.get(ADLS_ENDPOINT_PREFIX + host, ""))
    if endpoint.netloc and endpoint.path.strip("/"):
        for service in ("blob", "dfs"):
            result[f"adls.{service}-storage-authority"] = endpoint.netloc
            result[f"adls.{service}-storage-scheme"] = endpoint.scheme
    return {key: value for key, value in result.items() if key not in props}


def load_catalog(catalog: CatalogSpec) -> Any:
    """The catalog opened with PyIceberg (which then writes version 3 tables' metadata)."""
    format_v3.enable()
    props = pyiceberg_properties(catalog)
    if catalog.type == "sql":
        return _sql_catalog(catalog.name, props)
    from pyiceberg.catalog import load_catalog as load

    return load(catalog.name, **props)


def _sql_catalog(name: str, props: dict[str, str]) -> Any:
    """PyIceberg's SqlCatalog, which makes the catalog's tables in its database on first use.
    Two processes opening a new catalog at once (the operator and a reader, or two of the
    operator's visits) both find the tables absent and both create them: the slower one fails
    with "already exists" (SQLite) or a duplicate key (PostgreSQL), and finds them made when it
    opens the catalog again."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import DatabaseError

    try:
        return SqlCatalog(name, **props)
    except DatabaseError as error:
        if "already exists" not in str(error) and "duplicate key" not in str(error):
            raise
        return SqlCatalog(name, **props)


def register_in(spark: Any, catalog: CatalogSpec) -> None:
    """Registers the catalog in a running SparkSession (catalogs load lazily by name)."""
    for key, value in spark_conf(catalog).items():
        spark.conf.set(key, value)
