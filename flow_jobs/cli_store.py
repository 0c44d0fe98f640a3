"""``flow-jobs state show`` and ``flow-jobs target show``: what a pipeline has written,
in its ledger and in its target, and where the state store is that holds them
(``store_for``: ``--url-file``, the spec's ``[state_store]``, ``FLOW_STATE_STORE_URL``,
the embedded server). ``--psql`` opens psql on that database (the embedded server held
up while it runs)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rich.table import Table

from flow_jobs import tables
from flow_jobs.cli_specs import UnknownPipeline, resolve_spec
from flow_jobs.ledger.location import state_store_schema, state_store_url
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.secrets import redact
from flow_jobs.settings import Settings
from flow_jobs.sinks import describe_commit, sink_for
from flow_jobs.sinks.base import NoTargetYet
from flow_jobs.spec import SPEC_SUFFIXES, load_spec
from flow_jobs.spec.models import PipelineSpec


class StoreUsageError(ValueError):
    """A command line these commands refuse (the CLI's exit code 2)."""


def add_store_options(command: argparse.ArgumentParser) -> None:
    """A pipeline (its name, or its spec file) and where its state store is."""
    command.add_argument("pipeline", help="the pipeline's name, or its spec file")
    command.add_argument("--spec", help="the spec file (its [state_store] and checkpoint)")
    command.add_argument(
        "--url-file",
        help="a file holding the state store's URL (else the spec's, else "
        "$FLOW_STATE_STORE_URL, else the embedded one)",
    )
    # Accepted only to refuse it: a password on the command line shows in `ps` and the
    # shell history (and argparse would echo an unknown option with its value).
    command.add_argument("--url", help=argparse.SUPPRESS)
    command.add_argument("--schema", help="the state store's schema (default flow_jobs)")


def add_show_commands(commands: Any, verbosity: Any) -> None:
    """``state show`` and ``target show``."""
    state = commands.add_parser("state", help="read the state store")
    state_commands = state.add_subparsers(dest="state_command", required=True)
    show = state_commands.add_parser("show", help="the ledger's recent batches as a table")
    add_store_options(show)
    show.add_argument("--limit", type=int, default=20, help="how many batches (default 20)")
    show.add_argument("--psql", action="store_true", help="open psql on the state store")
    show.set_defaults(handler=run_state_show)

    target = commands.add_parser("target", help="read a pipeline's target")
    target_commands = target.add_subparsers(dest="target_command", required=True)
    rows = target_commands.add_parser(
        "show", help="the target's newest rows as a table (Delta, Postgres), or where it is"
    )
    add_store_options(rows)
    rows.add_argument("--limit", type=int, default=20, help="how many rows (default 20)")
    rows.add_argument("--psql", action="store_true", help="open psql on a Postgres target")
    rows.set_defaults(handler=run_target_show)
    for command in (*state_commands.choices.values(), *target_commands.choices.values()):
        verbosity(command)


def store_for(args: argparse.Namespace) -> tuple[LedgerStore, PipelineSpec | None, str]:
    """The state store a NAME (or a spec file) lives in, the spec if given, the name."""
    spec = load_spec(args.pipeline) if args.pipeline.endswith(SPEC_SUFFIXES) else None
    if spec is None and args.spec:
        spec = load_spec(args.spec)
    name = spec.name if spec is not None else args.pipeline
    return open_store(args, spec), spec, name


def open_store(args: argparse.Namespace, spec: PipelineSpec | None) -> LedgerStore:
    """``--url-file``, else the spec's ``[state_store]``, else ``FLOW_STATE_STORE_URL``,
    else the embedded one; migrated."""
    if getattr(args, "url", None):
        raise StoreUsageError(
            "--url is not accepted: a password on the command line shows in `ps` and the "
            "shell history; set FLOW_STATE_STORE_URL or give --url-file PATH"
        )
    if getattr(args, "url_file", None):
        url = Path(args.url_file).read_text(encoding="utf-8").strip()
    else:
        url = state_store_url(spec)
    store = LedgerStore(url, args.schema or state_store_schema(spec))
    store.migrate()
    return store


def _embedded(args: argparse.Namespace, spec: PipelineSpec | None) -> bool:
    """Whether ``open_store`` opened the embedded server."""
    configured = spec is not None and spec.state_store.url is not None
    from_env = Settings.from_env().state_store_url is not None
    return not (getattr(args, "url_file", None) or configured or from_env)


def require_known(store: LedgerStore, name: str, command: str) -> None:
    """``UnknownPipeline``, saying what to do, for a pipeline the store has never
    registered (no run of it started there)."""
    names = store.pipeline_names()
    if name in names:
        return
    known = f"it knows {', '.join(names)}" if names else "it knows no pipeline yet"
    raise UnknownPipeline(
        f"pipeline {name} is not in the state store (schema {store.schema}; {known}): "
        f"check the name, or give the spec file (flow-jobs {command} {name} --spec "
        "SPEC.toml) if its state store is another one; a pipeline is registered by its "
        "first run"
    )


# -- state show ----------------------------------------------------------------------


def run_state_show(args: argparse.Namespace) -> int:
    store, spec, name = store_for(args)
    require_known(store, name, "state show")
    if args.psql:
        return open_psql(store.url, search_path=store.schema)
    where = _where(store.url, _embedded(args, spec))
    print(f"pipeline {name}: ledger {store.schema}.batches in {where}")
    rows = store.recent_batches(name, args.limit)
    if not rows:
        print(f"pipeline {name}: no batches in the ledger ({store.schema})")
        return 0
    tables.show(format_batches(rows), *batch_notes(rows))
    return 0


def batch_notes(rows: list[dict[str, Any]]) -> list[str]:
    """What the ledger's table needs said under it: its generation column, and the
    replayed batches' star where one shows."""
    notes = ["(gen: the checkpoint generation; `flow-jobs reset` starts the next)"]
    if any(r["replayed"] for r in rows):
        notes.append("(* a replayed batch: its write was already committed)")
    return notes


def format_batches(rows: list[dict[str, Any]]) -> Table:
    """The ledger's rows as a table, oldest first."""

    def offsets(value: dict[str, Any] | None) -> str:
        if not value:
            return "-"
        parts = []
        for source, topics in value.items():
            for topic, partitions in topics.items():
                if topic.startswith("_"):  # "_data_loss", "_heartbeat": not offsets
                    continue
                parts.append(f"{source}:" + ",".join(f"{p}={o}" for p, o in partitions.items()))
        return " ".join(parts)

    def ts(value: Any) -> str:
        return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"

    def lag(value: Any) -> str:
        return f"{value.total_seconds():.0f}s" if value is not None else "-"

    def count(value: Any) -> str:
        return "-" if value is None else str(value)

    header = ("gen", "batch", "end offsets", "watermark", "lag", "in", "out", "late", "dlq",
              "target commit", "committed")  # fmt: skip
    body = [
        (
            r["state_version"],
            f"{r['batch_id']}{'*' if r['replayed'] else ''}",
            offsets(r["end_offsets"]),
            ts(r["global_watermark"]),
            lag(r["watermark_lag"]),
            count(r["input_rows"]),
            r["output_rows"],
            count(r["late_rows"]),
            r["dead_lettered_rows"],
            describe_commit(r["target_kind"], r["target_version"]),
            ts(r["committed_at"]),
        )
        for r in rows
    ]
    return tables.table(header, body, right=("in", "out", "late", "dlq"))


# -- target show ---------------------------------------------------------------------


def run_target_show(args: argparse.Namespace) -> int:
    """The target's newest rows (by its natural key: the newest windows first), after a
    line saying where it is and its last commit; a Kafka target says where to read."""
    if args.limit < 1:
        raise StoreUsageError(f"--limit {args.limit}: give a number of rows >= 1")

    spec = resolve_spec(args.pipeline, args.spec)
    store, name, target = open_store(args, spec), spec.name, spec.target
    last = store.recent_batches(name, 1) if name in store.pipeline_names() else []
    commit = describe_commit(target.kind, last[-1]["target_version"]) if last else "-"
    sink = sink_for(target)
    where = sink.location(target, _where(store.url, _embedded(args, spec)))
    schema = sink.psql_schema(target)
    if args.psql and schema is not None:
        return open_psql(store.url, search_path=schema)
    key = store.natural_key(name) or (spec.natural_key() if spec.has_window else [])
    try:
        rows = sink.newest_rows(target, key, store, args.limit)
    except NoTargetYet:
        print(f"pipeline {name}: target {where}: no table yet (the pipeline has not written)")
        return 0
    if rows is None:  # a kind not read back: where it is, and how to read it
        print(f"pipeline {name}: target {where} (last commit {commit}); "
              f"{sink.how_to_read(target, args.limit)}")  # fmt: skip
        return 0
    order = f"; the newest {len(rows)} by {', '.join(key)}" if key else ""
    print(f"pipeline {name}: target {where} (last commit {commit}{order}; times UTC)")
    if rows:
        columns = list(rows[0])
        body = [[_cell(r[c]) for c in columns] for r in reversed(rows)]
        numbers = [c for c in columns if isinstance(rows[0][c], int | float | Decimal)]
        tables.show(tables.table(columns, body, right=numbers))
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if hasattr(value, "strftime"):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        ms = value.microsecond // 1000
        return text + (f".{ms:03d}" if ms else "")
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return str(value)


# -- psql ----------------------------------------------------------------------------


def _where(url: str, embedded: bool) -> str:
    """A state store's database as a user reads it: its URL, password masked; the
    embedded server runs only while a flow-jobs process uses it."""
    if embedded:
        return f"{redact(url)} (the embedded server, up while flow-jobs uses it: --psql)"
    return f"{redact(url)} (psql it, or --psql)"


def open_psql(url: str, search_path: str) -> int:
    """psql on ``url``'s database, ``search_path`` first, the password in its environment
    (never on a command line); the psql on PATH, else the embedded server's own. The
    embedded server stays up while psql runs: this process holds it."""
    params = conninfo_to_dict(url)
    password = params.pop("password", None)
    env = {**os.environ, "PGOPTIONS": f"-c search_path={search_path},public"}
    if password:
        env["PGPASSWORD"] = str(password)
    psql = shutil.which("psql") or _embedded_psql()
    if psql is None:
        raise StoreUsageError("no psql on PATH: install PostgreSQL's client, or use its URL")
    return subprocess.run([psql, make_conninfo(**params)], env=env).returncode


def _embedded_psql() -> str | None:
    try:
        import pgserver
    except ImportError:
        return None
    path = Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
    return str(path) if path.exists() else None
