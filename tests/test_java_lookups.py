"""py4j's lookups kept (flow_jobs.java.keep_lookups): a class and a static method are
asked for once, a field's value each time, and what PySpark asks for by a short name
answers as before."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flow_jobs.java import java_class


def test_classes_and_static_methods_are_asked_for_once(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    utils = jvm.PythonUtils  # PySpark's short name, through the view's imports
    assert utils is jvm.PythonUtils
    assert "PythonUtils" in vars(jvm)
    to_seq = utils.toSeq
    assert to_seq is utils.toSeq
    assert list(to_seq([1, 2]).toList().toString()) == list("List(1, 2)")
    system = java_class(jvm, "java.lang.System")
    assert system is java_class(jvm, "java.lang.System")


def test_a_field_is_read_each_time(spark: SparkSession) -> None:
    integer = java_class(spark.sparkContext._jvm, "java.lang.Integer")
    assert integer.MAX_VALUE == 2**31 - 1
    assert "MAX_VALUE" not in vars(integer)


def test_a_nested_class_is_kept_as_a_class(spark: SparkSession) -> None:
    outer = java_class(spark.sparkContext._jvm, "java.util.AbstractMap")
    entry = outer.SimpleEntry
    assert entry is outer.SimpleEntry
    assert entry("k", 1).getValue() == 1


def test_columns_built_through_kept_lookups_compute_as_before(spark: SparkSession) -> None:
    frame = spark.range(3)
    assert frame.select(F.sum(F.col("id") * F.lit(2))).first()[0] == 6
    rows = frame.select(F.array(F.lit(1), F.col("id")).alias("a")).orderBy("id").collect()
    assert [r["a"] for r in rows] == [[1, 0], [1, 1], [1, 2]]
