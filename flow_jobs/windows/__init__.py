"""Window families on Spark's arbitrary-state API, one module per family (runs inside
Spark's Python workers as well as on the driver).

Each family (``fixed``: tumbling and hopping windows that reopen or hold an exact
distinct count; ``session``; ``sliding``; ``count``) keeps a group's state and answers
the same few questions behind one interface (``flow_jobs.windows.family.StateFamily``):
what a group's new rows change (``add``), what the watermark closes (``close``), the
lowest watermark at which it has work (``due``: the group's timer) and which windows are
open (``open_windows``: the cap check, ``inspect``). One generic ``StatefulProcessor``
(``flow_jobs.windows.processor``) drives them, and holds the one timer rule
(``flow_jobs.windows.timers``).

Window *definitions* and their compilation live in ``flow_jobs.spec`` and
``flow_jobs.plan``; the aggregators the windows compute are ``flow_jobs.operators``.
"""
