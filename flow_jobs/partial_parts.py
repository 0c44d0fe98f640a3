"""The parts of the Kafka reader's partial aggregates: what a partial holds of an
aggregated field (its non-NULL count, its sum, its minimum, ...), one ``PartialPart``
each, with both of its sides:

* in the reader (``flow_jobs.kafka.combine``): its Arrow type in the partial struct, the
  Arrow hash aggregations that fold a block's rows into it, how it is read back from
  them, and whether folding could overflow where Spark would not;
* in a native window merging partials (``flow_jobs.aggregations.partials.Merge``): what
  a row is as a partial of one, and the Spark aggregate that merges partials and rows
  alike. An aggregator (``Aggregator.partial_parts``) declares the parts it merges and
  builds its result from their merges.

A part is known by its name (``PARTIAL_PARTS``): the plan names the parts each field
needs, and the reader resolves them where it runs. The built-in parts are shared by
several aggregators (``nn`` by count, avg, min and max), and every Python process Spark
starts for the Kafka source imports them, so they live here, in a module that imports
nothing of flow_jobs: below the aggregators, and below the reader (``flow_jobs.kafka``)
that folds them. A part from outside flow_jobs is one ``register_part`` call
in the module that defines it; the plan carries that module (``plug_in_modules``) so the
reader imports it too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import ClassVar, Protocol

import numpy as np
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

#: How the partial struct (and Arrow) write an event time.
TIMESTAMP_US = pa.timestamp("us", tz="UTC")
#: The events' total order in a native window: event time, lane, position
#: (``flow_jobs.plan.ordering``).
Order = tuple[Column, Column, Column]
#: |value| x rows at or past this: an integer sum of a block could leave BIGINT.
_SUM_BOUND = 1 << 62


class FoldedRows(Protocol):
    """What a part may read of the block's rows besides its field: their event times
    (epoch µs) and offsets, each row's rank in (event time, offset) order, and
    ``order[rank] = row``."""

    times: np.ndarray
    offsets: np.ndarray
    rank: np.ndarray
    order: np.ndarray


class Groups:
    """Arrow's hash aggregation of a block, as one field's parts read it: the result of
    ``function`` over the field's input ``name`` (``"v"``: the value itself, else one of
    the part's ``inputs``), one row per partial."""

    def __init__(self, table: pa.Table, slot: int) -> None:
        self.table, self.slot = table, slot

    def column(self, name: str, function: str) -> pa.Array:
        return self.table.column(f"{work_column(self.slot, name)}_{function}").combine_chunks()


def work_column(slot: int, name: str) -> str:
    """The column of the hash aggregation's input holding input ``name`` of field
    ``slot`` (distinct from the fold's own ``__pane``, ``__t``, ``__k<j>``)."""
    return f"__f{slot}_{name}"


class PartialPart(ABC):
    """One part of a partial aggregate of a field. Stateless: one instance serves every
    field and plan."""

    #: Its name: the partial struct's field ``<name><slot>``, and the plan's word for it.
    name: ClassVar[str]
    #: It orders equal event times by Kafka position: behind a ``[transform].sql``, the
    #: window folds it only where the SQL keeps ``_kafka`` (``flow_jobs.combine.decide``).
    orders_by_position: ClassVar[bool] = False

    # -- in the reader ----------------------------------------------------------------

    @abstractmethod
    def arrow_type(self, value: pa.DataType) -> pa.DataType:
        """Its type in the partial struct, for a field of type ``value``."""

    def inputs(self, value: pa.Array, rows: FoldedRows) -> dict[str, pa.Array]:
        """Columns it derives from the field to aggregate (by name), besides ``"v"``."""
        return {}

    @abstractmethod
    def hash_aggregates(self, value: pa.DataType) -> tuple[tuple[str, str], ...]:
        """The Arrow hash aggregations it reads: (input name, function), e.g.
        ``("v", "sum")``; parts asking for the same one share it."""

    @abstractmethod
    def from_groups(self, groups: Groups, value: pa.Array, rows: FoldedRows) -> pa.Array:
        """Its value per partial, from the hash aggregation (``value``: the block's
        field, of ``rows``)."""

    def may_overflow(self, values: pa.Array, folded: np.ndarray, rows: int) -> bool:
        """Whether folding the ``folded`` rows of ``values`` into a block of ``rows`` rows
        could overflow where Spark, seeing them one by one, would not (the chunk is then
        left to Spark)."""
        return False

    # -- in a native window merging partials ------------------------------------------

    def of_row(self, value: Column, order: Order) -> Column:
        """A row as a partial of one (by default its value)."""
        return value

    def of_partial(self, field: Column, order: Order) -> Column:
        """A partial's field as the merge reads it (by default as it is)."""
        return field

    @abstractmethod
    def merge(self, values: Column) -> Column:
        """The Spark aggregate merging partials and rows (``of_partial``, ``of_row``)."""


