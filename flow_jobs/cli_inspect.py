"""``flow-jobs inspect NAME_OR_SPEC``: a pipeline's open windows and join buffers, and
why each window is still open (``flow_jobs.runtime.inspect``), as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import psycopg
from rich.console import Console

from flow_jobs import tables
from flow_jobs.cli_specs import resolve_spec
from flow_jobs.runtime.inspect import (
    NO_STATE,
    NOT_DECODED,
    StateReport,
    inspect_state,
    state_absent,
)
from flow_jobs.spec.models import PipelineSpec


class InspectUsageError(ValueError):
    """A command line ``inspect`` refuses (the CLI's exit code 2)."""


def add_inspect_command(commands: Any) -> argparse.ArgumentParser:
    inspect = commands.add_parser(
        "inspect",
        help="the open windows (partial aggregates, what closes them) and join buffers in a "
        "pipeline's state",
    )
    inspect.add_argument(
        "pipeline",
        help="the spec file, or the pipeline's name (looked up in $FLOW_JOBS_PIPELINES_DIR, "
        "else ./pipelines)",
    )
    inspect.add_argument("--spec", help="the spec file, when PIPELINE is a name")
    inspect.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only the windows (join rows) whose group_by column (join key) KEY equals VALUE; "
        "repeatable",
    )
    inspect.add_argument(
        "--limit", type=int, default=20, help="at most N windows and join rows (default 20)"
    )
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    inspect.set_defaults(handler=run_inspect)
    return inspect


def run_inspect(args: argparse.Namespace) -> int:
    spec = resolve_spec(args.pipeline, args.spec)
    groups = parse_groups(args.group, spec)
    if args.limit < 1:
        raise InspectUsageError(f"--limit {args.limit}: give a number of windows >= 1")
    if state_absent(spec.checkpoint_location()):
        # Nothing to read: no Spark, no state store started for it.
        report = StateReport(spec.name, spec.checkpoint_location(), note=NO_STATE)
    else:
        report = _read(spec, groups, args.limit)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        render(report, spec, tables.console())
    return 0


def _read(spec: PipelineSpec, groups: dict[str, str], limit: int) -> StateReport:
    from flow_jobs.ledger.store import LedgerStore
    from flow_jobs.runtime.session import session_for

    try:
        store: LedgerStore | None = LedgerStore.for_spec(spec)
    except psycopg.Error as e:  # the global watermark is in the checkpoint: go on
        print(f"warning: state store: {str(e).strip()}; no per-source watermarks", file=sys.stderr)
        store = None
    return inspect_state(session_for(spec.spark), spec, store=store, groups=groups, limit=limit)


def parse_groups(items: list[str], spec: PipelineSpec) -> dict[str, str]:
    stages = spec.transform.stages()
    allowed = list(dict.fromkeys(k for stage in stages[::-1] for k in stage.key_columns()))
    groups = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in allowed:
            raise InspectUsageError(
                f"--group {item}: give KEY=VALUE with KEY one of the pipeline's group_by "
                f"columns or join keys ({', '.join(allowed) or 'it has none'})"
            )
        groups[key] = value
    return groups


# -- the table -----------------------------------------------------------------------


def render(report: StateReport, spec: PipelineSpec, console: Console) -> None:
    if not report.has_state:
        console.print(f"pipeline {report.pipeline}: {report.note or NO_STATE}")
        return
    console.print(
        f"pipeline {report.pipeline}: state at micro-batch {report.batch_id} "
        f"(checkpoint {report.checkpoint})"
    )
    console.print(_watermarks(report))
    held = {stage.HOLDS for stage in spec.transform.stages()}
    if "windows" in held:
        _window_table(report, spec, console)
    if "rows" in held:
        _join_table(report, console)
    if report.note:
        console.print(f"note: {report.note}")


def _watermarks(report: StateReport) -> str:
    text = f"watermark {_cell(report.watermark)}"
    if report.source_watermarks:
        marks = ", ".join(f"{s} {_cell(m)}" for s, m in report.source_watermarks.items())
        text += f"; per source: {marks}"
    if report.held_back_by:
        text += f"; held back by {', '.join(report.held_back_by)}"
    return text


def _window_table(report: StateReport, spec: PipelineSpec, console: Console) -> None:
    w = spec.window
    total = "?" if report.open_windows is None else report.open_windows
    if not report.windows:
        console.print(f"open windows: {total}")
        return
    console.print(f"open windows: {total} (the first {len(report.windows)} to close)")
    table = tables.table((), ())
    counted = w.is_count_based
    for name in ("window start", "window end", *(["index"] if counted else []), *w.group_by):
        table.add_column(name, no_wrap=True)
    revisions = any(x.revision is not None for x in report.windows)
    if revisions:
        table.add_column("revision", justify="right")
    for a in w.aggregations:
        table.add_column(a.as_, justify="right")
    table.add_column("closes when / waiting for")
    for x in report.windows:
        table.add_row(
            _cell(x.start),
            _cell(x.end),
            *([_cell(x.index)] if counted else []),
            *(_cell(x.group.get(g)) for g in w.group_by),
            *([_cell(x.revision)] if revisions else []),
            *(_cell(x.aggregates.get(a.as_)) for a in w.aggregations),
            x.closes_when,
        )
    tables.print_on(console, table)


def _join_table(report: StateReport, console: Console) -> None:
    rows = report.join_rows
    console.print(f"buffered join rows: {report.buffered_join_rows}"
                  + (f" (the first {len(rows)} by event time)" if rows else ""))  # fmt: skip
    if not rows:
        return
    table = tables.table((), ())
    for name in ("side", "key", "event time", "row", "evicted"):
        table.add_column(name)
    for r in rows:
        table.add_row(
            r.side,
            ", ".join(f"{k}={_cell(v)}" for k, v in r.key.items()),
            _cell(r.event_time),
            ", ".join(f"{k}={_cell(v)}" for k, v in r.row.items()),
            r.evicted_when,
        )
    tables.print_on(console, table)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if value == NOT_DECODED:
        return NOT_DECODED
    if hasattr(value, "strftime"):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        ms = value.microsecond // 1000
        return text + (f".{ms:03d}" if ms else "")
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, list):
        return f"[{len(value)} values]"
    return str(value)
