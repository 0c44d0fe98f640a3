"""Pipeline spec: pydantic v2 models, the single source of truth for configuration.

Every config-time rule lives here, in the model that owns the key, so a message always
names the key and the value. Values the seeds reserve for later (``late_data = "dlq"``,
``crash_recovery = "kafka_eos"``, ...) are part of the accepted vocabulary and rejected
with "not supported yet", so a user can tell a typo from a roadmap item.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

PIPELINE_NAME = re.compile(r"^[a-z0-9_-]+$")
SQL_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: The column every source injects: the Kafka timestamp, or the arrival time in
#: processing-time mode (seed 000).
EVENT_TS = "_event_ts"

WindowKind = Literal[
    "tumbling",
    "hopping",
    "session",
    "sliding",
    "count_tumbling",
    "count_hopping",
    "count_sliding",
]
IMPLEMENTED_WINDOW_KINDS = ("tumbling", "hopping")

AggKind = Literal[
    "count", "sum", "min", "max", "avg", "first", "last", "count_distinct", "collect", "reduce"
]
IMPLEMENTED_AGGS = ("count", "sum", "min", "max", "avg", "first", "last")


def not_supported(key: str, value: object, supported: tuple[str, ...] | str) -> ValueError:
    shown = supported if isinstance(supported, str) else ", ".join(map(repr, supported))
    return ValueError(f"{key} = {value!r} is not supported yet; supported: {shown}")


class SpecModel(BaseModel):
    """Base for every spec table: unknown keys are errors, models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _identifier(key: str, value: str) -> str:
    if not SQL_IDENTIFIER.match(value):
        raise ValueError(
            f"{key} = {value!r} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)"
        )
    return value


class KafkaSource(SpecModel):
    """``[[sources]]`` with ``kind = "kafka"``: one topic, exposed to SQL as a view."""

    name: str
    kind: Literal["kafka"] = "kafka"
    topic: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    format: Literal["json", "raw"] = "json"
    schema_ddl: str | None = Field(default=None, alias="schema", validate_default=True)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: Annotated[int, Field(gt=0)] | None = None
    fail_on_data_loss: bool = True
    #: Extra librdkafka client properties (e.g. ``security.protocol``); kept secret.
    client_config: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _identifier("name", v)

    @field_validator("schema_ddl")
    @classmethod
    def _schema(cls, v: str | None, info: ValidationInfo) -> str | None:
        fmt = info.data.get("format", "json")
        if fmt == "json" and not (v and v.strip()):
            raise ValueError(
                'schema is required when format = "json": the Spark DDL of the payload, '
                'e.g. schema = "user_id STRING, amount DOUBLE, ts BIGINT"'
            )
        if fmt == "raw" and v:
            raise ValueError('schema is only for format = "json"; remove it for raw')
        if v and re.search(rf"(^|,)\s*`?{EVENT_TS}`?\s", v):
            raise ValueError(
                f"schema declares a payload column named {EVENT_TS!r}, which collides "
                "with the event-time column every source injects; rename it in the schema"
            )
        return v


class Aggregation(SpecModel):
    """One ``[[transform.window.aggregations]]`` entry."""

    agg: AggKind
    column: str | None = Field(default=None, validate_default=True)
    as_: str = Field(alias="as", min_length=1)
    mode: Literal["approximate", "exact"] | None = None
    max_distinct_values_per_group: Annotated[int, Field(gt=0)] | None = Field(
        default=None, validate_default=True
    )

    @field_validator("column")
    @classmethod
    def _column(cls, v: str | None, info: ValidationInfo) -> str | None:
        agg = info.data.get("agg")
        if agg is not None and agg != "count" and not v:
            raise ValueError(f'column is required for agg = "{agg}"')
        return v

    @field_validator("max_distinct_values_per_group")
    @classmethod
    def _distinct_cap(cls, v: int | None, info: ValidationInfo) -> int | None:
        agg, mode = info.data.get("agg"), info.data.get("mode")
        if agg is not None and agg != "count_distinct" and mode is not None:
            raise ValueError(f'mode = "{mode}" is only valid for agg = "count_distinct"')
        if agg == "count_distinct" and mode == "exact" and v is None:
            raise ValueError(
                'max_distinct_values_per_group is required when agg = "count_distinct" '
                'and mode = "exact" (exact distinct counts keep every value in state)'
            )
        if v is not None and not (agg == "count_distinct" and mode == "exact"):
            raise ValueError(
                'max_distinct_values_per_group is only valid with agg = "count_distinct" '
                'and mode = "exact"'
            )
        return v

    @model_validator(mode="after")
    def _implemented(self) -> Aggregation:
        if self.agg not in IMPLEMENTED_AGGS:
            raise not_supported("agg", self.agg, IMPLEMENTED_AGGS)
        return self


