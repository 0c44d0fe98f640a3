"""Target kinds: each one a sink, registered in ``SINKS`` under its ``[target] kind``.

The core (the spec, the runner, the batch sink, the ledger, the CLI, the Dagster
adapter) reaches a target only through this registry and the ``Sink`` interface
(``flow_jobs.sinks.base``), and names no kind. The built-in kinds are packages beside
this module (``delta``, ``postgres``, ``kafka``), listed in ``flow_jobs.plugins.BUILTIN``;
a plug-in registers its own the same way (a spec's ``plugins``, or an entry point).

What a sink provides, all on one ``Sink`` subclass:

* ``kind`` and ``spec_model``: its ``[target] kind`` and the ``TargetSpec`` model of
  its keys
  (their rules, ``describe()``: where it writes);
* the writer: built with ``(spec, output, store)``; ``ensure()`` creates or checks the
  target when the run starts; ``write(rows, entry, conn)`` writes one micro-batch's rows
  (``entry.batch_id``) at most once, as its ``once_by`` says it commits with the batch's
  ledger row; ``version()`` and ``close()`` if it has them;
* its words: ``WRITES`` (``validate``'s one line, Dagster's description), ``writing()``
  (its ``validate --plan`` line), ``COMMIT`` / ``describe_commit()`` (a commit as the
  progress lines, the summary, ``state show`` and Dagster say it);
* its read-back: ``newest_rows()`` and ``location()`` for ``flow-jobs target show`` and
  a Dagster materialization's preview (``how_to_read()`` where it has none), and
  ``crowded()`` for the Dagster checks on its rows.

Examples
--------
A sink that writes nothing, registered when its module is imported::

    from typing import Literal

    from flow_jobs.io.batch import WriteResult
    from flow_jobs.sinks import register
    from flow_jobs.sinks.base import Sink
    from flow_jobs.spec.targets import TargetSpec

    class NullTarget(TargetSpec):
        kind: Literal["null"]

    @register
    class NullSink(Sink):
        kind, spec_model, once_by = "null", NullTarget, "ledger-first"
        WRITES, COMMIT = "nothing", "null commit"

        def ensure(self) -> None: ...
        def writing(self) -> str: return "rows dropped"
        def write(self, rows, entry, conn): return WriteResult(False, 0, 0, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flow_jobs.plugins import Registry

if TYPE_CHECKING:
    from flow_jobs.ledger.store import LedgerStore
    from flow_jobs.sinks.base import Sink
    from flow_jobs.spec.models import PipelineSpec
    from flow_jobs.spec.targets import TargetSpec

#: Every target kind's sink, by ``[target] kind``.
SINKS: Registry[type[Sink]] = Registry("target kind")


def register(sink: type[Sink]) -> type[Sink]:
    """Register ``sink`` under its ``kind``, and its spec model for the spec to read
    ``[target]`` with (a class decorator)."""
    from flow_jobs.spec.targets import TARGET_SPECS

    SINKS.register(sink.kind, sink)
    TARGET_SPECS.register(sink.kind, sink.spec_model)
    return sink


def sink_for(target: TargetSpec) -> type[Sink]:
    """The sink of a spec's ``[target]``."""
    return SINKS.get(target.kind)


def target_summary(target: TargetSpec) -> str:
    """The target in one phrase, without building its writer: how and where it writes."""
    return sink_for(target).summary(target)


def describe_commit(kind: str, commit: str | None) -> str:
    """A target commit as every output says it: "Delta version 7", "Postgres transaction
    758", "Kafka offsets 0=41,1=40"; "-" for none. A kind no sink registered (a ledger
    row of a plug-in not loaded here) is said with its kind's name."""
    if commit is None:
        return "-"
    if kind not in SINKS:
        return f"{kind} {commit}"
    return SINKS.get(kind).describe_commit(commit)


def newest_rows(
    spec: PipelineSpec, key: Sequence[str], store: LedgerStore | None, limit: int
) -> list[dict[str, Any]]:
    """The target's ``limit`` newest rows, newest first, by its natural key ``key``
    descending, NULLs last (``NoTargetYet`` before its first write); none for a target
    that is not read back."""
    return sink_for(spec.target).newest_rows(spec.target, key, store, limit) or []
