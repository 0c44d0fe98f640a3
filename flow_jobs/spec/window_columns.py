"""The output columns of ``[transform.window]``: each name a valid identifier, once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flow_jobs.spec.base import _identifier, key_error

if TYPE_CHECKING:
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