class WindowSpec(SpecModel):
    """``[transform.window]``: every key of seed 000's window block, plus ``emit``."""

    kind: WindowKind
    duration_ms: Annotated[int, Field(gt=0)]
    hop_ms: Annotated[int, Field(gt=0)] | None = Field(default=None, validate_default=True)
    event_time_column: str = EVENT_TS
    time_mode: Literal["event", "processing"] = "event"
    lateness_ms: Annotated[int, Field(ge=0)] = 0
    source_idleness_ms: Annotated[int, Field(gt=0)] = 60_000
    group_by: list[str] = Field(default_factory=list)
    late_data: Literal["drop", "dlq", "reopen"] = "drop"
    allowed_lateness_ms: Annotated[int, Field(ge=0)] | None = Field(
        default=None, validate_default=True
    )
    max_groups_per_window: Annotated[int, Field(gt=0)] = 1_000_000
    crash_recovery: Literal["at_least_once", "kafka_eos", "persisted"] = "at_least_once"
    on_state_cap: Literal["fail", "drop_new_groups", "backpressure"] = "fail"
    window_start_column: str = "window_start"
    window_end_column: str = "window_end"
    emit: Literal["final", "current"] = "final"
    #: Rows whose event time is further ahead of the micro-batch's processing time are
    #: dead-lettered: one far-future row would otherwise push the watermark ahead and
    #: make every following on-time row late.
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000
    aggregations: list[Aggregation] = Field(min_length=1)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in IMPLEMENTED_WINDOW_KINDS:
            raise not_supported("kind", v, IMPLEMENTED_WINDOW_KINDS)
        return v

    @field_validator("hop_ms")
    @classmethod
    def _hop(cls, v: int | None, info: ValidationInfo) -> int | None:
        kind, duration = info.data.get("kind"), info.data.get("duration_ms")
        if kind == "hopping":
            if v is None:
                raise ValueError('hop_ms is required when kind = "hopping"')
            if duration is not None and v > duration:
                raise ValueError(f"hop_ms = {v} must be <= duration_ms = {duration}")
        elif v is not None and kind is not None:
            raise ValueError(f'hop_ms is only valid for kind = "hopping", not "{kind}"')
        return v

    @field_validator("event_time_column")
    @classmethod
    def _event_time_column(cls, v: str) -> str:
        return _identifier("event_time_column", v)

    @field_validator("time_mode")
    @classmethod
    def _time_mode(cls, v: str, info: ValidationInfo) -> str:
        column = info.data.get("event_time_column", EVENT_TS)
        if v == "processing" and column != EVENT_TS:
            raise ValueError(
                f'time_mode = "processing" stamps rows with their arrival time in '
                f"{EVENT_TS}; event_time_column = {column!r} would be ignored, remove it"
            )
        return v

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, v: list[str]) -> list[str]:
        seen: set[str] = set()
        for i, column in enumerate(v):
            _identifier(f"group_by[{i}]", column)
            if column in seen:
                raise ValueError(f"group_by[{i}] = {column!r} is listed twice")
            seen.add(column)
        return v

    @field_validator("late_data")
    @classmethod
    def _late_data(cls, v: str) -> str:
        if v == "dlq":
            raise not_supported("late_data", v, ("drop",))
        return v

    @field_validator("allowed_lateness_ms")
    @classmethod
    def _allowed_lateness(cls, v: int | None, info: ValidationInfo) -> int | None:
        late = info.data.get("late_data")
        if late == "reopen" and v is None:
            raise ValueError('allowed_lateness_ms is required when late_data = "reopen"')
        if late is not None and late != "reopen" and v is not None:
            raise ValueError('allowed_lateness_ms is only valid with late_data = "reopen"')
        if late == "reopen":
            raise not_supported("late_data", late, ("drop",))
        return v

    @field_validator("crash_recovery")
    @classmethod
    def _crash_recovery(cls, v: str) -> str:
        if v != "at_least_once":
            raise not_supported("crash_recovery", v, ("at_least_once",))
        return v

    @field_validator("on_state_cap")
    @classmethod
    def _on_state_cap(cls, v: str) -> str:
        if v != "fail":
            raise not_supported("on_state_cap", v, ("fail",))
        return v

    @field_validator("window_end_column")
    @classmethod
    def _window_columns(cls, v: str, info: ValidationInfo) -> str:
        _identifier("window_end_column", v)
        start = info.data.get("window_start_column")
        if start is not None:
            _identifier("window_start_column", start)
            if start == v:
                raise ValueError(f"window_end_column = {v!r} equals window_start_column")
        for i, column in enumerate(info.data.get("group_by") or []):
            if column in (start, v):
                raise ValueError(
                    f"group_by[{i}] = {column!r} collides with a window column name "
                    f"({start!r}, {v!r}); rename window_start_column/window_end_column"
                )
        return v

    @field_validator("emit")
    @classmethod
    def _emit(cls, v: str) -> str:
        if v != "final":
            raise not_supported("emit", v, ("final",))
        return v

    @field_validator("aggregations")
    @classmethod
    def _aliases(cls, v: list[Aggregation], info: ValidationInfo) -> list[Aggregation]:
        group_by = info.data.get("group_by") or []
        window_columns = {
            info.data.get("window_start_column", "window_start"),
            info.data.get("window_end_column", "window_end"),
        }
        first_use: dict[str, int] = {}
        for i, a in enumerate(v):
            _identifier(f"aggregations[{i}].as", a.as_)
            if a.as_ in first_use:
                raise ValueError(
                    f"aggregations[{i}].as = {a.as_!r} repeats aggregations"
                    f"[{first_use[a.as_]}].as; every alias must be unique"
                )
            if a.as_ in group_by:
                raise ValueError(
                    f"aggregations[{i}].as = {a.as_!r} equals a group_by column; "
                    "output columns must be unique"
                )
            if a.as_ in window_columns:
                raise ValueError(f"aggregations[{i}].as = {a.as_!r} equals a window column name")
            first_use[a.as_] = i
        return v


