"""``[transform.window_join]``: the rows of two sources with equal keys in the same
window (tumbling, hopping or cumulate), joined when the watermark closes the window;
inner, left, right, full, semi and anti, on Spark's state API.

* ``spec``: its keys (``WindowJoinSpec``);
* ``compile``: the plan (``compile_window_join_pipeline``);
* ``processor``: the ``StatefulProcessor`` the executors run, and its state
  (``WindowJoinState``);
* ``inspect``: the rows each window holds;
* ``plugin``: what ``flow_jobs.plugins.BUILTIN`` imports, registering the three under
  ``"window_join"`` (``WindowJoinSpec.STAGE``).

This module imports nothing: the executors that import ``processor`` need neither the
plan nor the spec's models.
"""
