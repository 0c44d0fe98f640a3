"""The built-in window families, one module each: ``fixed`` (tumbling and hopping),
``cumulate``, ``session``, ``sliding`` and ``count`` (count_tumbling, count_hopping,
count_sliding).

Each family's module holds all of it, and registers its model when it is imported
(``flow_jobs.spec.windows.register_window_family``, under each of its kinds):

* its spec model, a subclass of ``flow_jobs.spec.windows.WindowSpec`` with its size keys
  and rules (``[transform.window]`` is read with the model its ``kind`` names);
* where it runs (``runs_natively``; ``WindowSpec.engine`` adds the rules that move any
  kind to the state API), Spark's window column where it has one (``native_window``),
  what ``validate --plan`` and the CLI say of it, its state-size bound, and how the
  Kafka reader may fold rows for it (``pane_folding``);
* its state-API logic (a ``flow_jobs.windows.family.StateFamily`` its model builds:
  ``state_family``), which one generic ``StatefulProcessor`` drives
  (``flow_jobs.windows.processor``, with the one timer rule of
  ``flow_jobs.kernels.timers``).

A new family is one module that registers itself: here (one import line below) or in a
plug-in (``flow_jobs.plugins``); ``tests/test_window_families.py`` fails while it lacks
a part, ``tests/test_plugin_window.py`` runs one written in the test tree.
"""

from __future__ import annotations

from typing import Any

from flow_jobs.spec.windows import WindowSpec

# isort: off
# Imported in this order: the order kinds are listed in messages ("use one of ...").
from flow_jobs.windows import fixed, cumulate, session, sliding, count  # noqa: F401
# isort: on


def Window(**keys: Any) -> WindowSpec:
    """``[transform.window]`` from keyword arguments: the model of ``kind`` (the Python
    facade's ``flow_jobs.Window``)."""
    return WindowSpec.model_validate(keys)


__all__ = ["Window"]
