"""What a window computes with on Spark's arbitrary-state API: the event frame a group's
state holds (``frame``) and windows as index ranges over it, with the interface every
aggregator's state-API compute implements (``ranges``). The aggregators are
``flow_jobs.aggregations``; the window families that hold the state, ``flow_jobs.windows``.

The registry of per-source operators (``[[transform.operators]]``, the dedup among them)
is ``flow_jobs.operators.registry``, imported on its own: the executors that unpickle a
processor from this package need none of the spec's models."""
