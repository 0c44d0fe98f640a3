"""What a target kind implements: ``Sink``, the writer of a micro-batch's rows and what
the CLI and Dagster ask of a target, and what the core hands it (``SinkOutput``).

Every batch is written at most once, with its ledger row (``flow_jobs.ledger.batch_ledger``):
a sink says how in ``once_by``, and ``BatchLedger.write`` does the rest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import pyarrow as pa

from flow_jobs.io.batch import BatchEntry, ClosedWindows, StagedFiles, Supersede, WriteResult
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.targets import TargetSpec

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame

    from flow_jobs.ledger.store import LedgerStore

#: How ``BatchLedger.write`` writes a batch at most once, by ``Sink.once_by``.
ONCE = {
    "target": "then the batch's ledger row in the state store",
    "ledger": "in one transaction with the batch's ledger row; a batch whose ledger row "
    "exists is skipped",
    "ledger-first": "a batch whose ledger row exists is skipped, and its ledger row is "
    "written after the flush: a crash between the two repeats the batch's rows (at least "
    "once; consumers dedupe on the key)",
}


class NoTargetYet(LookupError):
    """The target does not exist: the pipeline has not written yet."""


class TargetUnreadable(RuntimeError):
    """The target exists but cannot be read (the Dagster checks report it, failed)."""


@dataclass(frozen=True)
class SinkOutput:
    """What the pipeline writes, as compiled: the rows' schema and natural key."""

    schema: pa.Schema
    natural_key: tuple[str, ...]
    #: the natural key's columns that can hold NULL (outer-join sides, group_by columns)
    nullable_key: tuple[str, ...] = ()
    pipeline: str = ""


@dataclass(frozen=True)
class Crowded:
    """Groups of the target's rows (by some columns) holding more than a limit."""

    groups: int  # how many
    extra: int  # their rows beyond the limit, summed
    most: int  # the largest group's rows (0: none over)


class ExecutorInserts(Protocol):
    """A target's writer of a batch's data files on the executors (``Sink.inserts``)."""

    def stage(self, frame: DataFrame, batch_id: int) -> StagedFiles:
        """Run the micro-batch (its one action), each task writing its rows' file."""
        ...


