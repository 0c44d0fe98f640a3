"""What an operator sees of ``flow-jobs run``: a progress display (a bar on a terminal,
plain lines elsewhere), no start-up noise from Spark, ``--version``, ``-v``/``-q``
anywhere on the command line."""

from __future__ import annotations

import logging
import os
import pty
import random
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.cli import build_parser, main
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import random_clicks, send, to_records
from tests.test_cli import _write_spec

#: Lines a user cannot act on (issues 16 and 47): gone unless -v.
NOISE = (
    "Using Spark's default log4j profile",
    "resolves to a loopback address",
    "Unable to load native-hadoop library",
    'Setting default log level to "WARN"',
    "Using incubator modules",
    "Disabling AQE",
    "applied migration",
    "Python worker",
    "could not bind on port",
    "WARN",
    "Traceback",
)


def _small_batches(spec: Path, per_batch: int) -> None:
    """The spec with ``max_offsets_per_trigger``: several micro-batches to show."""
    import tomllib

    doc = tomllib.loads(spec.read_text())
    doc["sources"][0]["max_offsets_per_trigger"] = per_batch
    spec.write_text(tomli_w.dumps(doc))


def _run_on_a_terminal(args: list[str], timeout_s: float = 240) -> tuple[int, str]:
    """The CLI in a process whose stdout and stderr are a pseudo-terminal."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "flow_jobs.cli", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"},
        close_fds=True,
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], timeout_s)
        if not ready:
            process.kill()
            raise TimeoutError("no output from the CLI")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process has ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_available_now_shows_a_progress_bar_on_a_terminal(
    broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(4), 300, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events))  # 2 partitions
    spec = _write_spec(workdir, broker, topic)
    _small_batches(spec, 100)
    code, screen = _run_on_a_terminal(["run", str(spec), "--available-now"])
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)  # the terminal's escapes
    assert code == 0, text[-3000:]
    assert "cli-check/clicks" in text  # a bar per source
    assert "300/300" in text and "100%" in text  # offsets done of the pinned total
    assert "rows/s" in text and "━" in text  # the rate, the bar
    assert "300 rows in" in text  # the summary line, after the bar
    assert text.count("pipeline cli-check: ") == 1  # once, though both go to the terminal
    for noise in NOISE:
        assert noise not in text, noise


def test_the_driver_jvm_s_own_lines_still_reach_stderr() -> None:
    """Its stderr goes through flow-jobs (``runtime.jvm_output``) to leave out the
    incubator note; a line the JVM logs still arrives."""
    script = (
        "from flow_jobs.runtime.session import build_spark_session\n"
        "spark = build_spark_session('local[1]', {'spark.ui.enabled': 'false'})\n"
        "log4j = spark.sparkContext._jvm.org.apache.logging.log4j\n"
        "log4j.LogManager.getLogger('flow-jobs-test').warn('a line from the JVM')\n"
        "print(spark.range(3).count())\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "3"
    assert "WARN flow-jobs-test: a line from the JVM" in ran.stderr, ran.stderr
    assert "incubator" not in ran.stderr, ran.stderr


def test_without_a_terminal_progress_is_plain_lines(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="flow_jobs")
    events = random_clicks(random.Random(8), 240, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec = _write_spec(workdir, broker, topic)
    _small_batches(spec, 60)
    assert main(["run", str(spec), "--available-now"]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if "cli-check progress:" in line]
    # At most one line per 10 s, and the last one at the end: here, first and last.
    assert lines, err[-2000:]
    assert "clicks 240/240 offsets (100%)" in lines[-1]
    assert "240 rows in" in lines[-1] and "window rows written" in lines[-1]
    assert "\x1b[" not in err  # no terminal escapes in a log
    # The figures agree: a line's batch is the batch id the log lines (and the ledger)
    # name, and before the first watermark there is none, as in the ledger.
    logs = "\n".join(r.getMessage() for r in caplog.records)
    logged = [int(m) for m in re.findall(r"cli-check batch (\d+): ", logs)]
    assert logged == list(range(len(logged))) and len(logged) >= 4
    shown = [int(line.rsplit("; batch ", 1)[1]) for line in lines]
    assert set(shown) <= set(logged) and shown[-1] == logged[-1]
    assert ("; watermark -; " in lines[0]) == (shown[0] == 0)  # none before batch 1 ran
    assert re.search(r"cli-check batch 0: 60 rows in, .* watermark -$", logs, re.M)
    assert "1970-01-01" not in err + logs
    summary = [line for line in (err + out).splitlines() if line.startswith("pipeline cli-check:")]
    assert len(summary) == 1 and summary[0] in out  # once, on stdout


def test_quiet_shows_no_progress(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(2), 50)))
    spec = _write_spec(workdir, broker, topic)
    assert main(["run", str(spec), "--available-now", "-q"]) == 0  # -q after the command
    captured = capsys.readouterr()
    assert "progress:" not in captured.err
    assert " INFO " not in captured.err  # warnings and errors only
    assert "50 rows in" in captured.out  # the result still prints


def test_version_and_verbosity_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert re.match(r"flow-jobs \S+ \(PySpark 4\.3\.\d+, Python 3\.11", capsys.readouterr().out)
    parser = build_parser()
    for argv in (["-v", "validate", "x.toml"], ["validate", "x.toml", "-v"]):
        args = parser.parse_args(argv)
        assert args.verbose and not args.quiet
    for argv in (["-q", "state", "show", "p"], ["state", "show", "p", "-q"]):
        args = parser.parse_args(argv)
        assert args.quiet and not args.verbose
    args = parser.parse_args(["validate", "x.toml"])
    assert not args.verbose and not args.quiet
    with pytest.raises(SystemExit):
        parser.parse_args(["validate", "x.toml", "-v", "-q"])  # one or the other


def test_a_refused_batch_after_a_stop_leaves_no_traceback_from_py4j(spark: SparkSession) -> None:
    """A batch that starts between a stop request and ``query.stop()`` is refused by the
    sink (``StopRequested``); py4j logs that with a traceback from its callback thread,
    at any moment around the stop. Once a run has stopped, such a record is dropped;
    any other error py4j logs passes this filter (and shows with -v: the run's error
    line says it otherwise, ``configure_logging``)."""
    from flow_jobs.runtime.sink import StopRequested
    from flow_jobs.runtime.stopping import DropStopRequested, quiet_expected_stop

    with quiet_expected_stop(spark):
        pass
    dropping = [
        f for f in logging.getLogger("py4j.clientserver").filters
        if isinstance(f, DropStopRequested)
    ]  # fmt: skip
    assert len(dropping) == 1

    def logged(error: Exception) -> logging.LogRecord:
        try:
            raise error
        except Exception:
            message = "There was an exception while executing the Python Proxy"
            return logging.LogRecord(
                "py4j.clientserver", logging.ERROR, __file__, 0, message, None, sys.exc_info()
            )

    assert not dropping[0].filter(logged(StopRequested("batch 7 refused: a stop was requested")))
    assert dropping[0].filter(logged(ValueError("x")))
