"""``flow-jobs validate`` without ``--plan`` refuses, without a JVM or a broker, what the
run would refuse in Spark: a type Spark does not have, an event time of the wrong
type, a column a window, join or dedup reads that its source lacks; each error one line
naming the file, the key and what to do. ``--plan``'s own errors name the file too."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.spec import SpecError, load_spec


def window_spec(schema: str, **window: Any) -> dict[str, Any]:
    return {
        "name": "sensor-sessions",
        "sources": [{"name": "readings", "topic": "readings",
                     "bootstrap_servers": "127.0.0.1:9092", "schema": schema}],
        "transform": {"window": {"kind": "session", "gap_ms": 60_000,
                                 "event_time_column": "ts", "group_by": ["sensor"],
                                 "aggregations": [{"agg": "avg", "column": "temp",
                                                   "as": "avg_temp"}], **window}},
        "target": {"kind": "delta", "path": "./data/sensor_sessions"},
    }  # fmt: skip


def join_spec(left_ts: str, right_ts: str) -> dict[str, Any]:
    return {
        "name": "orders-payments",
        "sources": [
            {"name": "orders", "topic": "o", "bootstrap_servers": "b:9092",
             "schema": f"order_id STRING, ts {left_ts}"},
            {"name": "payments", "topic": "p", "bootstrap_servers": "b:9092",
             "schema": f"order_id STRING, paid_at {right_ts}"},
        ],
        "transform": {"join": {"kind": "stream_stream_join", "left_source": "orders",
                               "right_source": "payments", "left_keys": ["order_id"],
                               "right_keys": ["order_id"], "time_window_ms": 1000,
                               "event_time_column": "ts",
                               "right_event_time_column": "paid_at"}},
        "target": {"kind": "delta", "path": "./data/orders_payments"},
    }  # fmt: skip


def write(folder: Path, doc: dict[str, Any], name: str = "spec.toml") -> Path:
    path = folder / name
    path.write_text(tomli_w.dumps(doc))
    return path


def validate(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["validate", str(path), *flags])
    out = capsys.readouterr()
    return code, out.err + out.out


def test_a_misspelt_type_is_refused_without_starting_a_jvm(tmp_path: Path) -> None:
    path = write(tmp_path, window_spec("sensor STRING, temp DOUBL, ts BIGINT"))
    probe = textwrap.dedent(
        f"""
        import sys, time
        started = time.monotonic()
        from flow_jobs.cli import main
        code = main(["validate", {str(path)!r}])
        from pyspark import SparkContext
        jvm = SparkContext._gateway is not None or SparkContext._active_spark_context is not None
        print(f"exit={{code}} jvm={{jvm}} seconds={{time.monotonic() - started:.1f}}")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.startswith("exit=1 jvm=False "), done.stdout
    assert done.stderr.splitlines() == [
        f"error: {path}: sources[0].schema: DOUBL (column temp) is not a Spark SQL type "
        "(did you mean DOUBLE?); use one of STRING, BOOLEAN, INT, BIGINT, DOUBLE, "
        "DECIMAL(p,s), DATE, TIMESTAMP, TIMESTAMP_NTZ, BINARY, ARRAY<T>, MAP<K,V>, "
        "STRUCT<name: T, ...>"
    ]


def test_a_string_event_time_is_refused_saying_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, window_spec("sensor STRING, temp DOUBLE, ts STRING"))
    code, out = validate(path, capsys)
    assert code == 1
    assert out.splitlines() == [
        f"error: {path}: transform.window.event_time_column: 'ts' is STRING in "
        "sources[0].schema; an event time is a TIMESTAMP or epoch milliseconds (BIGINT, "
        "INT, SMALLINT, TINYINT): declare it TIMESTAMP (ISO-8601 text) or BIGINT (epoch "
        "milliseconds) in sources[0].schema, or compute a TIMESTAMP under another name in "
        "[transform].sql (e.g. SELECT *, to_timestamp(ts) AS event_time FROM readings) "
        "and name that column here"
    ]
    # A SQL cast under the same name does not help: the source checks its own column.
    doc = window_spec("sensor STRING, temp DOUBLE, ts STRING")
    doc["transform"]["sql"] = "SELECT sensor, temp, to_timestamp(ts) AS ts FROM readings"
    with pytest.raises(SpecError, match="'ts' is STRING in sources"):
        load_spec(write(tmp_path, doc, "cast.toml"))
    for good in ("TIMESTAMP", "TIMESTAMP_NTZ", "BIGINT", "INT", "SMALLINT", "TINYINT"):
        load_spec(write(tmp_path, window_spec(f"sensor STRING, temp DOUBLE, ts {good}"), "ok.toml"))
    load_spec(write(tmp_path, window_spec("sensor STRING, temp DOUBLE, ts STRING",
                                          time_mode="processing", event_time_column="_event_ts"),
                    "processing.toml"))  # fmt: skip


