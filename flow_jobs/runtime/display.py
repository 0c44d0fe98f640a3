"""How far along a run is: a live progress bar on a terminal, periodic lines elsewhere.

An ``--available-now`` run knows where it ends (the end offsets it pinned at start), so
it can say how much is left: per source, the offsets done of the run's total, events/s,
an ETA, the global watermark and the windows written. On a terminal that is a ``rich``
progress display (on stderr, so stdout keeps the summary line); in CI, in Dagster's
logs or piped to a file it is a plain line at most every ``interval_s`` seconds, and
once at the end. A continuous run has no end: it shows offsets done and the rate.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from flow_jobs.spec.models import PipelineSpec

log = logging.getLogger("flow_jobs.progress")


@dataclass(frozen=True)
class SourceExtent:
    """One source's offsets for a run, per partition: where it started and (in an
    available-now run) where it ends, as the reader pinned them."""

    topic: str
    start: dict[int, int]
    end: dict[int, int] | None

    @property
    def total(self) -> int | None:
        if self.end is None:
            return None
        return sum(max(0, high - self.start.get(p, high)) for p, high in self.end.items())

    def done(self, reached: dict[int, int]) -> int:
        """Offsets done up to ``reached`` (a batch's end offsets)."""
        return sum(max(0, o - self.start.get(p, o)) for p, o in reached.items())


@dataclass
class Snapshot:
    """A run's figures after a micro-batch."""

    pipeline: str
    #: source name -> offsets done since the run started
    done: dict[str, int]
    #: source name -> the run's extent (its end is None in a continuous run)
    extents: dict[str, SourceExtent]
    input_rows: int = 0
    windows_written: int = 0
    dead_lettered: int = 0
    watermark: str | None = None
    batches: int = 0
    #: the newest batch's id, as the log lines and the ledger number it
    batch_id: int | None = None
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def offsets_done(self) -> int:
        return sum(self.done.values())

    @property
    def offsets_total(self) -> int | None:
        totals = [e.total for e in self.extents.values()]
        return None if not totals or any(t is None for t in totals) else sum(totals)  # type: ignore[misc]

    @property
    def rate(self) -> float:
        """Input rows per second since the run started."""
        return self.input_rows / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        total, done = self.offsets_total, self.offsets_done
        if total is None or done <= 0 or self.elapsed_s <= 0:
            return None
        return max(0.0, (total - done) * self.elapsed_s / done)

    def line(self) -> str:
        """The figures as one plain line (logs, CI, Dagster)."""
        parts = []
        for name, extent in self.extents.items():
            done, total = self.done.get(name, 0), extent.total
            if total is None:
                parts.append(f"{name} {done:,} offsets")
            else:
                share = 100.0 * min(done, total) / total if total else 100.0
                parts.append(f"{name} {min(done, total):,}/{total:,} offsets ({share:.0f}%)")
        eta = self.eta_s
        batch = "-" if self.batch_id is None else self.batch_id
        return (
            f"{self.pipeline} progress: {', '.join(parts)}; {self.input_rows:,} rows in, "
            f"{per_second(self.rate)} rows/s"
            + (f", ETA {eta:,.0f} s" if eta is not None else "")
            + f"; watermark {self.watermark or '-'}; {self.windows_written:,} window rows "
            f"written, {self.dead_lettered:,} dead-lettered; batch {batch}"
        )


def per_second(rate: float) -> str:
    """A rate with the digits that matter: 12,345 or 0.3, never 0 for a few rows."""
    if rate >= 10:
        return f"{rate:,.0f}"
    if rate >= 0.1 or rate == 0:
        return f"{rate:.1f}".removesuffix(".0")
    return "<0.1"


class Display(Protocol):
    def update(self, snapshot: Snapshot) -> None: ...

    def close(self, snapshot: Snapshot | None) -> None: ...


class Quiet:
    """No progress display (``-q``)."""

    def update(self, snapshot: Snapshot) -> None:
        pass

    def close(self, snapshot: Snapshot | None) -> None:
        pass


class Lines:
    """A plain line at most every ``interval_s`` seconds, and the last one at the end."""

    def __init__(self, write: Any, interval_s: float = 10.0) -> None:
        self.write = write
        self.interval_s = interval_s
        self._last = -float("inf")
        self._pending: Snapshot | None = None

    def update(self, snapshot: Snapshot) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            self._pending = None
            self.write(snapshot.line())
        else:
            self._pending = snapshot

    def close(self, snapshot: Snapshot | None) -> None:
        last = snapshot or self._pending
        if last is not None:
            self.write(last.line())


_CONSOLES: dict[int, Any] = {}


def console_for(stream: IO[str]) -> Any:
    """One ``rich`` console per terminal stream: the progress bar and the log lines
    printed while it is live (``rich.logging.RichHandler``) must share it, or the lines
    tear the bar."""
    from rich.console import Console

    return _CONSOLES.setdefault(id(stream), Console(file=stream))


class Bar:
    """A ``rich`` progress display: one bar per source, and a status line."""

    def __init__(self, stream: IO[str]) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console_for(stream)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            transient=False,
        )
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def update(self, snapshot: Snapshot) -> None:
        status = (
            f"wm {snapshot.watermark or '-'} · {snapshot.windows_written:,} windows · "
            f"{snapshot.dead_lettered:,} dead"
        )
        for name, extent in snapshot.extents.items():
            if name not in self.tasks:
                self.tasks[name] = self.progress.add_task(
                    f"{snapshot.pipeline}/{name}", total=extent.total, rate="", status=""
                )
            done = snapshot.done.get(name, 0)
            total = extent.total
            self.progress.update(
                self.tasks[name],
                completed=min(done, total) if total is not None else done,
                total=total,
                rate=f"{per_second(snapshot.rate)} rows/s",
                status=status,
            )

    def close(self, snapshot: Snapshot | None) -> None:
        if snapshot is not None:
            self.update(snapshot)
        self.progress.stop()


