"""What a materialization carries: the run's figures, the ledger's offsets and
watermarks, and a preview of the target's newest rows (a bounded query, never a full
read of the target)."""

from __future__ import annotations

from typing import Any

from dagster import MetadataValue

from flow_jobs.sinks import target_summary
from flow_jobs.spec.models import PipelineSpec

PREVIEW_ROWS = 10


def run_metadata(runner: Any, spec: PipelineSpec, summary: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "input_rows": summary.input_rows,
        "windows_emitted": summary.windows_inserted + summary.windows_updated,
        "windows_inserted": summary.windows_inserted,
        "windows_updated": summary.windows_updated,
        "late_rows": summary.late_rows,
        "dead_lettered_rows": summary.dead_lettered,
        "global_watermark": summary.watermark or "",
        "batches": summary.batches,
        "target": target_summary(spec.target),
        # as the run's summary line and `flow-jobs state show` say it ("Delta version 7")
        "target_commit": summary.target_commit_text,
        "query_id": summary.query_id,
    }
    ledger = runner.ledger
    if ledger is not None:
        rows = [
            r
            for r in ledger.recent_batches(spec.name, 1000)
            if r["query_id"] == str(summary.query_id)
        ]
        if rows:
            metadata["batch_ids"] = f"{rows[0]['batch_id']}-{rows[-1]['batch_id']}"
            metadata["source_watermarks"] = MetadataValue.json(rows[-1]["source_watermarks"] or {})
            metadata["end_offsets"] = MetadataValue.json(rows[-1]["end_offsets"] or {})
    preview = preview_rows(spec, runner)
    if preview:
        metadata["preview"] = MetadataValue.md(markdown_table(preview))
    return metadata


def preview_rows(spec: PipelineSpec, runner: Any) -> list[dict[str, Any]]:
    """The newest rows of the target (by its first natural-key columns)."""
    from flow_jobs.sinks import newest_rows
    from flow_jobs.sinks.base import NoTargetYet

    try:
        return newest_rows(spec, runner.compiled.natural_key, runner.ledger, PREVIEW_ROWS)
    except NoTargetYet:
        return []


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """Rows as a Markdown table for Dagster's UI (bytes shown by their length)."""
    columns = list(rows[0])

    def cell(v: Any) -> str:
        if isinstance(v, bytes):
            return f"<{len(v)} bytes>"
        return "" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
