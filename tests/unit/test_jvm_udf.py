"""How the job reaches Java classes through py4j: each by its full name, once per JVM view."""

from __future__ import annotations

import pytest

from floe_sparkapp.jvm_udf import java

pytestmark = pytest.mark.unit


class View:
    """A JVM view that counts what py4j would be asked: each attribute is one lookup."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> object:
        self.asked.append(name)
        return ("class", name)


def test_a_class_is_asked_for_once_by_its_full_name():
    view = View()
    assert java("org.apache.iceberg.spark.Spark3Util", view) == (
        "class",
        "org.apache.iceberg.spark.Spark3Util",
    )
    java("org.apache.iceberg.spark.Spark3Util", view)
    java("org.apache.hadoop.fs.Path", view)
    # not "org", "org.apache", ...: prefixes that are no class, each a failed search of every jar
    assert view.asked == ["org.apache.iceberg.spark.Spark3Util", "org.apache.hadoop.fs.Path"]


def test_another_view_asks_again():  # a gateway made again: the classes of the old one are gone
    first, second = View(), View()
    java("java.util.HashMap", first)
    java("java.util.HashMap", second)
    assert second.asked == ["java.util.HashMap"]
