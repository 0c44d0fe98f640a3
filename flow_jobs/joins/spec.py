"""``[transform.join]``'s keys: the stream-stream join's spec model, a stage of
``[transform]`` (``flow_jobs.spec.stages.Stage``; ``flow_jobs.joins.plugin`` registers
it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from flow_jobs.records import EVENT_TS
from flow_jobs.spec.base import (
    OutputColumns,
    SpecModel,
    _identifier,
    dead_letter_topic_rule,
    key_error,
    not_supported,
)
from flow_jobs.spec.stages import ColumnUse

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource

JoinHow = Literal["inner", "left", "right", "full"]


class JoinSpec(SpecModel):
    """``[transform.join]``: a keyed, time-bounded stream-stream join, plus
    outer joins and asymmetric bounds."""

    STAGE: ClassVar[str] = "join"
    NOUN: ClassVar[str] = "a join"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "rows"
    TAKES_OPERATORS: ClassVar[bool] = True

    kind: Literal["stream_stream_join"]
    left_source: str
    right_source: str
    left_keys: list[str]
    right_keys: list[str]
    how: JoinHow = "inner"
    #: Symmetric bound: |left time - right time| <= time_window_ms.
    time_window_ms: Annotated[int, Field(ge=0)] | None = None
    #: Asymmetric bounds: right time - left time within [lower_bound_ms, upper_bound_ms].
    lower_bound_ms: int | None = None
    upper_bound_ms: int | None = None
    event_time_column: str = EVENT_TS
    left_event_time_column: str | None = None
    right_event_time_column: str | None = None
    time_mode: Literal["event", "processing"] = "event"
    lateness_ms: Annotated[int, Field(ge=0)] = 0
    late_data: Literal["drop", "dlq", "reopen"] = "drop"
    #: late_data = "dlq": late rows go to this Kafka topic instead of the dead-letter table
    dead_letter_topic: str | None = None
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000
    output_left_columns: OutputColumns | None = None
    output_right_columns: OutputColumns | None = None
    #: Output columns that identify a joined row; default: join_row_id, a hash of both
    #: sides' Kafka positions.
    row_id: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _kind(cls, data: Any) -> Any:
        kind = data.get("kind", "stream_stream_join") if isinstance(data, dict) else None
        if kind not in (None, "stream_stream_join"):
            raise key_error("kind", f'kind = {kind!r} is not a join kind: use "stream_stream_join"')
        return data

    @model_validator(mode="after")
    def _rules(self) -> JoinSpec:
        if self.left_source == self.right_source:
            raise key_error(
                "right_source", f"right_source = {self.right_source!r} is also left_source"
            )
        for side in ("left_keys", "right_keys"):
            keys = getattr(self, side)
            if not keys:
                raise key_error(
                    side,
                    f"{side} is empty: a join without keys would pair every row of a "
                    "time range (a cross join); name the key columns",
                )
            for i, k in enumerate(keys):
                _identifier(f"{side}[{i}]", k)
        if len(self.left_keys) != len(self.right_keys):
            raise key_error(
                "right_keys",
                f"left_keys has {len(self.left_keys)} columns and right_keys "
                f"{len(self.right_keys)}: they pair up one to one",
            )
        symmetric = self.time_window_ms is not None
        bounds = (self.lower_bound_ms, self.upper_bound_ms)
        if symmetric and any(b is not None for b in bounds):
            raise key_error(
                "time_window_ms",
                "time_window_ms and lower_bound_ms/upper_bound_ms are both set; use one",
            )
        if not symmetric and None in bounds:
            missing = "upper_bound_ms" if self.upper_bound_ms is None else "lower_bound_ms"
            raise key_error(
                missing,
                "a join needs a time bound: time_window_ms, or both lower_bound_ms and "
                "upper_bound_ms",
            )
        lower, upper = self.bounds
        if lower > upper:
            raise key_error(
                "upper_bound_ms", f"upper_bound_ms = {upper} is below lower_bound_ms = {lower}"
            )
        for key in ("event_time_column", "left_event_time_column", "right_event_time_column"):
            if getattr(self, key) is not None:
                _identifier(key, getattr(self, key))
        if self.time_mode == "processing" and (
            self.event_time_column != EVENT_TS
            or self.left_event_time_column
            or self.right_event_time_column
        ):
            raise key_error(
                "time_mode",
                f'time_mode = "processing" joins on arrival time ({EVENT_TS}); remove the '
                "event-time columns",
            )
        if self.late_data == "reopen":  # a joined row is final once written
            raise not_supported("late_data", self.late_data, ("drop", "dlq"))
        if self.late_data == "dlq" and self.time_mode == "processing":
            raise key_error(
                "late_data",
                'late_data = "dlq" needs event time: with time_mode = "processing" every row '
                'is stamped on arrival and none is ever late; use "drop"',
            )
        dead_letter_topic_rule(self.dead_letter_topic, self.late_data)
        for side in ("output_left_columns", "output_right_columns"):
            columns = getattr(self, side)
            if columns is not None and not columns:
                raise key_error(side, f"{side} is empty: list the columns to keep")
        return self

    @property
    def bounds(self) -> tuple[int, int]:
        """right time - left time must lie within these (inclusive), in ms."""
        if self.time_window_ms is not None:
            return -self.time_window_ms, self.time_window_ms
        assert self.lower_bound_ms is not None and self.upper_bound_ms is not None
        return self.lower_bound_ms, self.upper_bound_ms

    def side_event_time(self, side: str) -> str:
        override = self.left_event_time_column if side == "left" else self.right_event_time_column
        return override or self.event_time_column

    @property
    def watermark_delay_ms(self) -> int:
        """How far each side's watermark (``withWatermark``) lags its highest event time."""
        return self.lateness_ms

    def summary(self, over: Sequence[str] | None) -> str:
        lower, upper = self.bounds
        return (
            f"{self.how} join of {self.left_source} and {self.right_source} on "
            f"{', '.join(self.left_keys)} within [{lower}, {upper}] ms"
        )

    def key_columns(self) -> list[str]:
        return list(dict.fromkeys([*self.left_keys, *self.right_keys]))

    def side_source(self, side: str) -> str:
        return self.left_source if side == "left" else self.right_source

    def event_time_key(self, side: str) -> str:
        """The spec key naming a side's event time: its override where set."""
        override = f"{side}_event_time_column"
        return f"transform.join.{override if getattr(self, override) else 'event_time_column'}"

    def columns_read(self, sources: Sequence[KafkaSource]) -> list[ColumnUse]:
        uses: list[ColumnUse] = []
        for side in ("left", "right"):
            source = self.side_source(side)
            keys: list[str | None] = [*(self.left_keys if side == "left" else self.right_keys)]
            uses.append((f"transform.join.{side}_keys", source, keys))
            if self.time_mode == "event":
                column = self.side_event_time(side)
                uses.append((f"transform.join.{side}_event_time_column", source, [column]))
        return uses

    def event_time_columns(self, sources: Sequence[KafkaSource]) -> list[tuple[str, str, str]]:
        if self.time_mode != "event":
            return []
        return [
            (self.event_time_key(side), self.side_source(side), self.side_event_time(side))
            for side in ("left", "right")
        ]

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """Both sides are declared sources."""
        names = [src.name for src in sources]
        for side in ("left_source", "right_source"):
            if getattr(self, side) not in names:
                raise key_error(
                    "transform",
                    f"join.{side} = {getattr(self, side)!r} is not a declared source "
                    f"(sources: {', '.join(names)})",
                )
