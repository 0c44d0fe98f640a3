"""Per-source stream operators: their registry (``registry``: what a kind of
``[[transform.operators]]`` provides, and how the core compiles one) and the base of the
state-API operators that keep each hash bucket of keys as one saved value
(``buckets``: the dedup's, ``flow_jobs.dedup``, and the temporal join's,
``flow_jobs.temporal_join``).

``registry`` is imported on its own: the executors that unpickle a processor built on
``buckets`` need none of the spec's models."""
