"""``flow-jobs validate SPEC.toml`` and ``flow-jobs run SPEC.toml [--available-now]``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from flow_jobs.plan.errors import PlanError
from flow_jobs.spec import SpecError, load_spec
from flow_jobs.spec.models import PipelineSpec

EXIT_OK = 0
EXIT_INVALID = 1  # the spec is invalid, or the pipeline failed
EXIT_USAGE = 2  # argparse's own code for bad arguments


def _describe(spec: PipelineSpec) -> str:
    join = spec.transform.join
    target = f"{spec.target.kind} {spec.target.path}"
    if join is not None:
        lower, upper = join.bounds
        then = f", then a {spec.window.kind} window" if spec.has_window else ""
        return (
            f"pipeline {spec.name!r}: {join.how} join of {join.left_source} and "
            f"{join.right_source} on {', '.join(join.left_keys)} within "
            f"[{lower}, {upper}] ms{then} -> {target}"
        )
    w = spec.window
    size = {
        "hopping": f"{w.duration_ms} ms every {w.hop_ms} ms",
        "session": f"with a {w.gap_ms} ms gap",
        "sliding": f"{w.duration_ms} ms per event",
        "count_hopping": f"of {w.count} events every {w.step}",
    }.get(w.kind, f"of {w.count} events" if w.is_count_based else f"{w.duration_ms} ms")
    return (
        f"pipeline {spec.name!r}: {w.kind} window {size} over "
        f"{', '.join(s.name for s in spec.sources)} -> {spec.target.kind} {spec.target.path}"
    )


def _validate(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    print(f"{args.spec}: valid — {_describe(spec)}")
    if args.plan:
        from flow_jobs.runtime.runner import PipelineRunner

        runner = PipelineRunner(spec)
        print("plan (spec feature -> Spark operator):")
        for choice in runner.compiled.operators:
            print(f"  {choice.feature:<40} {choice.operator}")
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from flow_jobs.runtime.runner import PipelineFailed, PipelineRunner

    spec = load_spec(args.spec)
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        logging.getLogger("flow_jobs").info(
            "%s received: stopping after the batch in flight", signal.Signals(signum).name
        )
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        summary = PipelineRunner(spec, stop_event=stop).run(available_now=args.available_now)
    except PipelineFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    print(summary.describe())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flow-jobs",
        description="Windowed aggregations on Spark Structured Streaming, from TOML specs.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    validate = commands.add_parser("validate", help="check a spec; exit non-zero if invalid")
    validate.add_argument("spec", help="path to a pipelines/*.toml file")
    validate.add_argument(
        "--plan",
        action="store_true",
        help="also compile it with Spark (column names and types) and print the operators",
    )
    validate.set_defaults(handler=_validate)

    run = commands.add_parser("run", help="run a pipeline")
    run.add_argument("spec", help="path to a pipelines/*.toml file")
    run.add_argument(
        "--available-now",
        action="store_true",
        help="process everything available, emit what the watermark closes, exit 0",
    )
    run.set_defaults(handler=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return int(args.handler(args))
    except (SpecError, PlanError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
