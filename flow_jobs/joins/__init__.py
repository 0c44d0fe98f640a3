"""``[transform.join]``: the stream-stream join, Spark's time-bounded symmetric hash join
with a watermark on each side, and a window over the joined stream where the spec
chains one (``chain = ["join", "window"]``).

* ``compile``: the plan (``compile_join_pipeline``; the rules and the output columns
  are in its docstring);
* ``inspect``: the buffered rows of each side, with the watermark that evicts each;
* ``plugin``: what ``flow_jobs.plugins.BUILTIN`` imports, registering both under
  ``"join"`` (``JoinSpec.STAGE``).

Its spec model is ``flow_jobs.joins.spec.JoinSpec`` (``spec``), registered for
``[transform.join]``.
"""