def integer_sum_may_overflow(values: pa.Array, folded: np.ndarray, rows: int) -> bool:
    """Whether a BIGINT sum over ``rows`` rows of these integers could leave BIGINT
    (|value| x rows >= 2^62); floats cannot (they go to infinity, as Spark's do)."""
    if not pa.types.is_integer(values.type):
        return False
    kept = values.filter(pa.array(folded)).drop_null().cast(pa.int64()).to_numpy()
    return bool(len(kept)) and max(abs(int(kept.min())), abs(int(kept.max()))) * rows >= _SUM_BOUND


# -- the registry ------------------------------------------------------------------------

#: Every part by name: the built-in ones first, in their order in the partial struct.
PARTIAL_PARTS: dict[str, PartialPart] = {}


def _origin(part: PartialPart) -> str:
    return f"{type(part).__module__}.{type(part).__qualname__}"


def register_part(part: PartialPart) -> PartialPart:
    """Make ``part`` known by its name (to the plan, and to the reader folding it).
    Registering the same class's part again (its module imported again) replaces it."""
    known = PARTIAL_PARTS.get(part.name)
    if known is not None and _origin(known) != _origin(part):
        raise ValueError(
            f"partial part {part.name!r} is {_origin(known)} already; give "
            f"{_origin(part)} another name"
        )
    PARTIAL_PARTS[part.name] = part
    return part


def partial_part(name: str) -> PartialPart:
    """The part registered as ``name``."""
    try:
        return PARTIAL_PARTS[name]
    except KeyError:
        raise LookupError(
            f"no partial part {name!r} is registered (known: {', '.join(PARTIAL_PARTS)}); "
            "the module registering it must be importable where the Kafka reader runs"
        ) from None


def in_struct_order(names: Iterable[str]) -> list[str]:
    """``names`` in their order in the partial struct: the built-in parts' order, then
    by name. It depends on nothing but the names, so the driver (the source's schema)
    and the reader (its batches) lay a struct out alike, whatever they imported first."""
    return sorted(
        names, key=lambda n: (_BUILT_IN.index(n) if n in _BUILT_IN else len(_BUILT_IN), n)
    )


def plug_in_modules(parts: Iterable[PartialPart]) -> tuple[str, ...]:
    """The modules that define (and register) those of ``parts`` not built in."""
    return tuple(sorted({type(p).__module__ for p in parts if p.name not in _BUILT_IN}))


# -- the built-in parts ------------------------------------------------------------------


class NonNullCountPart(PartialPart):
    """``nn``: the field's non-NULL values (count, avg, and min / max for NaN)."""

    name = "nn"

    def arrow_type(self, value: pa.DataType) -> pa.DataType:
        return pa.int64()

    def hash_aggregates(self, value: pa.DataType) -> tuple[tuple[str, str], ...]:
        return (("v", "count"),)  # Arrow counts valid values by default

    def from_groups(self, groups: Groups, value: pa.Array, rows: FoldedRows) -> pa.Array:
        return groups.column("v", "count")

    def of_row(self, value: Column, order: Order) -> Column:
        return present(value)

    def merge(self, values: Column) -> Column:
        return F.sum(values)


