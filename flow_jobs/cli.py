"""``flow-jobs validate|run|inspect|reset|state show|pack``: the command-line contract
(README.md, "Commands"; docs/guide/operating.md)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from flow_jobs.cli_inspect import InspectUsageError, add_inspect_command
from flow_jobs.cli_specs import SpecUsageError, UnknownPipeline
from flow_jobs.cli_store import (
    StoreUsageError,
    add_show_commands,
    add_store_options,
    require_known,
    store_for,
)
from flow_jobs.errors import PlanError, TargetError
from flow_jobs.instants import iso
from flow_jobs.io.checkpoint_claim import IncompatibleSpec
from flow_jobs.ledger.run_lock import PipelineBusy
from flow_jobs.ledger.store import refuse_incompatible
from flow_jobs.locations import local_path
from flow_jobs.one_line import pipeline_summary
from flow_jobs.runtime.checkpoint import retire_checkpoint
from flow_jobs.runtime.display import configure_logging, make_display
from flow_jobs.runtime.pack import DEFAULT_ARCHIVE, pack
from flow_jobs.runtime.preflight import SourceUnavailable, check_sources
from flow_jobs.secrets import redact
from flow_jobs.spec import SPEC_SUFFIXES, SpecError, load_spec, sql_twin, toml_twin
from flow_jobs.spec.models import aware_instant

Handler = Callable[[argparse.Namespace], int]


class UsageError(ValueError):
    """A command line the CLI refuses (exit code 2, like argparse's own)."""


#: The other commands' own refusals of a command line (exit code 2).
USAGE_ERRORS = (UsageError, InspectUsageError, StoreUsageError, SpecUsageError)


EXIT_OK = 0
EXIT_INVALID = 1  # the spec is invalid, or the pipeline failed
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_BUSY = 3  # another run (or reset) of the pipeline is in progress: try again later


def _validate(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    for i, source in enumerate(spec.sources):
        if source.registry_format:  # its schema is the registry's: reachable, mappable
            from flow_jobs.plan.source_schemas import payload_schema

            payload_schema(source, i)  # and a declared schema agrees with it (no JVM)
    print(f"{args.spec}: valid — {pipeline_summary(spec)}")
    for warning in spec.warnings():
        print(f"warning: {warning}")
    if args.plan:
        from flow_jobs.runtime.runner import PipelineRunner

        if _written_in_sql(args.spec):
            print("as TOML (the same spec, plan and fingerprint; flow-jobs sql-to-toml):")
            print(redact(toml_twin(args.spec)).rstrip())

        print("plan (each part of the pipeline -> what runs it):")
        for line in PipelineRunner(spec).describe():
            print(f"  {line.part:<40} {line.how}")
    return EXIT_OK


def _written_in_sql(path: str) -> bool:
    """A ``.sql`` pipeline, or a TOML one whose ``[transform].sql`` is the window or
    the join (lifted into other keys than it was written with)."""
    if path.endswith(".sql"):
        return True
    import tomllib

    from flow_jobs.spec.loader import read_document

    with open(path, encoding="utf-8") as f:
        text = f.read()
    return read_document(text, path) != tomllib.loads(text)


def _sql_to_toml(args: argparse.Namespace) -> int:
    print(toml_twin(args.spec).rstrip())
    return EXIT_OK


def _toml_to_sql(args: argparse.Namespace) -> int:
    print(sql_twin(args.spec).rstrip())
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from flow_jobs.runtime.runner import SUMMARY_LOG, PipelineFailed, PipelineRunner

    spec = load_spec(args.spec)
    check_sources(spec)  # before the JVM starts: a wrong address or topic fails at once
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        logging.getLogger("flow_jobs").info(
            "%s received: stopping after the batch in flight", signal.Signals(signum).name
        )
        stop.set()

    summary_level = SUMMARY_LOG.level
    SUMMARY_LOG.setLevel(logging.WARNING)  # printed below, on stdout: once
    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    display = make_display(sys.stderr, quiet=args.quiet)
    try:
        # A spec its checkpoint cannot resume under is refused before the JVM starts.
        refuse_incompatible(spec, args.spec)
        runner = PipelineRunner(spec, stop_event=stop, sources_checked=True, spec_path=args.spec)
        summary = runner.run(available_now=args.available_now, display=display)
    except (PipelineFailed, IncompatibleSpec) as e:
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return EXIT_INVALID
    finally:  # main() may run inside another program (a test, a notebook)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        SUMMARY_LOG.setLevel(summary_level)
    print(summary.describe())
    return EXIT_OK


def _reset(args: argparse.Namespace) -> int:
    try:
        replay_from = aware_instant(args.replay_from, "--from") if args.replay_from else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    store, spec, name = store_for(args)
    require_known(store, name, "reset")
    checkpoint = spec.checkpoint_location() if spec is not None else args.checkpoint
    if checkpoint is None:
        print(
            f"error: give the spec (flow-jobs reset {name} --spec SPEC.toml) or --checkpoint: "
            "reset moves the current checkpoint aside",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if local_path(checkpoint) is None:
        # A checkpoint behind a URI moves through Spark's Hadoop FileSystem, configured
        # as the spec's runs configure it (flow_jobs.io.checkpoint_files).
        from flow_jobs.runtime.session import build_spark_session, session_for

        session_for(spec.spark) if spec is not None else build_spark_session()
    try:
        with store.run_lock(name, "reset"):  # never under a running query's feet
            version = store.reset(name, lambda old: retire_checkpoint(checkpoint, old), replay_from)
    except (KeyError, ValueError) as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:  # the checkpoint could not be moved: the generation is unchanged
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    print(
        f"pipeline {name}: state version {version} starts with the next run (a new "
        f"checkpoint at {checkpoint}; the previous one is kept beside it)"
    )
    if replay_from is not None:
        at = iso(replay_from)
        print(
            f"it reads every source from {at} (Kafka record "
            "timestamps) and rewrites the windows starting at or after it; earlier windows "
            "keep their rows"
        )
    return EXIT_OK


def _pack(args: argparse.Namespace) -> int:
    archive = pack(args.output, include=args.include)
    print(f"{archive}: set [spark] archive (or FLOW_JOBS_SPARK_ARCHIVE) to run on a cluster")
    return EXIT_OK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("flow-jobs")
    except PackageNotFoundError:  # run from a source tree that is not installed
        ours = "unknown"
    return f"flow-jobs {ours} (PySpark {version('pyspark')}, Python {sys.version.split()[0]})"


def _verbosity(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``-v``/``-q``, before or after the subcommand: on a subcommand they default to
    SUPPRESS, so that one given before it is not reset by the subcommand's default."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="debug logging, and Spark's own start-up and INFO logs",
        **default,
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="warnings and errors only; no progress display",
        **default,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flow-jobs",
        description="Windowed aggregations on Spark Structured Streaming, from TOML specs.",
    )
    parser.add_argument("--version", action="version", version=_version())
    _verbosity(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True)

    def spec_command(name: str, about: str, flag: str, flag_help: str, handler: Handler) -> None:
        """A command over one spec file, with one on/off option."""
        command = commands.add_parser(name, help=about)
        command.add_argument("spec", help="path to a pipelines/*.toml or *.sql file")
        command.add_argument(flag, action="store_true", help=flag_help)
        command.set_defaults(handler=handler)

    spec_command(
        "validate",
        "check a spec; exit non-zero if invalid",
        "--plan",
        "also compile it with Spark (column names and types) and print what runs each part",
        _validate,
    )
    spec_command(
        "run",
        "run a pipeline",
        "--available-now",
        "process everything available, emit what the watermark closes, exit 0",
        _run,
    )

    sql_to_toml = commands.add_parser(
        "sql-to-toml",
        help="print the TOML spec a SQL pipeline (or a windowed [transform].sql) equals",
    )
    sql_to_toml.add_argument("spec", help="path to a *.sql pipeline or a *.toml spec")
    sql_to_toml.set_defaults(handler=_sql_to_toml)
    toml_to_sql = commands.add_parser(
        "toml-to-sql",
        help="print the .sql pipeline file (Flink SQL's spelling) a TOML spec equals",
    )
    toml_to_sql.add_argument("spec", help="path to a *.toml spec (or a *.sql pipeline)")
    toml_to_sql.set_defaults(handler=_toml_to_sql)

    add_inspect_command(commands)

    reset = commands.add_parser(
        "reset",
        help="start a new checkpoint generation (after an incompatible spec change)",
    )
    add_store_options(reset)
    reset.add_argument("--checkpoint", help="the checkpoint to move aside, without a spec")
    reset.add_argument(
        "--from",
        dest="replay_from",
        metavar="TIME",
        help="replay from this time (ISO-8601 with a zone, e.g. 2026-11-01T10:00:00Z): the "
        "new checkpoint starts every source at its first record stamped at or after it",
    )
    reset.set_defaults(handler=_reset)

    pack = commands.add_parser(
        "pack",
        help="build the Python environment a cluster's executors run ([spark] archive)",
    )
    pack.add_argument(
        "-o",
        "--output",
        default=DEFAULT_ARCHIVE,
        help=f"the archive to write (default {DEFAULT_ARCHIVE}; .tar.gz, .tar or .zip)",
    )
    pack.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="a module or package executors also need (e.g. a spec's reduce functions)",
    )
    pack.set_defaults(handler=_pack)

    add_show_commands(commands, lambda command: _verbosity(command, suppress=True))
    for command in commands.choices.values():
        _verbosity(command, suppress=True)
    return parser


def _spec_file(args: argparse.Namespace) -> str | None:
    """The spec file a command was given, as given."""
    pipeline = getattr(args, "pipeline", None)
    if pipeline and pipeline.endswith(SPEC_SUFFIXES):
        return str(pipeline)
    spec = getattr(args, "spec", None)
    return str(spec) if spec else None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    if args.verbose:  # Spark's own profile and INFO logs (runtime.session), unless set
        os.environ.setdefault("FLOW_JOBS_SPARK_LOG_LEVEL", "INFO")
    configure_logging(level)
    try:
        return int(args.handler(args))
    except USAGE_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (SpecError, UnknownPipeline, SourceUnavailable) as e:
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return EXIT_INVALID
    except PlanError as e:  # found compiling with Spark: where, as a spec error says it
        origin = _spec_file(args)
        print(f"error: {origin + ': ' if origin else ''}{redact(str(e))}", file=sys.stderr)
        return EXIT_INVALID
    except psycopg.Error as e:  # connect_postgres has masked any password already
        print(f"error: state store: {redact(str(e)).strip()}", file=sys.stderr)
        return EXIT_INVALID
    except PipelineBusy as e:  # run and reset: one at a time per pipeline
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BUSY
    except TargetError as e:
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return EXIT_INVALID
    except Exception as e:  # the last resort: one line all the same; -v shows where
        if args.verbose:
            raise
        first = (redact(str(e)).strip().splitlines() or [""])[0]
        print(f"error: {type(e).__name__}: {first} (-v shows the traceback)", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
