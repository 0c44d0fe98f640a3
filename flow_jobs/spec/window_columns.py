"""The columns of ``[transform.window]``: its output columns, each a valid identifier once,
and the columns it reads of a source."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flow_jobs.spec.base import _identifier, key_error

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flow_jobs.spec.sources import KafkaSource
    from flow_jobs.spec.windows import WindowSpec


def check_output_columns(window: WindowSpec) -> None:
    """The window's bounds, index, revision, group and aggregation columns are unique
    identifiers; the error names the key that repeats a name."""
    seen: dict[str, str] = {}

    def claim(name: str, key: str) -> None:
        _identifier(key, name)
        if name in seen:
            raise key_error(
                key,
                f"{key} = {name!r} collides with {seen[name]}; output columns must be unique",
            )
        seen[name] = key

    claim(window.window_start_column, "window_start_column")
    claim(window.window_end_column, "window_end_column")
    if window.is_count_based:
        claim(window.window_index_column, "window_index_column")
    if window.reopens:
        claim(window.revision_column, "revision_column")
    for i, column in enumerate(window.group_by):
        if column in window.group_by[:i]:
            raise key_error("group_by", f"group_by[{i}] = {column!r} is listed twice")
        claim(column, f"group_by[{i}]")
    for i, a in enumerate(window.aggregations):
        for name in a.output_names():
            key = f"aggregations[{i}].as"
            if name in seen and seen[name].endswith(".as"):
                raise key_error(
                    "aggregations",
                    f"{key} = {name!r} repeats {seen[name]}; every alias must be unique",
                )
            if name in seen and seen[name].startswith("group_by"):
                raise key_error(
                    "aggregations",
                    f"{key} = {name!r} equals a group_by column; output columns must be unique",
                )
            if name in seen:
                raise key_error("aggregations", f"{key} = {name!r} equals a window column name")
            seen[name] = key


def window_columns_read(
    window: WindowSpec, sources: Sequence[KafkaSource]
) -> list[tuple[str, str, list[str | None]]]:
    """Over one source (more need the SQL, which makes the columns): its event time,
    group and aggregation columns."""
    if len(sources) != 1:
        return []
    source = sources[0].name
    key = "transform.window"
    uses: list[tuple[str, str, list[str | None]]] = []
    if window.time_mode == "event":
        uses.append((f"{key}.event_time_column", source, [window.event_time_column]))
    uses.append((f"{key}.group_by", source, [*window.group_by]))
    for a in window.aggregations:
        uses.append((f"{key}.aggregations.{a.as_}.column", source, [a.column]))
    return uses


def window_event_times(
    window: WindowSpec, sources: Sequence[KafkaSource]
) -> list[tuple[str, str, str]]:
    """Its event time in each source, on event time."""
    if window.time_mode != "event":
        return []
    column = window.event_time_column
    return [("transform.window.event_time_column", s.name, column) for s in sources]
