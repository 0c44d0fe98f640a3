"""Whether a checkpoint may resume under a spec, and what a refusal says. A local
checkpoint (or one behind a URI) carries a marker naming the pipeline and fingerprint
it was started by, so a spec of another name pointed at the same location is refused
instead of resuming someone else's state; a spec whose fingerprint differs from the
ledger's is refused naming each changed key (``spec_changed``). Each refusal names the
``flow-jobs reset`` that works for the spec (``reset_command``)."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from flow_jobs.io.checkpoint_files import CheckpointFiles, checkpoint_files
from flow_jobs.locations import local_path
from flow_jobs.spec.fingerprint import changed_fields, comparable

if TYPE_CHECKING:
    from flow_jobs.spec.models import PipelineSpec


class IncompatibleSpec(RuntimeError):
    """The checkpoint was started under a spec whose state layout or semantics differ."""


#: The file in a local checkpoint that names the pipeline and fingerprint it belongs to.
CHECKPOINT_MARKER = "flow-jobs-pipeline.json"


def reset_command(name: str, spec_path: str | None) -> str:
    """The ``flow-jobs reset`` that starts pipeline ``name``'s next checkpoint generation:
    with its spec file as the user gave it (reset finds the state store and the
    checkpoint through it), or a placeholder for a spec built in Python."""
    spec = shlex.quote(spec_path) if spec_path else "SPEC.toml"
    return f"flow-jobs reset {name} --spec {spec}"


def spec_changed(
    spec: PipelineSpec,
    state_version: int,
    stored: str,
    stored_fields: dict[str, Any] | None,
    fields: dict[str, Any],
    spec_path: str | None,
) -> IncompatibleSpec:
    """The refusal of a spec whose fingerprint differs from the one its checkpoint was
    started under (the ledger's ``stored``), naming each changed key and the reset."""
    stored_fields = stored_fields or {}
    changes = changed_fields(stored_fields, comparable(stored_fields, fields))
    return IncompatibleSpec(
        f"pipeline {spec.name}: the spec changed in ways its checkpoint "
        f"(state version {state_version}, fingerprint {stored}) cannot resume "
        f"under — {'; '.join(changes)}. Revert the change, or run "
        f"`{reset_command(spec.name, spec_path)}` to start a new checkpoint generation "
        "(the old checkpoint is kept; the new one re-reads its sources from "
        "starting_offsets and MERGEs into the same target)"
    )


def claim_checkpoint(
    checkpoint: str,
    name: str,
    fingerprint: str,
    earlier: str | None = None,
    spec_path: str | None = None,
) -> None:
    """Refuse a checkpoint another pipeline (or another spec of this name) started, else
    mark it as this one's.

    The marker (``flow-jobs-pipeline.json`` in the checkpoint) is written when a pipeline
    first uses the location — an existing checkpoint without one is adopted — and moves
    aside with the checkpoint on reset. A different pipeline name is refused; so is a
    different fingerprint, which the ledger would have refused already unless the two
    specs keep their ledgers apart (another state store URL or schema). A marker holding
    ``earlier``, the spec's fingerprint as an earlier flow-jobs computed it (without the
    order fields: ``flow_jobs.spec.fingerprint.earlier_fingerprint``), is this spec's and
    is rewritten with ``fingerprint``. A checkpoint behind a URI is marked the same way,
    through Spark's Hadoop ``FileSystem``. ``spec_path``: the spec file, for the reset
    command a refusal names."""
    files = checkpoint_files(checkpoint)
    claimed = _claim(files)
    if claimed is None:
        mark = {"pipeline": name, "fingerprint": fingerprint,
                "claimed_at": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
        files.write_text(CHECKPOINT_MARKER, json.dumps(mark, indent=2) + "\n")
        return
    refusal = _refusal(claimed, str(files), name, fingerprint, spec_path)
    if refusal is None:
        return
    if earlier is not None and claimed == {**claimed, "pipeline": name, "fingerprint": earlier}:
        upgraded = {**claimed, "fingerprint": fingerprint, "earlier_fingerprint": earlier}
        # staged and renamed over it: never a half-written marker, which no start reads
        files.write_text(CHECKPOINT_MARKER, json.dumps(upgraded, indent=2) + "\n")
        return
    raise refusal


def check_claim(
    checkpoint: str,
    name: str,
    fingerprint: str,
    earlier: str | None = None,
    spec_path: str | None = None,
) -> None:
    """What ``claim_checkpoint`` refuses, read only and for a local checkpoint (one
    behind a URI needs Spark's JVM: ``claim_checkpoint`` checks it when the run starts)."""
    if local_path(checkpoint) is None:
        return
    files = checkpoint_files(checkpoint)
    claimed = _claim(files)
    if claimed is None:
        return
    refusal = _refusal(claimed, str(files), name, fingerprint, spec_path)
    upgradable = earlier is not None and claimed == {
        **claimed, "pipeline": name, "fingerprint": earlier}  # fmt: skip
    if refusal is not None and not upgradable:
        raise refusal


def _claim(files: CheckpointFiles) -> dict[str, Any] | None:
    try:
        return dict(json.loads(files.read_text(CHECKPOINT_MARKER)))
    except FileNotFoundError:
        return None


def _refusal(
    claimed: dict[str, Any], root: str, name: str, fingerprint: str, spec_path: str | None
) -> IncompatibleSpec | None:
    """Why a checkpoint marked ``claimed`` is not this spec's, or None."""
    owner, started_under = claimed.get("pipeline"), claimed.get("fingerprint")
    if owner != name:
        return IncompatibleSpec(
            f"pipeline {name}: checkpoint {root} belongs to pipeline {owner} (see its "
            f"{CHECKPOINT_MARKER}); two pipelines cannot share a checkpoint. Give this "
            "spec its own [checkpoint] location"
        )
    if started_under != fingerprint:
        return IncompatibleSpec(
            f"pipeline {name}: checkpoint {root} was started under spec fingerprint "
            f"{started_under}, this spec's is {fingerprint} (see its {CHECKPOINT_MARKER}): "
            "another spec of the same name, or a changed spec with its ledger elsewhere. "
            "Give this spec its own [checkpoint] location, or run "
            f"`{reset_command(name, spec_path)}` with the state store that started it"
        )
    return None
