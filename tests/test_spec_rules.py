"""Every config-time rule rejects the spec at load, naming the key and the value."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flow_jobs.cli import main
from flow_jobs.spec import SpecError, load_spec, parse_spec

VALID = """
name = "rules-check"

[[sources]]
name = "events"
kind = "kafka"
topic = "events"
bootstrap_servers = "127.0.0.1:9092"
format = "json"
schema = "user_id STRING, amount DOUBLE, ts BIGINT"

[transform.window]
kind = "tumbling"
duration_ms = 60000
event_time_column = "ts"
lateness_ms = 5000
group_by = ["user_id"]

[[transform.window.aggregations]]
agg = "count"
as = "n"

[[transform.window.aggregations]]
agg = "sum"
column = "amount"
as = "amount_sum"

[target]
kind = "delta"
path = "./data/rules"
"""


JOIN = """
[transform.join]
kind = "stream_stream_join"
left_source = "events"
right_source = "payments"
left_keys = ["user_id"]
right_keys = ["user_id"]
time_window_ms = 1000
"""
PAYMENTS = """
[[sources]]
name = "payments"
topic = "payments"
bootstrap_servers = "127.0.0.1:9092"
schema = "user_id STRING, paid DOUBLE, ts BIGINT"
"""


def edit(old: str, new: str, text: str = VALID) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


KAFKA_TARGET = edit(
    '[target]\nkind = "delta"\npath = "./data/rules"',
    '[target]\nkind = "kafka"\ntopic = "out"\nbootstrap_servers = "127.0.0.1:9092"',
)


WINDOW = '[transform.window]\nkind = "tumbling"\nduration_ms = 60000'
REOPEN_KEYS = 'lateness_ms = 5000\nlate_data = "reopen"\nallowed_lateness_ms = 1000'
REOPEN = edit("lateness_ms = 5000", REOPEN_KEYS)

# (case, spec text, the key the message must name, a fragment of the message)
RULES = [
    (
        "hop_ms required for hopping",
        edit('kind = "tumbling"', 'kind = "hopping"'),
        "transform.window.hop_ms",
        'required when kind = "hopping"',
    ),
    (
        "hop_ms above duration_ms",
        edit('kind = "tumbling"', 'kind = "hopping"\nhop_ms = 90000'),
        "transform.window.hop_ms",
        "hop_ms = 90000 must be <= duration_ms = 60000",
    ),
    (
        "hop_ms on a tumbling window",
        edit("duration_ms = 60000", "duration_ms = 60000\nhop_ms = 1000"),
        "transform.window.hop_ms",
        'only valid for kind = "hopping"',
    ),
    (
        "as is required",
        edit('agg = "count"\nas = "n"', 'agg = "count"'),
        "transform.window.aggregations[0].as",
        "required",
    ),
    (
        "aliases are unique",
        edit('as = "amount_sum"', 'as = "n"'),
        "transform.window.aggregations",
        "aggregations[1].as = 'n' repeats aggregations[0].as",
    ),
    (
        "alias equal to a group_by column",
        edit('as = "amount_sum"', 'as = "user_id"'),
        "transform.window.aggregations",
        "aggregations[1].as = 'user_id' equals a group_by column",
    ),
    (
        "alias equal to a window column",
        edit('as = "amount_sum"', 'as = "window_start"'),
        "transform.window.aggregations",
        "'window_start' equals a window column",
    ),
    (
        "count_distinct exact without a cap",
        edit(
            'agg = "sum"\ncolumn = "amount"',
            'agg = "count_distinct"\ncolumn = "amount"\nmode = "exact"',
        ),
        "transform.window.aggregations[1].max_distinct_values_per_group",
        "required",
    ),
    (
        "reopen without allowed_lateness_ms",
        edit("lateness_ms = 5000", 'lateness_ms = 5000\nlate_data = "reopen"'),
        "transform.window.allowed_lateness_ms",
        'required when late_data = "reopen"',
    ),
    (
        "reopen on a count window",
        edit(
            'kind = "tumbling"\nduration_ms = 60000',
            'kind = "count_tumbling"\ncount = 3\nlate_data = "reopen"\nallowed_lateness_ms = 9',
        ),
        "transform.window.late_data",
        'late_data = "reopen" is not supported for kind = "count_tumbling"',
    ),
    (
        "late_data dlq in processing time",
        edit(
            'event_time_column = "ts"\nlateness_ms = 5000',
            'time_mode = "processing"\nlateness_ms = 5000\nlate_data = "dlq"',
        ),
        "transform.window.late_data",
        "none is ever late",
    ),
    (
        "late_data dlq on a window after a join",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit("lateness_ms = 5000", 'lateness_ms = 5000\nlate_data = "dlq"'),
        ).replace(
            "[target]",
            JOIN.replace(
                "[transform.join]", '[transform]\nchain = ["join", "window"]\n\n[transform.join]'
            )
            + "\n[target]",
        ),
        "transform.window",
        "after a join",
    ),
    (
        "late_data reopen on a session window",
        edit(
            'kind = "tumbling"\nduration_ms = 60000',
            'kind = "session"\ngap_ms = 60000\nlate_data = "reopen"\nallowed_lateness_ms = 1000',
        ),
        "transform.window.late_data",
        'late_data = "reopen" is not supported for kind = "session": a late row can merge',
    ),
    (
        "late_data reopen on a sliding window",
        edit('kind = "tumbling"', 'kind = "sliding"', REOPEN),
        "transform.window.late_data",
        'not supported for kind = "sliding"',
    ),
    (
        "late_data reopen in processing time",
        edit(
            'event_time_column = "ts"\nlateness_ms = 5000',
            'time_mode = "processing"\nlateness_ms = 5000\nlate_data = "reopen"\n'
            "allowed_lateness_ms = 1000",
        ),
        "transform.window.late_data",
        'late_data = "reopen" needs event time',
    ),
    (
        "late_data reopen with emit current",
        edit("lateness_ms = 5000", 'emit = "current"', REOPEN),
        "transform.window.late_data",
        'use emit = "final" with reopen',
    ),
    (
        "allowed_lateness_ms without reopen",
        edit("lateness_ms = 5000", "lateness_ms = 5000\nallowed_lateness_ms = 1000"),
        "transform.window.allowed_lateness_ms",
        'only valid with late_data = "reopen"',
    ),
    (
        "revision column named like an aggregate",
        edit('as = "n"', 'as = "revision"', REOPEN),
        "transform.window.aggregations",
        "'revision' equals a window column name",
    ),
    (
        "crash_recovery kafka_eos is reserved",
        edit("lateness_ms = 5000", 'lateness_ms = 5000\ncrash_recovery = "kafka_eos"'),
        "transform.window.crash_recovery",
        "'kafka_eos' is not supported yet",
    ),
    (
        "crash_recovery persisted is reserved",
        edit("lateness_ms = 5000", 'lateness_ms = 5000\ncrash_recovery = "persisted"'),
        "transform.window.crash_recovery",
        "'persisted' is not supported yet",
    ),
    (
        "on_state_cap drop_new_groups is reserved",
        edit("lateness_ms = 5000", 'lateness_ms = 5000\non_state_cap = "drop_new_groups"'),
        "transform.window.on_state_cap",
        "'drop_new_groups' is not supported yet",
    ),
    (
        "on_state_cap backpressure is reserved",
        edit("lateness_ms = 5000", 'lateness_ms = 5000\non_state_cap = "backpressure"'),
        "transform.window.on_state_cap",
        "'backpressure' is not supported yet",
    ),
    (
        "session needs gap_ms",
        edit('kind = "tumbling"\nduration_ms = 60000', 'kind = "session"'),
        "transform.window.gap_ms",
        'gap_ms is required when kind = "session"',
    ),
    (
        "session takes no duration_ms",
        edit('kind = "tumbling"', 'kind = "session"\ngap_ms = 1000'),
        "transform.window.duration_ms",
        'only valid for kind = "tumbling" or "hopping" or "sliding"',
    ),
    (
        "count windows need count",
        edit('kind = "tumbling"\nduration_ms = 60000', 'kind = "count_tumbling"'),
        "transform.window.count",
        'count is required when kind = "count_tumbling"',
    ),
    (
        "count_hopping needs step",
        edit('kind = "tumbling"\nduration_ms = 60000', 'kind = "count_hopping"\ncount = 5'),
        "transform.window.step",
        'step is required when kind = "count_hopping"',
    ),
    (
        "step above count",
        edit(
            'kind = "tumbling"\nduration_ms = 60000', 'kind = "count_hopping"\ncount = 5\nstep = 6'
        ),
        "transform.window.step",
        "step = 6 must be <= count = 5",
    ),
    (
        "step on a count_sliding window",
        edit(
            'kind = "tumbling"\nduration_ms = 60000', 'kind = "count_sliding"\ncount = 5\nstep = 2'
        ),
        "transform.window.step",
        'only valid for kind = "count_hopping"',
    ),
    (
        "count below 2",
        edit('kind = "tumbling"\nduration_ms = 60000', 'kind = "count_tumbling"\ncount = 1'),
        "transform.window.count",
        "greater than or equal to 2",
    ),
    (
        "emit current on session windows to kafka",
        edit(
            'kind = "tumbling"\nduration_ms = 60000',
            'kind = "session"\ngap_ms = 5\nemit = "current"',
            KAFKA_TARGET,
        ),
        "target.kind",
        'cannot take session windows with emit = "current"',
    ),
    (
        "hll_precision with exact mode",
        edit(
            'agg = "sum"\ncolumn = "amount"',
            'agg = "count_distinct"\ncolumn = "amount"\nmode = "exact"\n'
            "max_distinct_values_per_group = 10\nhll_precision = 12",
        ),
        "transform.window.aggregations[1].hll_precision",
        'only valid with agg = "count_distinct" and mode = "approximate"',
    ),
    (
        "hll_precision out of range",
        edit(
            'agg = "sum"\ncolumn = "amount"',
            'agg = "count_distinct"\ncolumn = "amount"\nhll_precision = 30',
        ),
        "transform.window.aggregations[1].hll_precision",
        "less than or equal to 21",
    ),
    (
        "keep_sketch on a sum",
        edit(
            'agg = "sum"\ncolumn = "amount"', 'agg = "sum"\ncolumn = "amount"\nkeep_sketch = true'
        ),
        "transform.window.aggregations[1].keep_sketch",
        'only valid with agg = "count_distinct"',
    ),
    (
        "a sketch column colliding with an alias",
        edit(
            'agg = "count"\nas = "n"',
            'agg = "count_distinct"\ncolumn = "user_id"\nkeep_sketch = true\nas = "u"\n\n'
            '[[transform.window.aggregations]]\nagg = "count"\nas = "u_sketch"',
        ),
        "transform.window.aggregations",
        "aggregations[1].as = 'u_sketch' repeats aggregations[0].as",
    ),
    (
        "reduce needs a reducer",
        edit(
            'agg = "sum"\ncolumn = "amount"',
            'agg = "reduce"\ninitializer = "m:f"\nresult_type = "double"',
        ),
        "transform.window.aggregations[1].reducer",
        'reducer is required for agg = "reduce"',
    ),
    (
        "reduce functions are import paths",
        edit(
            'agg = "sum"\ncolumn = "amount"',
            'agg = "reduce"\ninitializer = "not a path"\nreducer = "m:f"\nresult_type = "double"',
        ),
        "transform.window.aggregations[1].initializer",
        "is not an import path (module:function)",
    ),
    (
        "a postgres lookup needs a table",
        edit(
            "[transform.window]",
            '[transform]\nsql = "SELECT * FROM events"\n\n[[transform.lookups]]\nname = "users"\n'
            'kind = "postgres"\nurl = "postgresql://x"\n\n[transform.window]',
        ),
        "transform.lookups[0].table",
        'table is required for kind = "postgres"',
    ),
    (
        "a lookup named like a source",
        edit(
            "[transform.window]",
            '[transform]\nsql = "SELECT * FROM events"\n\n[[transform.lookups]]\nname = "events"\n'
            'kind = "parquet"\npath = "x.parquet"\n\n[transform.window]',
        ),
        "transform",
        "lookups[0].name = 'events' is also sources[0].name",
    ),
    (
        "lookups without SQL",
        edit(
            "[transform.window]",
            '[[transform.lookups]]\nname = "users"\nkind = "parquet"\npath = "x.parquet"\n\n'
            "[transform.window]",
        ),
        "transform.lookups",
        "lookups are joined in [transform].sql, which is empty",
    ),
    (
        "join keys empty",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit("[target]", JOIN + "\n[target]").replace(
                'left_keys = ["user_id"]', "left_keys = []"
            ),
        ),
        "transform.join.left_keys",
        "left_keys is empty: a join without keys would pair every row",
    ),
    (
        "dead_letter_topic without dlq",
        edit("lateness_ms = 5000", 'lateness_ms = 5000\ndead_letter_topic = "late-clicks"'),
        "transform.window.dead_letter_topic",
        'set late_data = "dlq" or remove it',
    ),
    (
        "dead_letter_topic not a topic name",
        edit(
            "lateness_ms = 5000",
            'lateness_ms = 5000\nlate_data = "dlq"\ndead_letter_topic = "late clicks!"',
        ),
        "transform.window.dead_letter_topic",
        "is not a Kafka topic name",
    ),
    (
        "late_data reopen on a join",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit("[target]", JOIN + 'late_data = "reopen"\n\n[target]'),
        ),
        "transform.join.late_data",
        "late_data = 'reopen' is not supported yet; supported: 'drop', 'dlq'",
    ),
    (
        "join keys of unequal length",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit("[target]", JOIN + "\n[target]").replace(
                'right_keys = ["user_id"]', 'right_keys = ["user_id", "paid"]'
            ),
        ),
        "transform.join.right_keys",
        "left_keys has 1 columns and right_keys 2",
    ),
    (
        "join of an unknown source",
        edit(
            "[target]",
            JOIN.replace(
                "[transform.join]", '[transform]\nchain = ["join", "window"]\n\n[transform.join]'
            )
            + "\n[target]",
        ),
        "transform",
        "join.right_source = 'payments' is not a declared source",
    ),
    (
        "join with both a symmetric and asymmetric bound",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit(
                "[target]",
                JOIN.replace(
                    "time_window_ms = 1000",
                    "time_window_ms = 1000\nlower_bound_ms = 0\nupper_bound_ms = 5",
                )
                + "\n[target]",
            ),
        ),
        "transform.join.time_window_ms",
        "time_window_ms and lower_bound_ms/upper_bound_ms are both set",
    ),
    (
        "join without a time bound",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit(
                "[target]",
                JOIN.replace("time_window_ms = 1000", "lower_bound_ms = 0") + "\n[target]",
            ),
        ),
        "transform.join.upper_bound_ms",
        "a join needs a time bound",
    ),
    (
        "join bounds reversed",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit(
                "[target]",
                JOIN.replace("time_window_ms = 1000", "lower_bound_ms = 10\nupper_bound_ms = 5")
                + "\n[target]",
            ),
        ),
        "transform.join.upper_bound_ms",
        "upper_bound_ms = 5 is below lower_bound_ms = 10",
    ),
    (
        "join of a source with itself",
        edit(
            "[target]",
            JOIN.replace('right_source = "payments"', 'right_source = "events"') + "\n[target]",
        ),
        "transform.join.right_source",
        "right_source = 'events' is also left_source",
    ),
    (
        "chain without a join",
        edit("[transform.window]", '[transform]\nchain = ["join", "window"]\n\n[transform.window]'),
        "transform.chain",
        "chain needs both [transform.join] and [transform.window]",
    ),
    (
        "join with a SQL pre-stage",
        edit(
            "[transform.window]",
            PAYMENTS
            + '\n[transform]\nsql = "SELECT 1"\nchain = ["join", "window"]\n\n[transform.window]',
            edit("[target]", JOIN + "\n[target]"),
        ),
        "transform.sql",
        "[transform].sql and lookups with a join are not supported yet",
    ),
    (
        "a window kind that does not exist",
        edit('kind = "tumbling"', 'kind = "weekly"'),
        "transform.window.kind",
        "Input should be",
    ),
    (
        "unknown key",
        edit("lateness_ms = 5000", "lateness_ms = 5000\nlatenes_ms = 1"),
        "transform.window.latenes_ms",
        "unknown key",
    ),
    ("unknown table", VALID + "\n[extras]\nx = 1\n", "extras", "unknown key"),
    (
        "pipeline name pattern",
        edit('name = "rules-check"', 'name = "Rules Check"'),
        "name",
        "must match [a-z0-9_-]+",
    ),
    (
        "duration must be positive",
        edit("duration_ms = 60000", "duration_ms = 0"),
        "transform.window.duration_ms",
        "greater than 0",
    ),
    (
        "json needs a schema",
        edit('schema = "user_id STRING, amount DOUBLE, ts BIGINT"', ""),
        "sources[0].schema",
        'required when format = "json"',
    ),
    (
        "payload column named _event_ts",
        edit('ts BIGINT"', 'ts BIGINT, _event_ts BIGINT"'),
        "sources[0].schema",
        "collides",
    ),
    (
        "sum needs a column",
        edit('agg = "sum"\ncolumn = "amount"', 'agg = "sum"'),
        "transform.window.aggregations[1].column",
        'required for agg = "sum"',
    ),
    (
        "group_by listed twice",
        edit('group_by = ["user_id"]', 'group_by = ["user_id", "user_id"]'),
        "transform.window.group_by",
        "group_by[1] = 'user_id' is listed twice",
    ),
    (
        "processing time with an event-time column",
        edit("lateness_ms = 5000", 'lateness_ms = 5000\ntime_mode = "processing"'),
        "transform.window.time_mode",
        "would be ignored",
    ),
    (
        "window and join both set without a chain",
        edit(
            "[transform.window]",
            PAYMENTS + "\n[transform.window]",
            edit("[target]", JOIN + "\n[target]"),
        ),
        "transform.join",
        'add chain = ["join", "window"]',
    ),
    (
        "unknown target kind",
        edit('kind = "delta"\npath = "./data/rules"', 'kind = "s3"\ntable = "t"'),
        "target.kind",
        "kind = 's3' is not a target",
    ),
    (
        "postgres target table not an identifier",
        edit('kind = "delta"\npath = "./data/rules"', 'kind = "postgres"\ntable = "a b"'),
        "target.postgres.table",
        "not a plain SQL identifier",
    ),
    (
        "orchestration schedule not a cron expression",
        VALID + '\n[orchestration]\nschedule = "every five minutes"\n',
        "orchestration.schedule",
        "is not a cron expression",
    ),
    (
        "state store schema",
        VALID + '\n[state_store]\nschema = "Bad-Name"\n',
        "state_store.schema",
        "must match",
    ),
    (
        "duplicate source names",
        edit(
            "[transform.window]",
            '[[sources]]\nname = "events"\ntopic = "b"\nbootstrap_servers = "x:1"\n'
            'format = "raw"\n\n[transform]\nsql = "SELECT 1"\n\n[transform.window]',
        ),
        "sources",
        "sources[1].name = 'events' repeats sources[0].name",
    ),
    (
        "a [spark] conf that breaks a Spark contract (tests/test_spark_contracts.py)",
        VALID + '\n[spark.conf]\n"spark.sql.streaming.multipleWatermarkPolicy" = "max"\n',
        "spark.conf",
        "spark.conf.spark.sql.streaming.multipleWatermarkPolicy = 'max' is refused",
    ),
    (
        "asynchronous progress tracking in [spark] conf",
        VALID + '\n[spark.conf]\nasyncProgressTrackingEnabled = "true"\n',
        "spark.conf",
        "foreachBatch",
    ),
    (
        "no-data micro-batches off",
        VALID + '\n[spark.conf]\n"spark.sql.streaming.noDataMicroBatches.enabled" = "false"\n',
        "spark.conf",
        "closed window waits for new data",
    ),
    (
        "a join that is not a table (its package's model reads [transform.join])",
        edit("[transform.window]", '[transform]\njoin = "events"\n\n[transform.window]'),
        "transform.join",
        "[transform.join] is a table of keys, not 'events'",
    ),
    (
        "a join of a kind there is none of",
        edit(
            "[transform.window]",
            '[transform.join]\nkind = "window_join"\n\n[transform.window]',
        ),
        "transform.join.kind",
        "kind = 'window_join' is not a join kind",
    ),
    (
        "TOML syntax",
        edit("duration_ms = 60000", "duration_ms = = 60000"),
        "TOML syntax error",
        "line",
    ),
    (
        "an unset environment variable",
        edit('bootstrap_servers = "127.0.0.1:9092"', 'bootstrap_servers = "${NO_SUCH_FLOW_VAR}"'),
        "sources[0].bootstrap_servers",
        "NO_SUCH_FLOW_VAR is not set",
    ),
]


@pytest.mark.parametrize(("case", "text", "key", "fragment"), RULES, ids=[r[0] for r in RULES])
def test_validate_rejects_naming_the_key(
    case: str,
    text: str,
    key: str,
    fragment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    assert main(["validate", str(spec)]) != 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if key in line]
    assert lines, f"no line names {key!r}:\n{err}"
    assert any(fragment in line for line in lines), f"{fragment!r} not in:\n{err}"


@pytest.mark.parametrize(
    "text",
    [
        VALID,
        edit("lateness_ms = 5000", 'lateness_ms = 5000\nlate_data = "dlq"'),
        edit(
            "lateness_ms = 5000",
            'lateness_ms = 5000\nlate_data = "dlq"\ndead_letter_topic = "clicks.late"',
        ),
        VALID.split("[transform.window]")[0]
        + PAYMENTS
        + JOIN
        + 'event_time_column = "ts"\nlate_data = "dlq"\ndead_letter_topic = "late"\n'
        + "\n[target]"
        + VALID.split("[target]")[1],
        edit("lateness_ms = 5000", REOPEN_KEYS),
        edit('kind = "tumbling"', 'kind = "hopping"\nhop_ms = 20000', REOPEN),
        VALID + '\n[spark.conf]\n"spark.sql.streaming.multipleWatermarkPolicy" = "MIN"\n',
    ],
    ids=["drop", "dlq", "dlq-topic", "join-dlq-topic", "reopen", "reopen-hopping", "conf-min"],
)
def test_validate_accepts_a_valid_spec(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    assert main(["validate", str(spec)]) == 0
    assert "valid" in capsys.readouterr().out


def test_validate_warns_that_a_kafka_target_keeps_every_revision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.toml"
    kafka = '[target]\nkind = "kafka"\ntopic = "out"\nbootstrap_servers = "127.0.0.1:9092"\n'
    spec.write_text(REOPEN.split("[target]")[0] + kafka)
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert 'warning: late_data = "reopen" re-emits a window' in out
    assert "one record per revision (the revision column)" in out


def test_every_shipped_pipeline_validates() -> None:
    specs = sorted(Path(__file__).parent.parent.glob("pipelines/*.toml"))
    assert specs
    for path in specs:
        load_spec(path)


def test_env_interpolation_with_default_and_override() -> None:
    text = edit(
        'bootstrap_servers = "127.0.0.1:9092"', 'bootstrap_servers = "${BROKER:-127.0.0.1:9092}"'
    )
    assert parse_spec(text, env={}).sources[0].bootstrap_servers == "127.0.0.1:9092"
    assert parse_spec(text, env={"BROKER": "b:1"}).sources[0].bootstrap_servers == "b:1"


def test_secret_values_never_appear_in_errors() -> None:
    text = edit('format = "json"', 'format = "json"\nclient_config = { "sasl.password" = 12 }')
    text = edit("duration_ms = 60000", "duration_ms = -1", text)
    text = text.replace('"sasl.password" = 12', '"sasl.password" = ["hunter2-secret"]')
    with pytest.raises(SpecError) as e:
        parse_spec(text)
    assert "hunter2" not in str(e.value)
    assert re.search(r"sources\[0\]\.client_config", str(e.value))


def test_output_columns_follow_the_seed_order() -> None:
    text = edit('group_by = ["user_id"]', 'group_by = ["user_id", "page"]')
    spec = parse_spec(text.replace("user_id STRING,", "user_id STRING, page STRING,"))
    assert spec.output_columns() == [
        "window_start",
        "window_end",
        "user_id",
        "page",
        "n",
        "amount_sum",
    ]


def test_every_aggregator_name_has_its_unit() -> None:
    """An aggregator is one unit (flow_jobs.aggregations): its name is valid for ``agg``,
    and only the registry's names are."""
    from pydantic import ValidationError

    from flow_jobs.aggregations import AGGREGATORS
    from flow_jobs.spec.models import Aggregation

    for name, unit in AGGREGATORS.items():
        assert unit.name == name and unit.native_form and unit.state_form
        keys = {"reduce": {"initializer": "m:f", "reducer": "m:g", "result_type": "DOUBLE"}}
        Aggregation(agg=name, column="x", as_="a", **keys.get(name, {}))
    with pytest.raises(ValidationError, match="Input should be 'count', 'sum'") as refused:
        Aggregation(agg="unknown", column="x", as_="a")
    assert all(f"'{name}'" in str(refused.value) for name in AGGREGATORS)


