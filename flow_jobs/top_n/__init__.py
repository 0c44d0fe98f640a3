"""``[transform.window.top_n]``: the top N rows of each window, ranked on the driver
(the rule: docs/spec-reference.md, "Top N").

* ``ranking``: the rank (``rank``) and a standing row's saved form (``StandingRow``);
* ``standings``: every group's current row of each open window, in the ledger, for
  ``emit = "current"``;
* ``step``: the batch step the batch sink runs (``TopNStep``);
* ``plugin``: what ``flow_jobs.plugins.BUILTIN`` imports, registering the step as
  ``"top_n"`` (``flow_jobs.runtime.batch_steps``).

Its spec model is ``flow_jobs.spec.top_n.TopNSpec``: a key of ``[transform.window]``,
checked with the window's rules, so it lives with the window's model.
"""