class TransformSpec(SpecModel):
    """``[transform]``: an optional SQL pre-stage, then a window (or, later, a join)."""

    sql: str | None = None
    window: WindowSpec | None = None
    join: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _operator(self) -> TransformSpec:
        if self.window is not None and self.join is not None:
            raise ValueError(
                "[transform.window] and [transform.join] are both set; a pipeline runs one of them"
            )
        if self.join is not None:
            raise not_supported("[transform.join]", "stream_stream_join", "windows")
        if self.window is None:
            raise ValueError("[transform.window] is required: what should the pipeline aggregate?")
        return self


class DeltaTarget(SpecModel):
    """``[target]`` with ``kind = "delta"``: MERGE on the natural key."""

    kind: Literal["delta"] = "delta"
    path: str = Field(min_length=1)
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)


class DeadLetterSpec(SpecModel):
    """``[dead_letter]``: where undecodable rows go (a Delta table), with their bytes."""

    path: str | None = None


class StateStoreSpec(SpecModel):
    """``[state_store]``: the Postgres ledger (embedded when ``url`` is absent)."""

    url: SecretStr | None = None


class CheckpointSpec(SpecModel):
    """``[checkpoint]``: Spark's checkpoint (offsets, commits, RocksDB state)."""

    location: str | None = None


class SparkSpec(SpecModel):
    """``[spark]``: where the query runs; any Spark conf can be passed through."""

    master: str | None = None
    shuffle_partitions: Annotated[int, Field(gt=0)] | None = None
    conf: dict[str, str] = Field(default_factory=dict)


class RuntimeSpec(SpecModel):
    """``[runtime]``: how often a continuous run triggers a micro-batch."""

    trigger_interval_ms: Annotated[int, Field(ge=0)] = 1_000


TARGET_KINDS = ("delta",)
RESERVED_TARGET_KINDS = ("postgres", "kafka")


class PipelineSpec(SpecModel):
    """One ``pipelines/*.toml`` file."""

    name: str
    sources: list[KafkaSource] = Field(min_length=1)
    transform: TransformSpec
    target: DeltaTarget
    dead_letter: DeadLetterSpec = Field(default_factory=DeadLetterSpec)
    state_store: StateStoreSpec = Field(default_factory=StateStoreSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not PIPELINE_NAME.match(v):
            raise ValueError(f"name = {v!r} must match [a-z0-9_-]+")
        return v

    @field_validator("sources", mode="before")
    @classmethod
    def _source_kinds(cls, v: Any) -> Any:
        for i, source in enumerate(v if isinstance(v, list) else []):
            kind = source.get("kind", "kafka") if isinstance(source, dict) else "kafka"
            if kind != "kafka":
                raise ValueError(f'sources[{i}].kind = "{kind}" is not supported; use "kafka"')
        return v

    @field_validator("sources")
    @classmethod
    def _unique_sources(cls, v: list[KafkaSource]) -> list[KafkaSource]:
        seen: dict[str, int] = {}
        for i, s in enumerate(v):
            if s.name in seen:
                raise ValueError(
                    f"sources[{i}].name = {s.name!r} repeats sources[{seen[s.name]}].name"
                )
            seen[s.name] = i
        return v

    @field_validator("target", mode="before")
    @classmethod
    def _target_kind(cls, v: Any) -> Any:
        kind = v.get("kind") if isinstance(v, dict) else None
        if kind in RESERVED_TARGET_KINDS:
            raise not_supported("kind", kind, TARGET_KINDS)
        return v

    @model_validator(mode="after")
    def _sources_feed_window(self) -> PipelineSpec:
        if len(self.sources) > 1 and not self.transform.sql:
            raise ValueError(
                f"{len(self.sources)} sources are declared but [transform].sql is empty; "
                "a SQL pre-stage must combine them (e.g. a UNION ALL of the source views)"
            )
        return self

    @property
    def window(self) -> WindowSpec:
        assert self.transform.window is not None  # enforced by TransformSpec
        return self.transform.window

    def checkpoint_location(self) -> str:
        return self.checkpoint.location or f"./.flow/{self.name}/checkpoint"

    def dead_letter_path(self) -> str:
        return self.dead_letter.path or f"./.flow/{self.name}/dead_letters"

    def natural_key(self) -> list[str]:
        w = self.window
        return [w.window_start_column, w.window_end_column, *w.group_by]

    def output_columns(self) -> list[str]:
        """The one place that knows the output column order (seed 000)."""
        return [*self.natural_key(), *(a.as_ for a in self.window.aggregations)]
