"""Read what Spark's checkpoint says about a micro-batch, before the batch commits.

Spark writes ``offsets/<batch id>`` (the batch's end offsets per source and the
watermark it runs under) before it runs the batch, so the sink can put them in the
ledger row that commits with the batch's output. The file layout (a version line, a
metadata line, then one line per source in plan order) is Spark's ``OffsetSeqLog``.
A checkpoint behind a URI (``s3a://``, ``hdfs://``…) is read through Spark's Hadoop
``FileSystem``, exactly like a local one (``flow_jobs.io.checkpoint_files``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flow_jobs.io.checkpoint_files import checkpoint_files, logged_batches, read_offset_entry
from flow_jobs.locations import is_uri
from flow_jobs.spec.models import PipelineSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchOffsets:
    """A micro-batch's offset log entry (``read_offset_entry``) by the spec's sources."""

    offsets: dict[str, Any]  # source name -> {topic: {partition: offset}}
    watermark: datetime | None  # the watermark the batch runs under


def checkpoint_location(location: str) -> str:
    """What Spark gets as ``checkpointLocation``: a URI (``s3a://``, ``abfss://``,
    ``hdfs://``, ``file://``) as written, a plain path made absolute."""
    if is_uri(location):
        return location
    return str(Path(location).resolve())


def read_offset_log(checkpoint: str, batch_id: int, spec: PipelineSpec) -> BatchOffsets | None:
    """Micro-batch ``batch_id``'s offsets by source name, and its watermark."""
    entry = read_offset_entry(checkpoint_files(checkpoint), batch_id)
    if entry is None:
        return None
    by_topic = {s.topic: s.name for s in spec.sources}
    offsets: dict[str, Any] = {}
    for i, value in enumerate(entry.sources):
        if value is None:
            continue
        # "_data_loss" (flow_jobs.kafka.data_loss) rides beside the topic: kept, not a topic.
        topics = [t for t in value if not t.startswith("_")] if isinstance(value, dict) else []
        name = by_topic.get(topics[0]) if len(topics) == 1 else None
        offsets[name or f"source{i}"] = value
    mark = entry.watermark_ms
    watermark = datetime.fromtimestamp(mark / 1000, tz=UTC) if mark else None
    return BatchOffsets(offsets, watermark)


def has_committed_batch(checkpoint: str) -> bool:
    """Whether Spark committed a micro-batch in the checkpoint: if not, the query starts
    its sources at their ``starting_offsets`` (Spark calls ``initialOffset``)."""
    try:
        return bool(logged_batches(checkpoint_files(checkpoint), "commits"))
    except FileNotFoundError:
        return False


def describe_batch_in_flight(checkpoint: str, spec: PipelineSpec) -> str | None:
    """The newest micro-batch that has offsets but no commit (the one a failure stopped),
    as ``micro-batch N (source: topic[partition] first..last, ...)``; None if unknown."""
    files = checkpoint_files(checkpoint)
    try:
        planned = logged_batches(files, "offsets")
    except FileNotFoundError:
        return None
    if not planned:
        return None
    batch = max(planned)
    if files.exists(f"commits/{batch}"):
        return None
    end = read_offset_log(checkpoint, batch, spec)
    if end is None:
        return None
    start = read_offset_log(checkpoint, batch - 1, spec)
    ranges = []
    for source, by_topic in end.offsets.items():
        before = (start.offsets.get(source) or {}) if start else {}
        for topic, by_partition in (by_topic or {}).items():
            if not isinstance(by_partition, dict) or topic.startswith("_"):
                continue
            for partition, stop in sorted(by_partition.items(), key=lambda kv: int(kv[0])):
                first = (before.get(topic) or {}).get(partition)
                if first is not None and int(first) >= int(stop):
                    continue  # nothing read from this partition
                span = f"{first}..{int(stop) - 1}" if first is not None else f"..{int(stop) - 1}"
                ranges.append(f"{source}: {topic}[{partition}] offsets {span}")
    return f"micro-batch {batch} ({'; '.join(ranges) or 'no new offsets'})"


def retire_checkpoint(checkpoint: str, state_version: int) -> str | None:
    """Move a checkpoint aside as ``<location>.v<N>-<UTC time>``; kept, not deleted. A
    URI's is renamed through Hadoop's ``FileSystem`` (on object storage a rename copies
    every object: slow for a large state, and not atomic)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    retired = checkpoint_files(checkpoint).move_aside(f".v{state_version}-{stamp}")
    if retired is not None:
        log.info("checkpoint %s kept as %s", checkpoint, retired)
    return retired
