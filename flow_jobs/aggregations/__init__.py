"""Aggregators, one module each: ``count``, ``sum``, ``avg``, ``extremes`` (min, max),
``positional`` (first, last), ``count_distinct``, ``collect``, ``reduce``.

Each aggregator is one class (``flow_jobs.aggregations.base.Aggregator``) owning every
part of it: its result types (the same in both engines), its native compile (Spark's
built-in functions inside the streaming aggregation, which aggregates partially before
the shuffle and keeps its buffers in the state store), its vectorised state-API compute
(a ``flow_jobs.kernels.ranges.WindowAggregator`` over many windows at once), the parts
of the Kafka reader's partial aggregates it merges when a window pre-aggregates
(``partial_parts``: each a ``flow_jobs.partial_parts.PartialPart`` folding
itself in the reader and merging in Spark; ``flow_jobs.combine.decide`` decides), its
state's size per group (``flow_jobs.plan.sizing``), the spec keys it takes, and how
``inspect`` reads an open native window's value from Spark's buffers, plain or merging
partials (``state_functions``, ``open_value``). ``inspect`` computes state-API windows
with the same ``WindowAggregator`` the operator runs.

NULL handling is SQL's: ``count`` (no column) counts rows, everything else skips NULL
values, an aggregate over no non-NULL value is NULL (``count(col)`` is 0).

A new aggregator is one module and its entry in ``AGGREGATORS``
(``flow_jobs.aggregations.registry``); its name is then valid for ``agg`` in the spec,
and ``tests/test_aggregators.py`` fails while it lacks a part. One from outside
flow_jobs is one ``register_aggregator`` call (``tests/plugins/variance.py``, a variance
that pre-aggregates, run end to end by ``tests/test_plugin_aggregator.py``).

The names below are imported on first use (PEP 562): importing one module of this
package does not import every aggregator (Spark's column API, the spec's models).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flow_jobs.lazy import lazy_getattr

if TYPE_CHECKING:
    from flow_jobs.aggregations.base import (
        NOT_DECODED,
        AggregationInput,
        Aggregator,
        NativeAggregate,
        NativeWindow,
        NotDecoded,
        StateBuffer,
    )
    from flow_jobs.aggregations.registry import (
        AGGREGATORS,
        aggregation_input,
        native_aggregate,
        register_aggregator,
        result_types,
    )

_BASE = "flow_jobs.aggregations.base"
_REGISTRY = "flow_jobs.aggregations.registry"
_NAMES = {
    "NOT_DECODED": (_BASE, "NOT_DECODED"),
    "AggregationInput": (_BASE, "AggregationInput"),
    "Aggregator": (_BASE, "Aggregator"),
    "NativeAggregate": (_BASE, "NativeAggregate"),
    "NativeWindow": (_BASE, "NativeWindow"),
    "NotDecoded": (_BASE, "NotDecoded"),
    "StateBuffer": (_BASE, "StateBuffer"),
    "AGGREGATORS": (_REGISTRY, "AGGREGATORS"),
    "aggregation_input": (_REGISTRY, "aggregation_input"),
    "native_aggregate": (_REGISTRY, "native_aggregate"),
    "register_aggregator": (_REGISTRY, "register_aggregator"),
    "result_types": (_REGISTRY, "result_types"),
}

__all__ = [
    "AGGREGATORS",
    "NOT_DECODED",
    "AggregationInput",
    "Aggregator",
    "NativeAggregate",
    "NativeWindow",
    "NotDecoded",
    "StateBuffer",
    "aggregation_input",
    "native_aggregate",
    "register_aggregator",
    "result_types",
]


__getattr__ = lazy_getattr(__name__, _NAMES, globals())
