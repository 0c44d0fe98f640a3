"""``[transform.temporal_join]``: each stream record joined with the version of a
versioned side valid at its event time, on Spark's state API.

* ``compile``: the plan (``compile_temporal_pipeline``);
* ``processor``: the ``StatefulProcessor`` the executors run, and its state
  (``TemporalState``, in ``flow_jobs.state_codec``'s versioned format);
* ``inspect``: the held stream records and kept versions;
* ``plugin``: what ``flow_jobs.plugins.BUILTIN`` imports, registering both under
  ``"temporal_join"`` (``TemporalJoinSpec.STAGE``).

This module imports nothing: the executors that import ``processor`` need neither the
plan nor the spec's models. Its spec model is
``flow_jobs.temporal_join.spec.TemporalJoinSpec`` (``spec``),
registered for ``[transform.temporal_join]``.
"""
