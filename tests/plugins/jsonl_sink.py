"""A target kind from outside the engine: ``kind = "jsonl"`` writes each micro-batch's
rows as JSON lines, one file per batch in a folder.

Exactly once: a batch's file is named by its query and batch id and written under a
temporary name, then renamed into place (atomic on one filesystem). A replayed batch
finds its file there and writes nothing (``once_by = "target"``: the file is the
batch's own transaction id, as Delta's application transaction is); the ledger row is
written after it.

Registered when imported::

    import tests.plugins.jsonl_sink  # then [target] kind = "jsonl", path = "out/"
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal

import psycopg
import pyarrow as pa
from pydantic import Field

from flow_jobs.io.batch import BatchEntry, WriteResult
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.sinks import register
from flow_jobs.sinks.base import NoTargetYet, Sink
from flow_jobs.spec.targets import TargetSpec


class JsonLinesTarget(TargetSpec):
    """``[target]`` with ``kind = "jsonl"``: a folder of JSON lines files."""

    kind: Literal["jsonl"]
    path: str = Field(min_length=1)

    #: a batch's file is never rewritten: a row is never replaced nor deleted
    append_only = "a folder of JSON lines files"

    def describe(self) -> str:
        return self.path

    def short_name(self) -> str:
        return Path(self.path).name


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):  # fixed width: the files' text sorts as time does
        return value.isoformat(timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not written by the jsonl sink")


@register
class JsonLinesSink(Sink):
    """Each batch's rows in ``<path>/<batch id>-<query id>.jsonl``."""

    kind = "jsonl"
    spec_model = JsonLinesTarget
    once_by = "target"
    WRITES = "JSON lines"
    COMMIT = "JSON lines file"
    spec: JsonLinesTarget

    def ensure(self) -> None:
        Path(self.spec.path).mkdir(parents=True, exist_ok=True)

    def writing(self) -> str:
        return (
            f"each batch's rows as JSON lines in {self.spec.path}/<batch id>-<query id>.jsonl, "
            "written under a temporary name and renamed into place: a replayed batch finds "
            "its file there and writes nothing"
        )

    def write(
        self, rows: pa.Table, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        name = f"{entry.batch_id:08d}-{entry.query_id}.jsonl"
        final = Path(self.spec.path) / name
        if final.exists():  # a replay: written before the crash
            return WriteResult(True, 0, 0, name)
        if self.closed is not None:  # a new lineage: an earlier one's windows stay
            rows = rows.filter(self.closed.arrow_open(rows))
        if rows.num_rows == 0:
            return WriteResult(False, 0, 0, None)
        partial = final.with_name(f".{name}.partial")
        with partial.open("w", encoding="utf-8") as out:
            for row in rows.to_pylist():
                out.write(json.dumps(row, default=_json_value) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, final)
        return WriteResult(False, rows.num_rows, 0, name)

    @classmethod
    def location(cls, spec: JsonLinesTarget, store_place: str) -> str:  # type: ignore[override]
        return f"JSON lines files in {spec.path}"

    @classmethod
    def newest_rows(  # type: ignore[override]
        cls, spec: JsonLinesTarget, key: Sequence[str], store: LedgerStore | None, limit: int
    ) -> list[dict[str, Any]]:
        """Every file read (a test's folder is small), ordered by ``key`` descending,
        NULLs last."""
        folder = Path(spec.path)
        if not folder.is_dir():
            raise NoTargetYet(spec.path)
        rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl"))
                for line in f.read_text(encoding="utf-8").splitlines()]  # fmt: skip

        def by(row: dict[str, Any]) -> tuple[Any, ...]:
            return tuple((row[c] is not None, row[c] if row[c] is not None else "") for c in key)

        return sorted(rows, key=by, reverse=True)[:limit]