class Sink(ABC):
    """One target kind: writes each micro-batch's rows, at most once, on the driver.

    Parameters
    ----------
    spec : TargetSpec
        The spec's ``[target]``, of this sink's ``spec_model``.
    output : SinkOutput
        The rows' schema and natural key, as the pipeline compiled them.
    store : LedgerStore or None
        The state store (its database holds the ledger); None when the sink is built
        only to be described (``validate --plan``): then it is never written.
    """

    #: its ``[target] kind``, and the model of its keys
    kind: ClassVar[str]
    spec_model: ClassVar[type[TargetSpec]]
    #: How a batch is written at most once (``BatchLedger.write``): "ledger", in its
    #: ledger row's transaction (``write`` gets that transaction's connection);
    #: "ledger-first", only while it has no ledger row; "target", by the target's own
    #: transaction id (a replayed write is a no-op), its ledger row after it.
    once_by: ClassVar[Literal["ledger", "ledger-first", "target"]]
    #: How it writes, in a few words (the CLI's one line, Dagster's description).
    WRITES: ClassVar[str]
    #: What its commit is called ("Delta version"): ``describe_commit``.
    COMMIT: ClassVar[str]

    def __init__(self, spec: TargetSpec, output: SinkOutput, store: LedgerStore | None) -> None:
        self.spec = spec
        self.output = output
        self.store = store
        self.description = spec.describe()
        #: windows an earlier checkpoint lineage wrote complete: inserted if absent,
        #: never updated (a fresh lineage may have seen only part of their rows)
        self.closed: ClosedWindows | None = None
        #: session windows emitted "current": what a row supersedes
        self.supersede: Supersede | None = None
        #: top_n emitted "current": a batch holds the whole top N of each partition it
        #: touches, and the target's other rows of those partitions are deleted
        self.ranked: tuple[str, ...] | None = None  # the partition columns
        #: a batch's rows hold ``flow_jobs.io.batch.DELETE``: a flagged row deletes its
        #: key's row (a change feed: ``[transform.mirror]``)
        self.deletes_flagged = False

    # -- the writer ------------------------------------------------------------------

    def protect_closed_windows(self, closed: ClosedWindows) -> None:
        self.closed = closed

    @abstractmethod
    def ensure(self) -> None:
        """Create the target if missing; refuse one whose columns differ
        (``flow_jobs.errors.TargetSchemaError``)."""

    @abstractmethod
    def write(
        self, rows: pa.Table | StagedFiles, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        """Write one batch's rows (never its ledger row); ``conn`` is the ledger row's
        transaction when ``once_by`` is "ledger", else None. The result's ``version``
        is the commit the ledger row keeps. ``StagedFiles``: the data files its
        ``inserts`` writer's executors wrote, to commit."""

    def version(self) -> str | None:
        """The target's commit as it stands (none: None)."""
        return None

    def inserts(self, query_id: str, plain_paths_shared: bool) -> ExecutorInserts | None:
        """For a pipeline whose batches only insert rows no earlier write holds (the
        runtime asks only then: ``flow_jobs.runtime.sink``): the writer whose executors
        write each batch's data files, whose list ``write`` then commits (a
        ``StagedFiles``). None: the batch's rows come to the driver, as for every other
        pipeline. ``plain_paths_shared``: the executors reach a plain path as the driver
        does (a local master); else only a URI is shared storage."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook; most sinks hold no client
        """Release clients at the end of a run."""

    # -- its words -------------------------------------------------------------------

    @abstractmethod
    def writing(self) -> str:
        """How a batch's rows are written (``describe`` adds the deletes and the once)."""

    def describe(self) -> list[PlanLine]:
        """Its ``validate --plan`` line."""
        deletes = []
        if self.supersede is not None:
            deletes.append(
                f"the rows each row supersedes (its group's overlapping {self.supersede.start}"
                f" to {self.supersede.end}) deleted in the same write"
            )
        if self.deletes_flagged:
            deletes.append("the rows a batch's deletes name by their key deleted in the same write")
        if self.ranked is not None:
            deletes.append(
                f"the rows of each ({', '.join(self.ranked)}) it touches that left the top "
                "deleted in the same write"
            )
        how = "; ".join([self.writing(), *deletes, ONCE[self.once_by]])
        return [PlanLine(f"target {self.kind}", how)]

    @classmethod
    def summary(cls, spec: TargetSpec) -> str:
        """The target in one phrase, without building it: how and where it writes."""
        return f"{cls.WRITES} into {spec.describe()}"

    @classmethod
    def describe_commit(cls, commit: str) -> str:
        """A commit its ``write`` returned, as every output says it ("Delta version 7")."""
        return f"{cls.COMMIT} {commit}"

    # -- read back (flow-jobs target show, Dagster) -------------------------------------

    @classmethod
    def location(cls, spec: TargetSpec, store_place: str) -> str:
        """Where the target is, for a reader ("Delta table ./data/x"); ``store_place``
        says where the state store's database is."""
        return f"{cls.kind} target {spec.describe()}"

    @classmethod
    def newest_rows(
        cls, spec: TargetSpec, key: Sequence[str], store: LedgerStore | None, limit: int
    ) -> list[dict[str, Any]] | None:
        """Its ``limit`` newest rows, newest first: ordered by ``key`` descending, NULLs
        last, read with a bounded query (never the whole target); ``NoTargetYet``
        before its first write. None: the kind is not read back (``how_to_read``)."""
        return None

    @classmethod
    def how_to_read(cls, spec: TargetSpec, limit: int) -> str:
        """For a kind not read back: how a user reads its ``limit`` newest rows."""
        return f"flow-jobs does not read {cls.kind} targets back"

    @classmethod
    def psql_schema(cls, spec: TargetSpec) -> str | None:
        """A target in the state store's database: the schema ``--psql`` opens on."""
        return None

    @classmethod
    def crowded(
        cls, spec: TargetSpec, store: LedgerStore, columns: Sequence[str], limit: int
    ) -> Crowded | None:
        """The groups of its rows by ``columns`` holding more than ``limit`` rows, counted
        where the rows are (``TargetUnreadable`` if it cannot read them). None: rows
        are only appended, so the Dagster checks on its rows do not apply."""
        return None
