"""Keep a Spark Python worker's imported modules out of the collector's way.

A reused Python worker (Spark's default) runs a full ``gc.collect()`` after every task
(``pyspark/daemon.py``). A full collection walks every container object the process
holds, and in a worker that has read Kafka or run a state operator most of them belong
to the modules it imported: PySpark, pyarrow, pandas, numpy, confluent-kafka and
flow-jobs. Walking them again after each task was most of a worker's CPU on small
micro-batches (``tests/test_spark_contracts.py`` pins the collection; BENCHMARKS.md,
"How long make test takes").

``gc.freeze()`` moves every object the collector tracks to a permanent generation that
no collection walks. At the start of a task everything left is alive (the collection
after the last task took the rest), so freezing then hides nothing but the modules and
what earlier tasks kept; reference counting still frees every object as before. Only a
reference cycle formed later among objects that are frozen now would stay in memory: at
most what a long-lived cache drops in cycles, nothing of a task's own rows.
"""

from __future__ import annotations

import gc


def freeze_worker_heap() -> None:
    """Move what this process holds now out of every later garbage collection; call it
    where a task starts, in the worker, after the imports it runs with."""
    gc.freeze()
