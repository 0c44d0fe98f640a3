"""``[[transform.dedup]]``: a source's duplicates taken out before the window or the join,
on Spark's state API; the built-in ``dedup`` operator
(``flow_jobs.operators.registry``).

* ``compile``: the plan (``compile_dedup``, ``deduplicate``);
* ``processor``: the ``StatefulProcessor`` the executors run, and its state
  (``DedupState``, in ``flow_jobs.state_codec``'s versioned format);
* ``plugin``: what ``flow_jobs.plugins.BUILTIN`` imports, registering the operator.

* ``spec``: its spec model (``DedupSpec``), registered as the ``dedup`` operator kind.

This module imports nothing: the executors that import ``processor`` need neither the
plan nor the spec's models.
"""
