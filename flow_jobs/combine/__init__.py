"""Pre-aggregation on the driver: whether a window's rows are folded into partial
aggregates in the Kafka reader before Spark, and the plan the reader folds with.

* ``decide``: which windows and aggregators fold (``foldable``), whether the checkpoint
  takes it (``checkpoint_merges``, ``mark_checkpoint``), and what ``validate --plan``
  says of it (``ReaderFolding``);
* ``sql``: a ``[transform].sql`` read from Spark's optimized plan into the reader's
  grammar (``analyze``), so a window behind a simple SQL folds too.

The reader's half (the folding itself, the SQL's evaluator) is in ``flow_jobs.kafka``,
which imports no driver-side code; each aggregator's partial parts are its own
(``flow_jobs.aggregations``, ``flow_jobs.partial_parts``).
"""
