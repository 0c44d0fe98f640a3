"""Spec fingerprints: which spec changes a checkpoint can resume under.

Spark's checkpoint holds operator state laid out by the spec (window bounds, grouping
columns, aggregation buffers, join keys) and offsets named by the sources. Resuming it
under a spec that changes any of that either fails deep inside Spark or, worse, runs and
writes wrong windows. The fingerprint covers every spec key that can do that; the state
store keeps it per checkpoint generation and refuses a start whose fingerprint differs,
naming the changed keys.

It is a deny-list of *safe* keys, not an allow-list of dangerous ones: a key added to
the spec later is fingerprinted until someone decides it is safe. Safe to change, and
resumed under:

* ``plugins``: which modules register kinds; the window's kind and keys are
  fingerprinted like any other's, whatever registered them;
* where things are written or read from: ``target``, ``dead_letter``, ``state_store``,
  ``checkpoint``, sources' ``bootstrap_servers``, ``client_config`` and
  ``schema_registry`` (same topic or schemas on another address, credentials);
* throughput and runtime knobs: ``spark``, ``runtime``, sources'
  ``max_offsets_per_trigger``, ``fail_on_data_loss``, ``retries``, ``retry_backoff_ms``,
  ``connect_timeout_ms``, ``request_timeout_ms``,
  ``decoder`` (Arrow or ``from_json``: the same rows either way, proven by
  ``tests/test_json_decode.py``);
* ``starting_offsets``: only read by a fresh checkpoint;
* caps and guards that fail or divert, never reshape state:
  ``max_groups_per_window``, ``on_state_cap``, ``max_event_time_skew_ms``;
* the temporal join's ``retention_ms``: when a current version leaves the state, not
  how the state is laid out;
* ``pre_aggregate``: the checkpoint keeps the aggregation it started with
  (``flow_jobs.combine.decide``), and either way the windows are the same;
* ``[[transform.lookups]]``: static tables are refreshable by design;
* an operator's ``SAFE_KEYS`` (``flow_jobs.spec.operators``), e.g. ``[[transform.dedup]]``'s
  ``on_duplicate``: a duplicate is dropped or dead-lettered after the operator decided
  it, the same state either way. Its other keys are fingerprinted, as
  ``transform.operators.<source>[<n>].<key>`` (its ``n``-th operator, its kind among
  them), or as its model's ``fingerprint()`` names them (the dedup's: as before the
  operators' registry).

A key added to the spec after checkpoints exist, whose default keeps what those
checkpoints ran (``ADDED_KEYS``), is fingerprinted only when set to something else:
upgrading flow-jobs must not refuse every existing checkpoint.

Order is part of the state too. Aggregations are keyed by their alias, but Spark lays a
window's aggregation buffers out in ``agg(...)`` order and its state-schema check
compares the buffers' types, not their names (``tests/test_spark_contracts.py``):
swapping ``sum(amount) as total`` and ``max(amount) as hi`` would resume, and every open
window would fold new rows into the other aggregate's buffer. So the aliases in declared
order are a field of their own (``transform.window.aggregations.order``). Other orders
are in their keys' values already (``group_by``, a join's key columns: lists), or do
not reach the state: the order of ``[[sources]]`` does not place a source in Spark's
plan (``[transform].sql`` or the join's ``left_source`` / ``right_source`` do, both
fingerprinted), so Spark's offset log, which maps offsets to sources by their position
in the plan, is read the same way after a reorder.

A fingerprint stored before the order fields existed (``ORDER_KEYS``) is the current
fields' without them (``earlier_fingerprint``): the state store accepts it and stores the
new one, so the next change is judged with the order. The checkpoint's own order was not
recorded then, so a reorder made together with the upgrade cannot be told apart from
the order the checkpoint started with.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flow_jobs.spec.models import PipelineSpec

SAFE_SOURCE_KEYS = frozenset(
    {
        "bootstrap_servers",
        "client_config",
        "max_offsets_per_trigger",
        "fail_on_data_loss",
        "retries",
        "retry_backoff_ms",
        "connect_timeout_ms",
        "request_timeout_ms",
        "starting_offsets",
        "decoder",
        "schema_registry",  # where the schemas are read from, and its credentials
    }
)
#: Source keys added after checkpoints existed, with the default that changes nothing.
ADDED_SOURCE_KEYS: dict[str, Any] = {
    "subject": None,
    "version": "latest",
    "message": None,
    "avro_schema": None,
}
SAFE_OPERATOR_KEYS = frozenset(
    {
        "max_groups_per_window",
        "on_state_cap",
        "max_event_time_skew_ms",
        "pre_aggregate",
        "retention_ms",
    }
)
#: Keys added after checkpoints existed, with the default that changes nothing for them.
ADDED_KEYS: dict[str, Any] = {
    "transform.window.dead_letter_topic": None,
    "transform.join.dead_letter_topic": None,
    "transform.window.revision_column": "revision",
    "transform.window.state_api": None,
    "transform.window.top_n": None,
    # cumulating windows' size keys (every other kind has them None)
    "transform.window.step_ms": None,
    "transform.window.max_duration_ms": None,
    "transform.temporal_join": None,
    "transform.window_join": None,
    "transform.append": None,
}
#: The size keys of the one window model there was before the window families: a
#: fingerprint stored then holds each, None where the window's kind has none. A family
#: added since has its own keys in its window's dump, and only there.
SHARED_SIZE_KEYS = ("duration_ms", "hop_ms", "gap_ms", "count", "step")
#: Fields added after checkpoints existed that have no default to compare with: each
#: spec has them. A fingerprint stored without them is accepted once and replaced.
ORDER_KEYS = ("transform.window.aggregations.order",)


def fingerprint_fields(spec: PipelineSpec) -> dict[str, Any]:
    """The spec keys a checkpoint depends on, flattened to dotted names (defaults included,
    so writing a default out explicitly is no change)."""
    fields: dict[str, Any] = {}
    for source in spec.sources:
        dumped = source.model_dump(by_alias=True, mode="json")
        for key, value in dumped.items():
            if key in SAFE_SOURCE_KEYS or ADDED_SOURCE_KEYS.get(key, ...) == value:
                continue
            fields[f"sources.{source.name}.{key}"] = value
    transform = spec.transform
    fields["transform.sql"] = transform.sql
    fields["transform.chain"] = transform.chain
    for part in ("window", "join", "temporal_join", "window_join", "append"):
        model = getattr(transform, part)
        if model is None:
            fields[f"transform.{part}"] = None
            continue
        for key, value in model.model_dump(by_alias=True, mode="json").items():
            if key in SAFE_OPERATOR_KEYS:
                continue
            if key == "aggregations":
                for agg in value:
                    for k, v in agg.items():
                        fields[f"transform.window.aggregations.{agg['as']}.{k}"] = v
                # Buffers sit in this order in the state (the module's note).
                fields["transform.window.aggregations.order"] = [agg["as"] for agg in value]
            else:
                fields[f"transform.{part}.{key}"] = value
    for op in spec.operators():  # each its kind's fields (``OperatorSpec.fingerprint``)
        fields.update(op.spec.fingerprint(op.fingerprint_key, op.source))
    window = transform.window
    if window is not None:
        for key in SHARED_SIZE_KEYS:
            fields.setdefault(f"transform.window.{key}", None)
    # Not a spec key: where the window's state lives. A window of a kind Spark's
    # aggregation runs, with an exact count_distinct, moved from there to the state API
    # (its cap is checked while open); a checkpoint of the former cannot resume there.
    moved = (
        window is not None
        and window.has_native_form
        and window.engine == "state"
        and not window.reopens
    )
    fields["transform.window.state_api"] = True if moved else None
    return {k: v for k, v in fields.items() if k not in ADDED_KEYS or ADDED_KEYS[k] != v}


def fingerprint_of(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def earlier_fingerprint(fields: dict[str, Any]) -> str | None:
    """The fingerprint a flow-jobs without the ``ORDER_KEYS`` gave the spec whose
    fields are ``fields``; None where the spec has none of them (the same fingerprint)."""
    if not any(key in fields for key in ORDER_KEYS):
        return None
    return fingerprint_of({k: v for k, v in fields.items() if k not in ORDER_KEYS})


def comparable(stored: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``current`` without the ``ORDER_KEYS`` that ``stored`` predates: a checkpoint
    registered before them recorded no order, so none can be named as changed."""
    return {k: v for k, v in current.items() if k not in ORDER_KEYS or k in stored}


def changed_fields(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each key that differs (added and removed keys included)."""
    changes = []
    for key in sorted(stored.keys() | current.keys()):
        old, new = stored.get(key, "<absent>"), current.get(key, "<absent>")
        if old != new:
            changes.append(f"{key}: {json.dumps(old)} -> {json.dumps(new)}")
    return changes
