"""A column a spec names that the frame it compiles against lacks: the plan's one error
for it. ``validate`` refuses most such columns against the sources' schemas first
(``flow_jobs.spec.columns``); what a ``[transform].sql`` or a decoder makes is known only
here."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from flow_jobs.errors import PlanError
from flow_jobs.spec.base import KAFKA_COLUMN

#: The plan's own columns (event time, reasons, ...): never a column a spec may name.
INTERNAL_PREFIX = "__flow"


def user_columns(columns: Sequence[str]) -> list[str]:
    """The columns a spec may name: not the plan's own, not the Kafka record's."""
    return [c for c in columns if c != KAFKA_COLUMN and not c.startswith(INTERNAL_PREFIX)]


def require_column(
    frame: DataFrame | Sequence[str], key: str, name: str, where: str, hint: str = ""
) -> None:
    """Raise ``PlanError(key)`` unless ``name`` is a column of ``frame`` (or one of
    those columns) other than the plan's own; ``where``: what the frame is ("source
    'clicks'", "the window's input"); ``hint``: what to do, after the columns it has."""
    columns = frame.columns if isinstance(frame, DataFrame) else list(frame)
    if name in columns and not name.startswith(INTERNAL_PREFIX):
        return  # the Kafka record's column too, where a spec names it
    shown = ", ".join(user_columns(columns))
    raise PlanError(key, f"{name!r} is not a column of {where} (columns: {shown}){hint}")
