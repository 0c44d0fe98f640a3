"""Idle sources: the idle file the driver writes and the batch stamps the reader reads from
the checkpoint."""

from __future__ import annotations

import json
import logging

from flow_jobs.io.checkpoint_files import CheckpointFiles, logged_batches, read_offset_entry
from flow_jobs.kafka.schema import MAX_TS_MS

log = logging.getLogger(__name__)


#: A heartbeat's watermark when a source is idle for a whole availableNow run: Spark's
#: highest TIMESTAMP less a year, so that adding any lateness_ms stays in range.
IDLE_FOR_THE_RUN_MS = MAX_TS_MS - 366 * 86_400_000


def idle_target(path: str, source: str) -> int | None:
    """The watermark (epoch ms) the driver asks an idle ``source`` to reach, or None."""
    try:
        with open(path, encoding="utf-8") as f:
            targets = json.load(f)
    except (OSError, ValueError):
        return None  # not written yet (no source idle so far), or being replaced
    value = targets.get(source) if isinstance(targets, dict) else None
    return int(value) if isinstance(value, int) else None


def batch_stamps(files: CheckpointFiles | None, end: dict) -> tuple[int | None, int | None]:
    """(late watermark, batch timestamp) of the micro-batch that reads up to ``end``: the
    watermark the batch before it ran under (epoch ms; None in a query's first batch),
    and the batch's own ``batchTimestampMs``, its ``current_timestamp()``.

    Spark writes a batch's offsets and the watermark it runs under (``batchWatermarkMs``)
    to ``offsets/<batch id>`` before it plans the batch's partitions, so the newest entry
    is this batch's (on a replay too: nothing newer is written before it has run), and
    the entry before it holds the watermark Spark's operators filter this batch by.
    ``files``: the query's checkpoint, local or remote (``flow_jobs.io.checkpoint_files``);
    None where the query has none (a source read on its own)."""
    if files is None:
        return None, None
    try:
        ids = logged_batches(files, "offsets")
    except FileNotFoundError:
        return None, None
    for batch in ids[::-1][:2]:  # a batch planned again after a restart is still the newest
        entry = read_offset_entry(files, batch)
        if entry is None or end not in entry.sources:
            continue
        previous = read_offset_entry(files, batch - 1)
        return (previous.watermark_ms if previous else None), entry.timestamp_ms
    log.warning(
        "no offset log entry in %s/offsets holds %s: late rows not stamped", files.location, end
    )
    return None, None
