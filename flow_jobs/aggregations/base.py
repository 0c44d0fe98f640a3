"""What every aggregator implements (``Aggregator``), and what it is given: its input
(``AggregationInput``) and, in a native window, the window (``NativeWindow``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
)

from flow_jobs.aggregations.partials import Merge
from flow_jobs.kernels.ranges import WindowAggregator
from flow_jobs.partial_parts import PartialPart, ordered
from flow_jobs.spec.models import Aggregation


@dataclass(frozen=True)
class NativeAggregate:
    """Columns for ``groupBy(...).agg(...)``, then the output columns built from them."""

    aggregates: tuple[Column, ...]
    outputs: tuple[Column, ...]


@dataclass(frozen=True)
class AggregationInput:
    """Where an aggregation's value comes from, checked against the window's input."""

    spec: Aggregation
    index: int
    value: Column | None
    data_type: DataType | None
    row_columns: tuple[str, ...]  # the row's columns (reduce without a column)

    @property
    def key(self) -> str:
        return f"transform.window.aggregations[{self.index}]"

    @property
    def hidden(self) -> str:
        return f"__flow_agg_{self.index}"

    @property
    def column_value(self) -> Column:
        assert self.value is not None
        return self.value


@dataclass(frozen=True)
class NativeWindow:
    """What a native aggregation may use besides its input: the events' total order
    (event time, lane, position: ``flow_jobs.plan.ordering``), the window's bounds, the
    group keys and the pipeline (for error messages)."""

    order: tuple[Column, Column, Column]
    bounds: tuple[Column, Column]
    group_by: tuple[str, ...]
    pipeline: str
    #: set: the input holds partial aggregates from the reader (``flow_jobs.combine.decide``)
    merge: Merge | None = None


StateInputs = dict[str, tuple[Column, DataType]]

#: What ``inspect`` shows for an aggregate whose open value the state does not hold.
NOT_DECODED = "n/a"


@dataclass(frozen=True)
class StateBuffer:
    """One Spark aggregate function's buffer in an open native window's state, as the
    compiled plan lays it out (``flow_jobs.runtime.inspect.buffers``): the function's
    SQL name and its fields' values by name."""

    function: str
    fields: dict[str, Any]


class NotDecoded(ValueError):
    """Why ``inspect`` shows ``NOT_DECODED`` for an aggregate (its note says so)."""


#: Numbers the Kafka reader sums and compares in its partials (``flow_jobs.kafka.folding``).
PARTIAL_NUMBERS = (LongType, IntegerType, ShortType, ByteType, DoubleType)


