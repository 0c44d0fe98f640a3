"""Dead letters: the records a pipeline cannot use, kept with their original bytes and
the reason, never dropped.

A stage diverts a row by giving reasons, conditions on its rows (``divert``); the row
leaves the stream inside the scan's own stage and reaches the driver with the batch
(``DeadLetterTap``, an observation), which files it before the batch's target write
(``DeadLetterTable``: a Delta table or the ledger's table; late rows may go to a Kafka
topic, ``DeadLetterTopic``). Why it is built this way: ``flow_jobs.dead_letters.table``.

Public surface:

- ``divert(frame, reasons, tap, fields=None)``: the frame without the rows that have a
  reason, which the tap collects; ``Reason`` is ``(condition, words)``.
- ``record_fields(frame)``: where a frame's rows keep their Kafka record, or None.
- ``DeadLetterTap``: one source's observation (``DeadLetterTable.tap`` makes them).
- ``DeadLetterTable``: the driver's side: taps by source, the commit of a batch's rows.
"""

from flow_jobs.dead_letters.table import DeadLetterTable, DeadLetterTopic
from flow_jobs.dead_letters.tap import (
    OBSERVATION_PREFIX,
    DeadLetterTap,
    Reason,
    divert,
    record_fields,
)

__all__ = [
    "OBSERVATION_PREFIX",
    "DeadLetterTable",
    "DeadLetterTap",
    "DeadLetterTopic",
    "Reason",
    "divert",
    "record_fields",
]
