"""``flow-jobs validate --plan`` says what compiled: each line comes from a compiled
part or a writer, and is checked here against what Spark holds and what a run would
use, not against the words themselves: the options each Kafka scan hands its reader
(read from the query's logical plan), the operators in that plan, the dead-letter
observations in it, and the target writer the runner builds. Every shipped pipeline,
each target kind, and the sources' decoders."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from flow_jobs.aggregations import AGGREGATORS
from flow_jobs.combine.decide import MARKER
from flow_jobs.dead_letters import OBSERVATION_PREFIX
from flow_jobs.kafka.combine import CombinePlan
from flow_jobs.one_line import pipeline_summary
from flow_jobs.plan.windows import STATE_STORE_PROVIDER
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.sinks import SINKS
from flow_jobs.sinks.delta import DeltaMergeSink
from flow_jobs.sinks.iceberg import IcebergSink
from flow_jobs.sinks.kafka import KafkaProduceSink
from flow_jobs.sinks.postgres import PostgresUpsertSink
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.spec.windows import ENGINES

PIPELINES = Path(__file__).parent.parent / "pipelines"
SPECS = sorted(PIPELINES.glob("*.toml"))
CLICKS = PIPELINES / "clicks_per_minute.toml"
#: What each writer's line may not say: another writer's way of writing.
FOREIGN = {
    DeltaMergeSink: ("ON CONFLICT", "producer"),
    PostgresUpsertSink: ("MERGE", "producer", "deltalake"),
    KafkaProduceSink: ("MERGE", "ON CONFLICT", "deltalake"),
    IcebergSink: ("MERGE", "ON CONFLICT", "producer", "deltalake"),
}
AVRO_CLICK = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "fields": [
            {"name": "user_id", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "ts", "type": "long"},
        ],
    }
)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLOW_DATA_DIR", str(tmp_path))
    return tmp_path


def reader_options(frame: DataFrame) -> dict[str, dict[str, str]]:
    """The options of each Kafka scan in the query's logical plan, by source name: what
    Spark hands each reader."""
    found: dict[str, dict[str, str]] = {}
    leaves = frame._jdf.queryExecution().analyzed().collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        if leaf.getClass().getSimpleName() == "StreamingRelationV2":
            options = dict(leaf.extraOptions().asCaseSensitiveMap())
            found[options["source_name"]] = options
    return found


def folds(options: dict[str, str]) -> CombinePlan | None:
    """The plan a reader folds with, if it folds."""
    combine = options.get("combine")
    plan = CombinePlan.from_json(combine) if combine else None
    return plan if plan is not None and plan.fold else None


def check_plan_lines(runner: PipelineRunner, spark: SparkSession) -> dict[str, str]:
    """Every line of the runner's plan checked against the query and the writers; the
    lines by part."""
    spec, frame = runner.spec, runner.compiled.frame
    lines = runner.describe()
    by_part = {line.part: line.how for line in lines}
    assert len(by_part) == len(lines), [line.part for line in lines]
    assert all(line.how for line in lines)
    plan = frame._jdf.queryExecution().analyzed().toString()
    scans = reader_options(frame)
    assert set(scans) == {s.name for s in spec.sources}

    for source in spec.sources:
        options, read = scans[source.name], by_part[f"source {source.name}"]
        in_reader = "json_schema" in options or "payload_format" in options
        assert ("decoded in the reader" in read) == in_reader, read
        by_from_json = source.format == "json" or (source.changes and not source.registry_format)
        assert ("from_json in the JVM" in read) == by_from_json, read
        assert ("Debezium change events" in read) == source.changes, read
        assert ("folded into partials in the reader" in read) == bool(folds(options)), read
        assert source.topic in read

    folding = [folds(o) for o in scans.values() if folds(o) is not None]
    if "pre-aggregation" in by_part:
        assert by_part["pre-aggregation"].startswith("on:") == bool(folding)
    if spec.transform.sql:
        in_reader = bool(folding) and folding[0].stage is not None
        assert ("in the Kafka reader" in by_part["[transform].sql"]) == in_reader

    if spec.has_window:
        w = spec.window
        # the window is the query's last operator: the state API's node, or a
        # projection over Spark's aggregation
        on_state_api = plan.lstrip("~'").startswith("TransformWithStateIn")
        assert on_state_api or "Aggregate [" in plan
        (window,) = [how for part, how in by_part.items() if part.startswith("window: ")]
        assert ("transformWithStateInPandas" in window) == on_state_api, window
        assert ("Spark's streaming aggregation" in window) == (not on_state_api), window
        assert f"output mode {runner.compiled.output_mode}" in by_part[f"emit = {w.emit}"]
        for a in w.aggregations:
            unit = AGGREGATORS[a.agg]
            form = unit.state_form if on_state_api else unit.native_form
            assert by_part[f"{a.as_} = {a.agg}({a.column or ''})"] == form
        provider = spark.conf.get(STATE_STORE_PROVIDER, None) or "HDFSBackedStateStoreProvider"
        assert f"({provider.rsplit('.', 1)[-1]})" in by_part["state"]
        assert ENGINES["state" if on_state_api else "native"] in pipeline_summary(spec)

    dead = by_part["dead letters"]
    taps = set(re.findall(rf"CollectMetrics {re.escape(OBSERVATION_PREFIX)}([^,\s]+)", plan))
    assert taps, plan[:2000]
    for tap in taps:
        assert tap.removesuffix(":late") in dead, (tap, dead)
    table = runner.dead_letters
    if table.store_schema is not None:
        assert "ON CONFLICT DO NOTHING" in dead and "MERGE" not in dead, dead
    else:
        assert f"MERGE with deltalake into {table.path}" in dead, dead

    target = runner._target(None)
    written = by_part[f"target {spec.target.kind}"]
    assert type(target) is SINKS.get(spec.target.kind)
    assert SINKS.get(spec.target.kind).WRITES in pipeline_summary(spec)
    for word in FOREIGN[type(target)]:
        assert word not in written, (word, written)
    keys = ", ".join(runner.compiled.natural_key)
    deletes = "the rows a batch's deletes name by their key deleted in the same write"
    assert (deletes in written) == runner.deletes_flagged, written
    if isinstance(target, DeltaMergeSink):
        assert f"deltalake MERGE into {target.table.path} on ({keys})" in written
        assert "application transaction" in written  # once by the table's own txn id
    if isinstance(target, PostgresUpsertSink):
        assert f"ON CONFLICT ({keys})" in written and target.description in written
        assert "one transaction with the batch's ledger row" in written  # once_by "ledger"
    if isinstance(target, IcebergSink):
        assert f"pyiceberg commit to {target.spec.describe()} on ({keys})" in written
        region = (  # what it reads of the table
            "rows of the keys the batch names"
            if runner.deletes_flagged
            else "range of window_start, window_end"
        )
        assert region in written
        assert "table property flow-jobs.batch." in written  # once by the table's own record
    if isinstance(target, KafkaProduceSink):
        assert target.spec.topic in written and "enable.idempotence" in written
        assert f"natural key ({keys})" in written and "repeats the batch" in written
    return by_part


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_each_plan_line_of_a_shipped_pipeline_says_what_compiled(
    path: Path, spark: SparkSession, data_dir: Path
) -> None:
    check_plan_lines(PipelineRunner(load_spec(path), spark), spark)


def _variant(path: Path, **changes: Any) -> PipelineSpec:
    """A shipped spec with some top-level keys replaced."""
    return PipelineSpec.model_validate({**load_spec(path).to_document(), **changes})


@pytest.mark.parametrize(
    "target",
    [
        {"kind": "postgres", "table": "clicks_per_minute"},
        {"kind": "kafka", "topic": "clicks-per-minute", "bootstrap_servers": "127.0.0.1:9092"},
        {"kind": "iceberg", "table": "analytics.clicks_per_minute"},
    ],
    ids=lambda t: t["kind"],
)
def test_the_target_line_is_its_writers_way_of_writing(
    target: dict[str, str], spark: SparkSession, data_dir: Path
) -> None:
    """A Postgres target upserts in the ledger row's transaction and a Kafka one
    produces: neither says MERGE (the Delta target: every shipped pipeline)."""
    spec = _variant(CLICKS, target=target, dead_letter={"kind": "state_store"})
    by_part = check_plan_lines(PipelineRunner(spec, spark), spark)
    assert "state store" in by_part["dead letters"]


@pytest.mark.parametrize(
    "changes",
    [
        {"decoder": "from_json"},
        {"schema": "user_id STRING, page STRING, amount DOUBLE, ts BIGINT, at TIMESTAMP"},
        {"format": "avro", "avro_schema": AVRO_CLICK, "schema": None},
    ],
    ids=["decoder-from-json", "timestamp-field", "avro"],
)
def test_a_source_line_says_where_its_records_are_decoded(
    changes: dict[str, Any], spark: SparkSession, data_dir: Path
) -> None:
    """Decoded in the reader (Arrow's JSON decode, a registry format's decoder) exactly
    where the reader is given a schema to decode with; by from_json otherwise."""
    document = load_spec(CLICKS).to_document()
    source = {**document["sources"][0], **changes}
    document["sources"][0] = {k: v for k, v in source.items() if v is not None}
    runner = PipelineRunner(PipelineSpec.model_validate(document), spark)
    read = check_plan_lines(runner, spark)["source clicks"]
    if changes.get("format") == "avro":
        assert "Avro decoded in the reader" in read
    else:
        assert "JSON decoded by from_json in the JVM" in read


def test_a_checkpoint_that_merges_partials_without_folding_says_so(
    spark: SparkSession, data_dir: Path
) -> None:
    """pre_aggregate = false on a checkpoint marked for partials: the reader is told the
    plan but folds nothing, and the lines say that, not "on"."""
    document = load_spec(CLICKS).to_document()
    document["transform"]["window"]["pre_aggregate"] = False
    spec = PipelineSpec.model_validate(document)
    checkpoint = Path(spec.checkpoint_location())
    checkpoint.mkdir(parents=True)
    (checkpoint / MARKER).write_text("partials\n")
    runner = PipelineRunner(spec, spark)
    assert "combine" in reader_options(runner.compiled.frame)["clicks"]
    by_part = check_plan_lines(runner, spark)
    assert by_part["pre-aggregation"].startswith("off (pre_aggregate = false)")


@pytest.mark.parametrize(
    ("path", "dedup"),
    [
        (PIPELINES / "visits.toml", {"keys": ["user_id", "page"], "within_ms": 1000}),
        (
            PIPELINES / "orders_payments_join.toml",
            {"source": "payments", "keys": ["payment_id"], "within_ms": 60_000},
        ),
    ],
    ids=["window", "join-side"],
)
@pytest.mark.parametrize("on_duplicate", ["drop", "dlq"])
def test_a_dedup_line_says_where_its_duplicates_go(
    path: Path, dedup: dict[str, Any], on_duplicate: str, spark: SparkSession, data_dir: Path
) -> None:
    """Dead-lettered exactly where the plan taps the source's duplicates."""
    document = load_spec(path).to_document()
    document["transform"]["dedup"] = [{**dedup, "on_duplicate": on_duplicate}]
    runner = PipelineRunner(PipelineSpec.model_validate(document), spark)
    by_part = check_plan_lines(runner, spark)
    (line,) = [how for part, how in by_part.items() if part.startswith("dedup ")]
    source = dedup.get("source", "clicks")
    plan = runner.compiled.frame._jdf.queryExecution().logical().toString()
    tapped = f"CollectMetrics {OBSERVATION_PREFIX}{source}:duplicates" in plan
    assert ("dead-lettered" in line) == tapped, line
    assert tapped == (on_duplicate == "dlq")


