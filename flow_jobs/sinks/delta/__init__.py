"""The Delta target (``kind = "delta"``, the default): a MERGE on the natural key with
deltalake, once per batch by Delta's application transaction.

A replay after a crash finds the batch's transaction in the table and skips the MERGE;
the ledger row is then written if the crash came before it.
"""

from flow_jobs.sinks import register
from flow_jobs.sinks.delta.sink import DeltaMergeSink
from flow_jobs.sinks.delta.spec import DeltaTarget

register(DeltaMergeSink)

__all__ = ["DeltaMergeSink", "DeltaTarget"]
