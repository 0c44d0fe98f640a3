"""The Python facade: the spec's models, serialising to the TOML the CLI reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from flow_jobs import (
    Aggregation,
    Join,
    Lookup,
    Pipeline,
    Source,
    Window,
    load_spec,
    parse_spec,
)
from tests import reduce_fns


def _pipeline() -> Pipeline:
    return Pipeline(
        name="facade-check",
        sources=[
            Source(
                name="clicks",
                topic="clicks",
                bootstrap_servers="127.0.0.1:9092",
                schema="user_id STRING, page STRING, amount DOUBLE, ts BIGINT",
                client_config={"sasl.password": "s3cret"},
            ),
        ],
        transform={
            "sql": "SELECT c.*, u.tier FROM clicks c LEFT JOIN users u USING (user_id)",
            "lookups": [
                Lookup(
                    name="users", kind="parquet", path="./users.parquet", refresh_interval_ms=30_000
                )
            ],
            "window": Window(
                kind="sliding",
                duration_ms=60_000,
                event_time_column="ts",
                lateness_ms=5_000,
                group_by=["tier"],
                aggregations=[
                    Aggregation(agg="count", as_="n"),
                    Aggregation(
                        agg="count_distinct",
                        column="user_id",
                        as_="users",
                        hll_precision=12,
                        keep_sketch=True,
                    ),
                    Aggregation(
                        agg="reduce",
                        column="page",
                        as_="trail",
                        initializer=reduce_fns.start_trail,
                        reducer=reduce_fns.extend_trail,
                        result_type="STRING",
                    ),
                ],
            ),
        },
        target={"kind": "delta", "path": "./data/facade"},
    )


def test_python_models_round_trip_through_toml() -> None:
    pipeline = _pipeline()
    text = pipeline.to_toml()
    assert 'initializer = "tests.reduce_fns:start_trail"' in text
    again = parse_spec(text)
    assert again == pipeline
    assert again.to_toml() == text
    assert again.window.aggregations[2].reducer == "tests.reduce_fns:extend_trail"


@pytest.mark.parametrize(
    "path", sorted(Path(__file__).parent.parent.glob("pipelines/*.toml")), ids=lambda p: p.name
)
def test_shipped_specs_round_trip(path: Path) -> None:
    spec = load_spec(path)
    assert parse_spec(spec.to_toml()) == spec


def test_a_lambda_cannot_be_named_in_toml() -> None:
    with pytest.raises(ValidationError, match="not a module-level function"):
        Aggregation(
            agg="reduce",
            column="x",
            as_="r",
            initializer=lambda v: v,
            reducer=reduce_fns.extend_trail,
            result_type="STRING",
        )


def test_facade_validates_like_toml() -> None:
    with pytest.raises(ValidationError, match="hop_ms = 90000 must be <= duration_ms = 60000"):
        Window(
            kind="hopping",
            duration_ms=60_000,
            hop_ms=90_000,
            aggregations=[Aggregation(agg="count", as_="n")],
        )


def test_a_join_round_trips_through_toml() -> None:
    pipeline = Pipeline(
        name="orders-payments",
        sources=[
            Source(
                name="orders",
                topic="orders",
                bootstrap_servers="b:9092",
                schema="order_id STRING, amount DOUBLE, ts BIGINT",
            ),
            Source(
                name="payments",
                topic="payments",
                bootstrap_servers="b:9092",
                schema="order_id STRING, paid DOUBLE, ts BIGINT",
            ),
        ],
        transform={
            "join": Join(
                kind="stream_stream_join",
                left_source="orders",
                right_source="payments",
                left_keys=["order_id"],
                right_keys=["order_id"],
                how="full",
                lower_bound_ms=-1_000,
                upper_bound_ms=60_000,
                event_time_column="ts",
                output_right_columns={"paid": "amount_paid", "ts": "paid_at"},
            ),
            "window": Window(
                kind="tumbling",
                duration_ms=60_000,
                event_time_column="paid_at",
                aggregations=[Aggregation(agg="sum", column="amount_paid", as_="paid")],
            ),
            "chain": ["join", "window"],
        },
        target={"kind": "delta", "path": "./data/paid"},
    )
    text = pipeline.to_toml()
    assert parse_spec(text) == pipeline
    assert "[transform.join.output_right_columns]" in text