NEXMARK = Path(__file__).parent.parent / "bench" / "nexmark" / "queries"


@pytest.mark.parametrize("query", ["q0", "q2", "q8"])
def test_the_nexmark_stages_say_what_compiled(
    query: str, spark: SparkSession, data_dir: Path
) -> None:
    """The append stage (q0, q2) and the window join (q8): their lines say what the
    query's plan holds."""
    env = {"NEXMARK_DIR": str(data_dir)}
    runner = PipelineRunner(load_spec(NEXMARK / f"{query}.sql", env=env), spark)
    by_part = check_plan_lines(runner, spark)
    plan = runner.compiled.frame._jdf.queryExecution().analyzed().toString()
    if query == "q8":
        line = by_part["semi window join of person and auction on id = seller in tumbling "
                       "10000 ms windows"]  # fmt: skip
        assert "TransformWithStateIn" in plan and "transformWithStateInPandas" in line
        assert runner.compiled.natural_key == ("starttime", "join_row_id")
        assert "each row of" not in pipeline_summary(runner.spec)
        return
    line = by_part["append each row once"]
    # no state: no aggregation, join or state-API node anywhere in the plan
    for node in ("Aggregate", "Join", "TransformWithState", "Deduplicate"):
        assert node not in plan, node
    assert "no state and no watermark" in line and "the SQL's rows" in line
    assert "Spark SQL over the source's view" in by_part["[transform].sql"]
    assert runner.compiled.natural_key == ("row_id",)
    assert pipeline_summary(runner.spec).find("each row of bid appended once") > 0