@pytest.mark.parametrize(
    ("left", "right", "key", "column", "declared", "where"),
    [
        ("DOUBLE", "BIGINT", "transform.join.event_time_column", "ts", "DOUBLE", "sources[0]"),
        ("TIMESTAMP", "DATE", "transform.join.right_event_time_column", "paid_at", "DATE",
         "sources[1]"),
    ],
)  # fmt: skip
def test_a_join_side_s_event_time_of_another_type_is_refused(
    left: str, right: str, key: str, column: str, declared: str, where: str
) -> None:
    with pytest.raises(SpecError) as refused:
        load_spec_from(join_spec(left, right))
    assert str(refused.value) == (
        f"spec.toml: {key}: {column!r} is {declared} in {where}.schema; an event time is a "
        "TIMESTAMP or epoch milliseconds (BIGINT, INT, SMALLINT, TINYINT): declare it "
        f"TIMESTAMP (ISO-8601 text) or BIGINT (epoch milliseconds) in {where}.schema"
    )
    load_spec_from(join_spec("TIMESTAMP", "BIGINT"))


def test_a_dedup_key_its_source_lacks_is_refused_even_beside_sql() -> None:
    doc = window_spec("sensor STRING, temp DOUBLE, ts BIGINT")
    doc["transform"]["sql"] = "SELECT *, upper(sensor) AS reading_id FROM readings"
    doc["transform"]["dedup"] = [{"keys": ["sensor", "reading_id"], "within_ms": 1000}]
    with pytest.raises(SpecError) as refused:
        load_spec_from(doc)
    assert str(refused.value) == (
        "spec.toml: transform.dedup[0].keys[1]: 'reading_id' is not a column of source "
        "'readings' (its view: sensor, temp, ts, _event_ts); a dedup runs before "
        "[transform].sql, on the source's own columns"
    )
    doc["transform"]["dedup"] = [{"keys": ["sensor", "_event_ts"], "within_ms": 1000}]
    load_spec_from(doc)


NUMBERS_OR_NOT = ["STRING", "BOOLEAN", "TIMESTAMP", "DATE", "INTERVAL DAY", "BINARY",
                  "ARRAY<INT>", "TINYINT", "INT", "BIGINT", "FLOAT", "DOUBLE",
                  "DECIMAL(5,2)"]  # fmt: skip


def test_sum_and_avg_of_a_declared_column_that_is_not_a_number_are_refused(
    spark: SparkSession,
) -> None:
    """As the plan refuses them (``aggregation_input``, on a frame of that type), with
    the same key and words."""
    from flow_jobs.aggregations import aggregation_input
    from flow_jobs.errors import PlanError
    from flow_jobs.spec.models import Aggregation

    for declared in NUMBERS_OR_NOT:
        for agg in ("sum", "avg", "max"):
            doc = window_spec(f"sensor STRING, temp {declared}, ts BIGINT")
            doc["transform"]["window"]["aggregations"] = [
                {"agg": "count", "as": "n"}, {"agg": agg, "column": "temp", "as": "t"}]  # fmt: skip
            frame = spark.createDataFrame([], f"temp {declared}")
            try:
                aggregation_input(Aggregation(agg=agg, column="temp", as_="t"), 1, frame)
                planned = None
            except PlanError as e:
                planned = str(e)
            try:
                load_spec_from(doc)
                loaded = None
            except SpecError as e:
                loaded = str(e)
            fix = "declare it a number in the source's schema, or cast it in [transform].sql"
            expected = None if planned is None else f"spec.toml: {planned}: {fix}"
            assert loaded == expected, (declared, agg)
    assert planned is None  # DECIMAL: a number
    refused = "aggregations[0].column: avg needs a numeric column; 'temp' is string: declare"
    with pytest.raises(SpecError, match=re.escape(refused)):
        load_spec_from(window_spec("sensor STRING, temp STRING, ts BIGINT"))


def test_the_python_facade_refuses_the_same() -> None:
    from pydantic import ValidationError

    from flow_jobs import Source

    with pytest.raises(ValidationError, match=r"DOUBL \(column temp\) is not a Spark SQL type"):
        Source(name="r", topic="r", bootstrap_servers="b:9092", schema="temp DOUBL")


def test_the_sql_cast_validate_advises_compiles(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the STRING event time's error tells a user to write, ``--plan`` takes."""
    doc = window_spec("sensor STRING, temp DOUBLE, ts STRING", event_time_column="event_time")
    doc["transform"]["sql"] = "SELECT *, to_timestamp(ts) AS event_time FROM readings"
    doc["checkpoint"] = {"location": str(tmp_path / "checkpoint")}
    code, out = validate(write(tmp_path, doc), capsys, "--plan")
    assert code == 0, out
    assert "plan (each part of the pipeline -> what runs it):" in out


def test_a_plan_error_names_the_file_in_one_line(tmp_path: Path) -> None:
    """``--plan`` in a process of its own, as a user runs it: the error names the file,
    and no log record of PySpark's with the JVM's stack trace comes before it."""
    doc = window_spec("sensor STRING, temp DOUBLE, ts BIGINT")
    doc["transform"]["sql"] = "SELECT *, nope FROM readings"
    doc["spark"] = {"master": "local[1]", "conf": {"spark.ui.enabled": "false"}}
    doc["checkpoint"] = {"location": str(tmp_path / "checkpoint")}
    path = write(tmp_path, doc)
    done = subprocess.run(
        [sys.executable, "-m", "flow_jobs.cli", "validate", str(path), "--plan"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "WARNING: Using incubator" not in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(
        f"error: {path}: transform.sql: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, "
        "variable, or function parameter with name `nope` cannot be resolved."
    )


def load_spec_from(doc: dict[str, Any]) -> Any:
    from flow_jobs.spec import parse_spec

    return parse_spec(tomli_w.dumps(doc), "spec.toml")
