"""``[[transform.window.aggregations]]``: one aggregation of a window.

``agg`` names an aggregator (``AGGREGATOR_RULES``, which ``flow_jobs.aggregations``
fills: every aggregator is its own rules); the keys below are the ones some aggregators
take (each aggregator says which, ``options``, and checks its own rules among them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from flow_jobs.plugins import load_builtins
from flow_jobs.spec.base import ImportPath, SpecModel, _identifier, key_error


class AggregatorRules(Protocol):
    """What a spec asks of an aggregator (``flow_jobs.aggregations.Aggregator``)."""

    @property
    def name(self) -> str: ...

    @property
    def numeric_only(self) -> bool:
        """It takes numbers only (sum, avg): a column declared otherwise is refused."""

    @property
    def column_optional(self) -> bool:
        """It may be given without a column (it then reads the row)."""

    @property
    def options(self) -> tuple[str, ...]:
        """The spec keys it takes besides agg, column and as."""

    def check_spec(self, spec: Aggregation) -> None:
        """Its rules among its ``options`` (raises ``key_error``)."""

    def misplaced(self, key: str, value: Any) -> str:
        """Why another aggregator refuses ``key`` (one of its ``options``)."""


#: The names ``agg`` takes, each with its rules. The spec sits below the aggregators
#: (which compile with Spark): they put themselves here when they register.
AGGREGATOR_RULES: dict[str, AggregatorRules] = {}

#: The keys every aggregation has; the others are some aggregators' (``Aggregator.options``).
_COMMON_KEYS = {"agg", "column", "as_"}


class Aggregation(SpecModel):
    """One ``[[transform.window.aggregations]]`` entry."""

    #: An aggregator's name: a key of ``AGGREGATOR_RULES``.
    agg: str
    column: str | None = None
    as_: str = Field(alias="as", min_length=1)
    #: count_distinct: "approximate" (HyperLogLog, the default) or "exact".
    mode: Literal["approximate", "exact"] | None = None
    #: count_distinct approximate: log2 of the HLL register count (14: ~0.8% error).
    hll_precision: Annotated[int, Field(ge=4, le=21)] | None = None
    #: count_distinct approximate: also write the DataSketches HLL sketch (binary).
    keep_sketch: bool | None = None
    max_distinct_values_per_group: Annotated[int, Field(gt=0)] | None = None
    #: reduce: ``module:function`` (or a function, in Python) called with the first value.
    initializer: ImportPath | None = None
    #: reduce: ``module:function`` called with (aggregate, value) for every later value.
    reducer: ImportPath | None = None
    #: reduce: the Spark DDL type of what the reducer returns, e.g. "DOUBLE".
    result_type: str | None = None

    @field_validator("agg")
    @classmethod
    def _an_aggregator(cls, name: str) -> str:
        load_builtins()  # the built-in aggregators register when a spec is validated
        if name not in AGGREGATOR_RULES:
            *most, last = (repr(n) for n in AGGREGATOR_RULES)
            expected = f"{', '.join(most)} or {last}"
            raise PydanticCustomError(
                "literal_error", "Input should be {expected}", {"expected": expected}
            )
        return name

    @model_validator(mode="after")
    def _rules(self) -> Aggregation:
        _identifier("as", self.as_)
        agg = self.agg
        unit = AGGREGATOR_RULES[agg]
        if not unit.column_optional and not self.column:
            raise key_error("column", f'column is required for agg = "{agg}"')
        for key in type(self).model_fields.keys() - _COMMON_KEYS:
            value = getattr(self, key)
            if value is not None and key not in unit.options:  # another aggregator's key
                owners = [u for u in AGGREGATOR_RULES.values() if key in u.options]
                reason = owners[0].misplaced(key, value) if owners else "no aggregator takes it"
                raise key_error(key, reason)
        unit.check_spec(self)
        return self

    @property
    def precision(self) -> int:
        return self.hll_precision or 14

    @property
    def sketch_column(self) -> str | None:
        return f"{self.as_}_sketch" if self.keep_sketch else None

    def output_names(self) -> list[str]:
        return [self.as_, *([self.sketch_column] if self.sketch_column else [])]
