"""One Iceberg catalog, seen the same way from Spark and from PyIceberg.

The embedded default is a SQL catalog on SQLite: Spark uses Iceberg's ``JdbcCatalog`` and
PyIceberg its ``SqlCatalog`` on the same database file, under the same catalog name (both
key their ``iceberg_tables`` rows by it).  The warehouse is a local directory or an S3 bucket.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class S3Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(description="S3 endpoint URL, e.g. http://127.0.0.1:9000")
    access_key_id: str
    secret_access_key: str = Field(repr=False)
    region: str = "us-east-1"
    path_style_access: bool = True


class SqliteCatalog(BaseModel):
    """A SQL catalog on a SQLite file, with a local or S3 warehouse."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    database: Path
    warehouse: str = Field(description="file:///path or s3://bucket/prefix")
    s3: S3Settings | None = None

    def spark_conf(self) -> dict[str, str]:
        """Spark settings that register this catalog under ``spark.sql.catalog.<name>``."""
        prefix = f"spark.sql.catalog.{self.name}"
        conf = {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            f"{prefix}.uri": f"jdbc:sqlite:{self.database}",
            f"{prefix}.jdbc.schema-version": "V1",
            f"{prefix}.warehouse": self.warehouse,
        }
        if self.s3 is not None:
            conf.update({
                f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                f"{prefix}.s3.endpoint": self.s3.endpoint,
                f"{prefix}.s3.path-style-access": str(self.s3.path_style_access).lower(),
                f"{prefix}.s3.access-key-id": self.s3.access_key_id,
                f"{prefix}.s3.secret-access-key": self.s3.secret_access_key,
                f"{prefix}.client.region": self.s3.region,
            })
        return conf

    def pyiceberg_properties(self) -> dict[str, str]:
        props = {"uri": f"sqlite:///{self.database}", "warehouse": self.warehouse}
        if self.s3 is not None:
            props.update({
                "s3.endpoint": self.s3.endpoint,
                "s3.access-key-id": self.s3.access_key_id,
                "s3.secret-access-key": self.s3.secret_access_key,
                "s3.region": self.s3.region,
                "s3.force-virtual-addressing": "false",
            })
        return props

    def load_pyiceberg(self):
        """The same catalog opened with PyIceberg's SqlCatalog."""
        from pyiceberg.catalog.sql import SqlCatalog

        self.database.parent.mkdir(parents=True, exist_ok=True)
        return SqlCatalog(self.name, **self.pyiceberg_properties())

    def register_in(self, spark) -> None:
        """Registers the catalog in a running SparkSession (catalogs load lazily by name)."""
        self.database.parent.mkdir(parents=True, exist_ok=True)
        for key, value in self.spark_conf().items():
            spark.conf.set(key, value)