def run_extents(
    spec: PipelineSpec, checkpoint: str, available_now: bool
) -> dict[str, SourceExtent]:
    """Each source's start (the newest committed batch's end offsets, or for a fresh
    checkpoint the topic's start or end as ``starting_offsets`` says) and, available-now,
    its end (the topic's end offsets now, as the reader pins them when the query starts).
    Empty when the broker cannot be asked: the display then shows no totals."""
    from flow_jobs.kafka.offsets import source_watermarks
    from flow_jobs.runtime.idleness import run_start

    begin = run_start(spec, checkpoint)
    extents: dict[str, SourceExtent] = {}
    for source in spec.sources:
        try:
            marks = source_watermarks(source, "flow-jobs-progress")
        except Exception as e:  # a display's figures: never the reason a run fails
            log.debug("%s: no progress totals for source %s: %s", spec.name, source.name, e)
            return {}
        resumed = begin.get(source.name)
        fresh = {p: high if source.starting_offsets == "latest" else low
                 for p, (low, high) in marks.items()}  # fmt: skip
        start = {p: (resumed or {}).get(p, fresh[p]) for p in marks}
        end = {p: high for p, (_low, high) in marks.items()} if available_now else None
        extents[source.name] = SourceExtent(source.topic, start, end)
    return extents


def configure_logging(level: int, stream: IO[str] | None = None) -> None:
    """The process's log lines on ``stream`` (stderr): through the progress bar's console
    on a terminal, so that they print above the bar; plain, time-stamped lines
    elsewhere. Every handler masks credentials (``RedactingFilter``)."""
    from flow_jobs.secrets import RedactingFilter

    stream = stream or sys.stderr
    if stream.isatty():
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(
            console=console_for(stream), show_path=False, log_time_format="%H:%M:%S"
        )
        logging.basicConfig(level=level, format="%(name)s: %(message)s", handlers=[handler])
    else:
        logging.basicConfig(
            level=level,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=stream,
        )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())
    # py4j's own loggers (each Python callback from the JVM is an INFO line), pgserver's
    # every pg_ctl call: not news to a user.
    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver", "pgserver"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if level > logging.DEBUG:  # the run's error line says why; -v shows the traceback
        for name in ("py4j.java_gateway", "py4j.clientserver"):
            target = logging.getLogger(name)
            if not any(isinstance(f, _DropProxyTracebacks) for f in target.filters):
                target.addFilter(_DropProxyTracebacks())
    # platformdirs (under pgserver) warns once when XDG_RUNTIME_DIR is unset, as in a
    # container or CI: it falls back to /tmp, which is what we want.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


class _DropProxyTracebacks(logging.Filter):
    """Drops py4j's log of an exception raised in a Python callback (a micro-batch's
    ``foreachBatch``): the query fails with it, and the run's error line names it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "exception while executing the Python Proxy" not in record.getMessage()


def make_display(
    stream: IO[str] | None = None, *, quiet: bool = False, interval_s: float = 10.0
) -> Display:
    """A bar on a terminal, else plain lines on ``stream`` (default stderr)."""
    stream = stream or sys.stderr
    if quiet:
        return Quiet()
    if stream.isatty():
        return Bar(stream)
    return Lines(lambda text: print(text, file=stream, flush=True), interval_s)
