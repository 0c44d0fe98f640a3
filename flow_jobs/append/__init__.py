"""``[transform.append]``: each row of one source, through ``[transform].sql`` (a
projection, a filter), appended to the target once; no state, no watermark.

* ``spec``: its keys (``AppendSpec``);
* ``compile``: the plan (``compile_append_pipeline``);
* ``plugin``: what ``flow_jobs.plugins.BUILTIN`` imports, registering both under
  ``"append"`` (``AppendSpec.STAGE``).
"""
