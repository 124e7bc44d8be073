"""floe Spark job: lands a Kafka topic in an Iceberg table."""

from importlib import metadata


def version() -> str:
    """floe's version, as installed (``unknown`` when run from a source tree alone)."""
    try:
        return metadata.version("floe")
    except metadata.PackageNotFoundError:
        return "unknown"
