"""``[transform.window_join]``'s keys: the window join's spec model, a stage of
``[transform]`` (``flow_jobs.spec.stages.Stage``; ``flow_jobs.window_join.plugin``
registers it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from flow_jobs.records import EVENT_TS
from flow_jobs.spec.base import OutputColumns, SpecModel, _identifier, key_error
from flow_jobs.spec.stages import ColumnUse

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource

WindowJoinHow = Literal["inner", "left", "right", "full", "semi", "anti"]
#: The window kinds a window join takes, with their size keys (Flink's window join
#: takes the same three: windows with fixed bounds both sides agree on).
SIZE_KEYS: dict[str, tuple[str, ...]] = {
    "tumbling": ("duration_ms",),
    "hopping": ("duration_ms", "hop_ms"),
    "cumulate": ("step_ms", "max_duration_ms"),
}


class WindowJoinSpec(SpecModel):
    """``[transform.window_join]``: the rows of two sources with equal keys in the same
    window, joined once the watermark closes the window (docs/spec-reference.md,
    "[transform.window_join]")."""

    STAGE: ClassVar[str] = "window_join"
    NOUN: ClassVar[str] = "a window join"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "rows"
    #: the sources' operators (a dedup) cannot run before it yet
    TAKES_OPERATORS: ClassVar[bool] = False
    #: rows are placed in windows by event time only
    time_mode: ClassVar[str] = "event"
    #: late rows go to the dead-letter table only
    dead_letter_topic: ClassVar[None] = None

    left_source: str
    right_source: str
    left_keys: list[str]
    right_keys: list[str]
    how: WindowJoinHow = "inner"
    kind: Literal["tumbling", "hopping", "cumulate"]
    duration_ms: Annotated[int, Field(gt=0)] | None = None
    hop_ms: Annotated[int, Field(gt=0)] | None = None
    step_ms: Annotated[int, Field(gt=0)] | None = None
    max_duration_ms: Annotated[int, Field(gt=0)] | None = None
    event_time_column: str = EVENT_TS
    left_event_time_column: str | None = None
    right_event_time_column: str | None = None
    lateness_ms: Annotated[int, Field(ge=0)] = 0
    late_data: Literal["drop", "dlq"] = "drop"
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000
    #: a source with no new record for this long stops holding the watermark back
    #: (docs/spec-reference.md, "Watermarks over several sources")
    source_idleness_ms: Annotated[int, Field(gt=0)] = 60_000
    window_start_column: str = "window_start"
    window_end_column: str = "window_end"
    output_left_columns: OutputColumns | None = None
    output_right_columns: OutputColumns | None = None

    @model_validator(mode="after")
    def _rules(self) -> WindowJoinSpec:
        if self.left_source == self.right_source:
            raise key_error(
                "right_source", f"right_source = {self.right_source!r} is also left_source"
            )
        for side in ("left_keys", "right_keys"):
            keys = getattr(self, side)
            if not keys:
                raise key_error(
                    side,
                    f"{side} is empty: a window join without keys would pair every row of a "
                    "window (a cross join); name the key columns",
                )
            for i, k in enumerate(keys):
                _identifier(f"{side}[{i}]", k)
        if len(self.left_keys) != len(self.right_keys):
            raise key_error(
                "right_keys",
                f"left_keys has {len(self.left_keys)} columns and right_keys "
                f"{len(self.right_keys)}: they pair up one to one",
            )
        needed = SIZE_KEYS[self.kind]
        for key in ("duration_ms", "hop_ms", "step_ms", "max_duration_ms"):
            if key in needed and getattr(self, key) is None:
                raise key_error(key, f'kind = "{self.kind}" needs {" and ".join(needed)}')
            if key not in needed and getattr(self, key) is not None:
                raise key_error(
                    key,
                    f'{key} is not a key of kind = "{self.kind}" (its keys: {", ".join(needed)})',
                )
        if self.kind == "hopping" and self.hop > self.duration:
            raise key_error(
                "hop_ms", f"hop_ms = {self.hop_ms} must be <= duration_ms = {self.duration_ms}"
            )
        if self.kind == "cumulate" and self.max_duration % self.hop:
            raise key_error(
                "max_duration_ms",
                f"max_duration_ms = {self.max_duration_ms} must be a multiple of "
                f"step_ms = {self.step_ms}",
            )
        for key in (
            "event_time_column", "left_event_time_column", "right_event_time_column",
            "window_start_column", "window_end_column",
        ):  # fmt: skip
            if getattr(self, key) is not None:
                _identifier(key, getattr(self, key))
        if self.window_start_column == self.window_end_column:
            raise key_error("window_end_column", "window_end_column is also window_start_column")
        for side in ("output_left_columns", "output_right_columns"):
            columns = getattr(self, side)
            if columns is not None and not columns:
                raise key_error(side, f"{side} is empty: list the columns to keep")
        if self.how in ("semi", "anti") and self.output_right_columns is not None:
            raise key_error(
                "output_right_columns",
                f'how = "{self.how}" outputs the left rows only: remove output_right_columns',
            )
        return self

    @property
    def hop(self) -> int:
        """How far apart windows start (tumbling: the duration; cumulate: the step)."""
        if self.kind == "cumulate":
            assert self.step_ms is not None
            return self.step_ms
        return self.hop_ms or self.duration

    @property
    def duration(self) -> int:
        """The longest window."""
        size = self.max_duration_ms if self.kind == "cumulate" else self.duration_ms
        assert size is not None
        return size

    @property
    def max_duration(self) -> int:
        return self.duration

    @property
    def size_text(self) -> str:
        if self.kind == "hopping":
            return f"hopping {self.duration_ms} ms every {self.hop_ms} ms"
        if self.kind == "cumulate":
            return f"cumulate every {self.step_ms} ms up to {self.max_duration_ms} ms"
        return f"tumbling {self.duration_ms} ms"

    @property
    def keeps_right(self) -> bool:
        """Whether the output has the right side's columns (not a semi or anti join)."""
        return self.how not in ("semi", "anti")

    @property
    def watermark_delay_ms(self) -> int:
        """How far each source's watermark runs behind its highest event time."""
        return self.lateness_ms

    def summary(self, over: Sequence[str] | None) -> str:
        return (
            f"{self.how} window join of {self.left_source} and {self.right_source} on "
            f"{', '.join(self.left_keys)} in {self.size_text} windows"
        )

    def key_columns(self) -> list[str]:
        return list(dict.fromkeys([*self.left_keys, *self.right_keys]))

    def side_source(self, side: str) -> str:
        return self.left_source if side == "left" else self.right_source

    def side_keys(self, side: str) -> list[str]:
        return self.left_keys if side == "left" else self.right_keys

    def side_event_time(self, side: str) -> str:
        override = getattr(self, f"{side}_event_time_column")
        return override or self.event_time_column

    def event_time_key(self, side: str) -> str:
        """The spec key naming a side's event time: its override where set."""
        override = f"{side}_event_time_column"
        key = override if getattr(self, override) else "event_time_column"
        return f"transform.window_join.{key}"

    def columns_read(self, sources: Sequence[KafkaSource]) -> list[ColumnUse]:
        uses: list[ColumnUse] = []
        for side in ("left", "right"):
            source, key = self.side_source(side), f"transform.window_join.{side}"
            uses.append((f"{key}_keys", source, [*self.side_keys(side)]))
            uses.append((f"{key}_event_time_column", source, [self.side_event_time(side)]))
        return uses

    def event_time_columns(self, sources: Sequence[KafkaSource]) -> list[tuple[str, str, str]]:
        return [
            (self.event_time_key(side), self.side_source(side), self.side_event_time(side))
            for side in ("left", "right")
        ]

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """Both sides are declared sources, and the only ones."""
        names = [s.name for s in sources]
        for side in ("left_source", "right_source"):
            if getattr(self, side) not in names:
                raise key_error(
                    f"transform.window_join.{side}",
                    f"{getattr(self, side)!r} is not a declared source "
                    f"(sources: {', '.join(names)})",
                )
        if len(sources) != 2:
            raise key_error(
                "sources",
                f"{len(sources)} sources are declared; a window join reads two, its "
                "left_source and its right_source",
            )