def present(value: Column) -> Column:
    """A row as a partial of one: 1 non-NULL value, or 0 (BIGINT, as ``nn``)."""
    return F.when(value.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("bigint")


class SumPart(PartialPart):
    """``sum``: the field's sum, BIGINT or DOUBLE; Spark's ``try_sum`` merges it."""

    name = "sum"

    def arrow_type(self, value: pa.DataType) -> pa.DataType:
        return pa.float64() if pa.types.is_floating(value) else pa.int64()

    def hash_aggregates(self, value: pa.DataType) -> tuple[tuple[str, str], ...]:
        return (("v", "sum"),)

    def from_groups(self, groups: Groups, value: pa.Array, rows: FoldedRows) -> pa.Array:
        return groups.column("v", "sum").cast(self.arrow_type(value.type))

    def may_overflow(self, values: pa.Array, folded: np.ndarray, rows: int) -> bool:
        return integer_sum_may_overflow(values, folded, rows)

    def merge(self, values: Column) -> Column:
        return F.try_sum(values)


class DoubleSumPart(PartialPart):
    """``dsum``: the field's sum as DOUBLE (avg: Spark sums an average as DOUBLE)."""

    name = "dsum"

    def arrow_type(self, value: pa.DataType) -> pa.DataType:
        return pa.float64()

    def inputs(self, value: pa.Array, rows: FoldedRows) -> dict[str, pa.Array]:
        return {"d": value.cast(pa.float64())}

    def hash_aggregates(self, value: pa.DataType) -> tuple[tuple[str, str], ...]:
        return (("d", "sum"),)

    def from_groups(self, groups: Groups, value: pa.Array, rows: FoldedRows) -> pa.Array:
        return groups.column("d", "sum")

    def may_overflow(self, values: pa.Array, folded: np.ndarray, rows: int) -> bool:
        return integer_sum_may_overflow(values, folded, rows)

    def of_row(self, value: Column, order: Order) -> Column:
        return value.cast("double")

    def merge(self, values: Column) -> Column:
        return F.try_sum(values)


class ExtremePart(PartialPart):
    """``min`` / ``max`` with Spark's rule for NaN, above every number: Arrow skips NaN,
    so a group holding one has NaN as its max, and as its min when all are NaN."""

    def __init__(self, largest: bool) -> None:
        self.largest = largest
        self.name = "max" if largest else "min"  # type: ignore[misc]

    def arrow_type(self, value: pa.DataType) -> pa.DataType:
        return value

    def inputs(self, value: pa.Array, rows: FoldedRows) -> dict[str, pa.Array]:
        if not pa.types.is_floating(value.type):
            return {}
        valid = value.is_valid().to_numpy(zero_copy_only=False)
        nan = np.isnan(value.fill_null(0.0).to_numpy()) & valid
        return {"nan": pa.array(nan.astype(np.int64))}

    def hash_aggregates(self, value: pa.DataType) -> tuple[tuple[str, str], ...]:
        if not pa.types.is_floating(value):
            return (("v", self.name),)
        return (("v", self.name), ("v", "count"), ("nan", "sum"))

    def from_groups(self, groups: Groups, value: pa.Array, rows: FoldedRows) -> pa.Array:
        result = groups.column("v", self.name)
        if not pa.types.is_floating(value.type):
            return result
        nans = groups.column("nan", "sum").to_numpy()
        non_null = groups.column("v", "count").to_numpy()
        use_nan = nans > 0 if self.largest else (nans > 0) & (nans == non_null)
        values = result.fill_null(0.0).to_numpy(zero_copy_only=False).copy()
        values[use_nan] = np.nan
        valid = result.is_valid().to_numpy(zero_copy_only=False) | use_nan
        return pa.array(values, value.type, mask=~valid)

    def merge(self, values: Column) -> Column:
        return F.max(values) if self.largest else F.min(values)


class PositionalPart(PartialPart):
    """``first`` / ``last``: struct(t, pos, v), the event time, offset and value of the
    row lowest / highest in (event time, offset) order among non-NULL values. Spark
    merges it with rows as ``struct(t, lane, pos, v)``, the row's lane standing in."""

    orders_by_position = True

    def __init__(self, last: bool) -> None:
        self.last = last
        self.name = "last" if last else "first"  # type: ignore[misc]
        self.pick = "max" if last else "min"

    def arrow_type(self, value: pa.DataType) -> pa.DataType:
        return pa.struct([("t", TIMESTAMP_US), ("pos", pa.int64()), ("v", value)])

    def inputs(self, value: pa.Array, rows: FoldedRows) -> dict[str, pa.Array]:
        valid = value.is_valid().to_numpy(zero_copy_only=False)
        return {"r": pa.array(rows.rank, mask=~valid)}

    def hash_aggregates(self, value: pa.DataType) -> tuple[tuple[str, str], ...]:
        return (("r", self.pick),)

    def from_groups(self, groups: Groups, value: pa.Array, rows: FoldedRows) -> pa.Array:
        ranks = groups.column("r", self.pick)
        at = pa.array(rows.order).take(ranks)  # NULL where the group has no value
        return pa.StructArray.from_arrays(
            [
                pa.array(rows.times).take(at).cast(TIMESTAMP_US),
                pa.array(rows.offsets).take(at),
                value.take(at),
            ],
            fields=list(self.arrow_type(value.type)),
            mask=ranks.is_null(),
        )

    def of_row(self, value: Column, order: Order) -> Column:
        return F.when(value.isNotNull(), ordered(order, value))

    def of_partial(self, field: Column, order: Order) -> Column:
        lane = order[1]  # a partial's rows are of one lane: the row's
        return F.when(
            field.isNotNull(),
            F.struct(
                field.getField("t").alias("t"),
                lane.alias("lane"),
                field.getField("pos").alias("pos"),
                field.getField("v").alias("v"),
            ),
        )

    def merge(self, values: Column) -> Column:
        return F.max(values) if self.last else F.min(values)


def ordered(order: Order, value: Column) -> Column:
    """struct(t, lane, pos, v): compares by the events' total order before the value."""
    t, lane, pos = order
    return F.struct(t.alias("t"), lane.alias("lane"), pos.alias("pos"), value.alias("v"))


NON_NULL = register_part(NonNullCountPart())
SUM = register_part(SumPart())
DOUBLE_SUM = register_part(DoubleSumPart())
MIN = register_part(ExtremePart(largest=False))
MAX = register_part(ExtremePart(largest=True))
FIRST = register_part(PositionalPart(last=False))
LAST = register_part(PositionalPart(last=True))
_BUILT_IN = tuple(PARTIAL_PARTS)