def test_ddl_columns_reads_top_level_names() -> None:
    from flow_jobs.spec.ddl import ddl_columns

    ddl = (
        "user_id STRING, `odd name` INT, m MAP<STRING, ARRAY<INT>>, "
        "s STRUCT<a: INT, b: DECIMAL(10, 2)>, d DECIMAL(38,10) NOT NULL, ts BIGINT"
    )
    assert ddl_columns(ddl) == ["user_id", "odd name", "m", "s", "d", "ts"]


@pytest.mark.parametrize(
    ("change", "key", "name"),
    [
        (lambda w, j: w.update(group_by=["userid"]), "transform.window.group_by", "userid"),
        (
            lambda w, j: w["aggregations"].append({"agg": "sum", "column": "amt", "as": "x"}),
            "transform.window.aggregations.x.column",
            "amt",
        ),
        (
            lambda w, j: w.update(event_time_column="time"),
            "transform.window.event_time_column",
            "time",
        ),
    ],
)
def test_validate_names_a_window_column_the_source_lacks(change: Any, key: str, name: str) -> None:
    """Without a SQL pre-stage the window reads the source's declared schema: a column
    it lacks fails loading (so `flow-jobs validate`), naming the key and the column."""
    doc = _window_doc()
    change(doc["transform"]["window"], None)
    with pytest.raises(SpecError) as failed:
        load_spec_from_dict(doc)
    text = str(failed.value)
    assert f"{key}: {name!r} is not a column of source 'clicks'" in text
    assert "\n" not in text  # one problem: one line
    doc = _window_doc()
    change(doc["transform"]["window"], None)
    doc["transform"]["sql"] = "SELECT *, user_id AS userid, amount AS amt, ts AS time FROM clicks"
    load_spec_from_dict(doc)  # with SQL, the columns are the SQL's: Spark checks them