class Aggregator(ABC):
    """One aggregator: its native compile, its state-API implementation, its result
    types, the partial parts it merges when the reader pre-aggregates, and how ``inspect``
    reads an open native window's value from Spark's aggregation buffers, plain or
    merging partials. Adding one is a module of ``flow_jobs.aggregations`` and its entry
    in the registry there; ``tests/test_aggregators.py`` checks that it has every part."""

    name: ClassVar[str]
    native_form: ClassVar[str]  # what it compiles to in a native window (``--plan``)
    state_form: ClassVar[str]  # what computes it in a state-API window
    numeric_only: ClassVar[bool] = False
    #: It may be given without a column (it then reads the row).
    column_optional: ClassVar[bool] = False
    #: The spec keys it takes besides agg, column and as (``flow_jobs.spec.aggregation``;
    #: another aggregator given one is refused with its ``misplaced``).
    options: ClassVar[tuple[str, ...]] = ()
    #: The parts of the reader's partial it merges over its column (registered ones:
    #: ``flow_jobs.partial_parts``); None: a window holding it does not
    #: pre-aggregate.
    partial_parts: ClassVar[tuple[PartialPart, ...] | None] = None
    #: Its state per group grows with the window's rows (collect, reduce): the state
    #: estimate says so (``flow_jobs.plan.sizing``).
    state_grows_with_rows: ClassVar[bool] = False
    #: Why ``inspect`` shows no open value for it in any window, native or on the state
    #: API (None: it shows one).
    not_inspected: ClassVar[str | None] = None

    def folds(self, value: DataType | None) -> bool:
        """Whether the reader can pre-aggregate it over a column of type ``value``
        (None: no column), given ``partial_parts``."""
        return self.partial_parts is not None and value is not None

    def check_spec(self, spec: Aggregation) -> None:
        """Its rules among its ``options`` (raises ``flow_jobs.spec.base.key_error``)."""
        return  # most take no key of their own

    def misplaced(self, key: str, value: Any) -> str:
        """Why another aggregator refuses ``key`` (one of its ``options``)."""
        return f'{key} is only valid for agg = "{self.name}"'

    def state_bytes(self, spec: Aggregation) -> int:
        """Bytes of a native window's state per group (each buffered row's, when
        ``state_grows_with_rows``), for the state estimate (``flow_jobs.plan.sizing``)."""
        return 16

    @abstractmethod
    def state_functions(self, merging: bool) -> tuple[str, ...]:
        """The Spark aggregate functions (their SQL names) its native compile keeps in a
        window's state, each once, in the order its expression first names them
        (pre-order; a function named twice is one buffer); ``merging``: the window merges
        the reader's partials (``NativeWindow.merge``). ``inspect`` checks the compiled
        plan against them before ``open_value`` reads their buffers."""

    @abstractmethod
    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        """An open native window's value as it stands, from the buffers of its
        ``state_functions`` (``inspect``); raises ``NotDecoded`` where they do not hold
        it in a form inspect reads."""

    @abstractmethod
    def result_types(self, a: AggregationInput) -> list[DataType]:
        """The output column types, identical in both engines."""

    @abstractmethod
    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        """The columns of Spark's streaming aggregation, then the outputs from them."""

    @abstractmethod
    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        """The state-API implementation, reading ``column`` of the operator's input."""

    def state_inputs(self, a: AggregationInput, frame: DataFrame) -> StateInputs:
        """The operator input columns it reads (by default its own column)."""
        column = a.spec.column
        if column is None:
            return {}
        return {column: (F.col(column), frame.schema[column].dataType)}

    def state_column(self, a: AggregationInput) -> str | None:
        return a.spec.column


def simple(expr: Column, hidden: str, alias: str) -> NativeAggregate:
    """One aggregate column, output as it is."""
    return NativeAggregate((expr.alias(hidden),), (F.col(hidden).alias(alias),))


class OneFunctionAggregator(Aggregator):
    """One Spark aggregate function in a native window (over rows, or over rows and the
    reader's partials alike); on the state API, a class that takes only its column and
    output names."""

    state_class: ClassVar[type[WindowAggregator]]

    @abstractmethod
    def function(self, a: AggregationInput) -> Column:
        """The Spark aggregate of the input."""

    def merged(self, a: AggregationInput, w: NativeWindow, merge: Merge) -> Column:
        """The Spark aggregate of rows and partials alike (``flow_jobs.combine.decide``),
        from its parts' merges (``Merge.merged``)."""
        raise NotImplementedError(f"{self.name} has no partials")

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        function = self.function(a) if w.merge is None else self.merged(a, w, w.merge)
        return simple(function, a.hidden, a.spec.as_)

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return self.state_class(column, a.spec.output_names())


def ordered_items(a: AggregationInput, order: tuple[Column, Column, Column]) -> Column:
    """array_sort(collect_list(struct(t, lane, pos, v))) over non-NULL values (the whole
    row when no column is named)."""
    if a.value is None:
        item = ordered(order, F.struct(*(F.col(c) for c in a.row_columns)))
    else:
        item = F.when(a.value.isNotNull(), ordered(order, a.value))
    return F.array_sort(F.collect_list(item))
