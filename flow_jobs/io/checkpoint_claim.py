"""Which pipeline a checkpoint belongs to: a local checkpoint (or one behind a URI)
carries a marker naming the pipeline and fingerprint it was started by, so a spec of
another name pointed at the same location is refused instead of resuming someone
else's state."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from flow_jobs.io.checkpoint_files import checkpoint_files


class IncompatibleSpec(RuntimeError):
    """The checkpoint was started under a spec whose state layout or semantics differ."""


#: The file in a local checkpoint that names the pipeline and fingerprint it belongs to.
CHECKPOINT_MARKER = "flow-jobs-pipeline.json"


def claim_checkpoint(
    checkpoint: str, name: str, fingerprint: str, earlier: str | None = None
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
    through Spark's Hadoop ``FileSystem``."""
    files = checkpoint_files(checkpoint)
    root = str(files)
    try:
        claimed = json.loads(files.read_text(CHECKPOINT_MARKER))
    except FileNotFoundError:
        mark = {"pipeline": name, "fingerprint": fingerprint,
                "claimed_at": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
        files.write_text(CHECKPOINT_MARKER, json.dumps(mark, indent=2) + "\n")
        return
    owner, started_under = claimed.get("pipeline"), claimed.get("fingerprint")
    if owner == name and earlier is not None and started_under == earlier:
        upgraded = {**claimed, "fingerprint": fingerprint, "earlier_fingerprint": earlier}
        # staged and renamed over it: never a half-written marker, which no start reads
        files.write_text(CHECKPOINT_MARKER, json.dumps(upgraded, indent=2) + "\n")
        return
    if owner != name:
        raise IncompatibleSpec(
            f"pipeline {name}: checkpoint {root} belongs to pipeline {owner} (see its "
            f"{CHECKPOINT_MARKER}); two pipelines cannot share a checkpoint. Give this "
            "spec its own [checkpoint] location"
        )
    if started_under != fingerprint:
        raise IncompatibleSpec(
            f"pipeline {name}: checkpoint {root} was started under spec fingerprint "
            f"{started_under}, this spec's is {fingerprint} (see its {CHECKPOINT_MARKER}): "
            "another spec of the same name, or a changed spec with its ledger elsewhere. "
            "Give this spec its own [checkpoint] location, or run "
            f"`flow-jobs reset {name}` with the ledger that started it"
        )