def test_validate_names_a_join_key_the_source_lacks() -> None:
    doc = {
        "name": "j",
        "sources": [
            {"name": "orders", "topic": "o", "bootstrap_servers": "b:9092",
             "schema": "order_id STRING, ts BIGINT"},
            {"name": "payments", "topic": "p", "bootstrap_servers": "b:9092",
             "schema": "payment_id STRING, order_id STRING, ts BIGINT"},
        ],
        "transform": {"join": {"kind": "stream_stream_join", "left_source": "orders",
                               "right_source": "payments", "left_keys": ["order_id"],
                               "right_keys": ["orderid"], "time_window_ms": 1000,
                               "event_time_column": "ts"}},
        "target": {"kind": "delta", "path": "/tmp/j"},
    }  # fmt: skip
    with pytest.raises(SpecError, match=r"transform.join.right_keys: 'orderid' is not a column"):
        load_spec_from_dict(doc)
    doc["transform"]["join"]["right_keys"] = ["order_id"]
    load_spec_from_dict(doc)


def _window_doc() -> dict[str, Any]:
    return {
        "name": "w",
        "sources": [{"name": "clicks", "topic": "c", "bootstrap_servers": "b:9092",
                     "schema": "user_id STRING, amount DOUBLE, ts BIGINT"}],
        "transform": {"window": {"kind": "tumbling", "duration_ms": 1000,
                                 "event_time_column": "ts", "group_by": ["user_id"],
                                 "aggregations": [{"agg": "count", "as": "n"}]}},
        "target": {"kind": "delta", "path": "/tmp/w"},
    }  # fmt: skip


def load_spec_from_dict(doc: dict[str, Any]) -> Any:
    import tomli_w

    return parse_spec(tomli_w.dumps(doc), "spec.toml")
