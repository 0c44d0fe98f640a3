"""A simple ``[transform].sql`` (a projection and a filter over one source) evaluated in
the Kafka reader on the decoded Arrow rows, so the window folds behind it
(``flow_jobs.kafka.combine``).

The expressions come from Spark's own optimized plan of the SQL
(``flow_jobs.combine.sql`` reads it): this module only evaluates them, in the small
grammar whose Arrow result equals Spark's, written down here because Arrow's own
semantics differ from Spark's in places:

* NULL logic: comparisons, arithmetic and casts are NULL on a NULL operand; AND / OR /
  NOT are Kleene's (Arrow's ``and_kleene`` / ``or_kleene`` / ``invert``); ``x IN (a, b)``
  is ``x = a OR x = b`` (so NULL where nothing matches and the list or x holds NULL);
  ``<=>`` is never NULL.
* Floating point compares as Spark does, not as IEEE 754: NaN equals NaN and is above
  every other value (Arrow's comparisons say false for any NaN); -0.0 equals 0.0.
* Integer arithmetic (``+ - *``, unary minus) wraps around like Java's without ANSI mode
  (Arrow's unchecked kernels); with ``spark.sql.ansi.enabled`` the checked kernels raise
  where Spark would fail.
* Casts: integer to integer (wrapping without ANSI, checked with it), integer or FLOAT to
  DOUBLE / FLOAT, integer to STRING, BOOLEAN to integer; nothing else.

Whatever raises here (an overflow with ANSI on, a value Arrow will not cast) is not the
reader's to decide: the chunk's records then pass through unfolded and Spark evaluates
the SQL on them itself, failing or not as it would have without pre-aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Spark's type names (in its plans' JSON) and their Arrow types, for what the grammar reads.
ARROW_TYPES: dict[str, pa.DataType] = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
}
INTEGERS = ("byte", "short", "integer", "long")
FLOATS = ("float", "double")
COMPARISONS = ("eq", "lt", "le", "gt", "ge", "nse")
ARITHMETIC = ("add", "sub", "mul")

#: An expression: a dict with ``op`` and ``type`` (Spark's type name of its result).
Expr = dict[str, Any]


def castable(source: str, target: str) -> bool:
    """Whether a cast from ``source`` to ``target`` is in the grammar (see above)."""
    if source == target:
        return True
    if source in INTEGERS:
        return target in (*INTEGERS, *FLOATS, "string")
    if source == "float":
        return target == "double"
    return source == "boolean" and target in INTEGERS


class Evaluator:
    """Evaluates expressions over a chunk's decoded payloads (a StructArray)."""

    def __init__(self, rows: pa.StructArray, ansi: bool) -> None:
        self.rows, self.ansi, self.n = rows, ansi, len(rows)

    def array(self, e: Expr) -> pa.Array:
        value = self.eval(e)
        if isinstance(value, pa.Scalar):
            return pa.repeat(value, self.n)
        return value.combine_chunks() if isinstance(value, pa.ChunkedArray) else value

    def eval(self, e: Expr) -> Any:
        op = e["op"]
        if op == "col":
            return self.rows.field(e["name"])
        if op == "lit":
            return pa.scalar(e["value"], ARROW_TYPES.get(e["type"], pa.null()))
        if op == "cast":
            return self._cast(e)
        if op in COMPARISONS:
            a, b = (self.eval(x) for x in e["args"])
            return _compare(op, a, b, e["args"][0]["type"] in FLOATS)
        if op == "isnull":
            return pc.is_null(self.eval(e["arg"]))
        if op == "notnull":
            return pc.is_valid(self.eval(e["arg"]))
        if op == "in":
            value = self.eval(e["arg"])
            floats = e["arg"]["type"] in FLOATS
            tests = [_compare("eq", value, self.eval(x), floats) for x in e["list"]]
            return reduce(pc.or_kleene, tests)
        if op == "and":
            return pc.and_kleene(*(self.eval(x) for x in e["args"]))
        if op == "or":
            return pc.or_kleene(*(self.eval(x) for x in e["args"]))
        if op == "not":
            return pc.invert(self.eval(e["arg"]))
        if op in ARITHMETIC:
            a, b = (self.eval(x) for x in e["args"])
            name = {"add": "add", "sub": "subtract", "mul": "multiply"}[op]
            return pc.call_function(f"{name}_checked" if self.ansi else name, [a, b])
        if op == "neg":
            arg = self.eval(e["arg"])
            return pc.negate_checked(arg) if self.ansi else pc.negate(arg)
        raise ValueError(f"not in the reader's grammar: {op}")

    def _cast(self, e: Expr) -> Any:
        arg, target = e["arg"], e["type"]
        value = self.eval(arg)
        if arg["type"] == target:
            return value
        # Without ANSI Spark wraps a narrowing integer cast (Java's); Arrow's unsafe cast
        # truncates the same bits. int -> float rounds to nearest in both.
        safe = self.ansi and target in INTEGERS and arg["type"] in INTEGERS
        return pc.cast(value, ARROW_TYPES[target], safe=safe)


def _compare(op: str, a: Any, b: Any, floats: bool) -> Any:
    if op == "nse":  # <=>: NULL only equals NULL
        equal = _compare("eq", a, b, floats)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        return pc.if_else(pc.is_null(equal), both_null, equal)
    name = {"eq": "equal", "lt": "less", "le": "less_equal", "gt": "greater",
            "ge": "greater_equal"}[op]  # fmt: skip
    plain = pc.call_function(name, [a, b])
    if not floats:
        return plain
    # Spark: NaN = NaN, and NaN is above every number (SQLOrderingUtil.compareDoubles).
    nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
    either = pc.or_(nan_a, nan_b)
    by_nan = {
        "eq": pc.and_(nan_a, nan_b),
        "lt": pc.and_(pc.invert(nan_a), nan_b),
        "le": nan_b,
        "gt": pc.and_(nan_a, pc.invert(nan_b)),
        "ge": nan_a,
    }[op]
    return pc.if_else(either, by_nan, plain)


@dataclass(frozen=True)
class Stage:
    """The reader's half of a pre-stage: the filter (None: every row passes) and the
    aggregated columns the window reads, each computed from the payload under its output
    name (the keys and the event time are the payload's own fields, read as they are)."""

    where: Expr | None
    columns: tuple[tuple[str, Expr], ...]
    ansi: bool = False

    def to_json(self) -> Any:
        return {"where": self.where, "columns": [list(c) for c in self.columns],
                "ansi": self.ansi}  # fmt: skip

    @staticmethod
    def from_json(d: Any) -> Stage:
        return Stage(d["where"], tuple((n, e) for n, e in d["columns"]), bool(d["ansi"]))

    def types(self) -> dict[str, pa.DataType]:
        """The Arrow type of each computed column."""
        return {name: ARROW_TYPES[e["type"]] for name, e in self.columns}

    def apply(
        self, rows: pa.StructArray, keep: list[str]
    ) -> tuple[pa.StructArray, np.ndarray | None]:
        """The rows as the window reads them (the payload fields ``keep``, then the
        computed columns) and where the filter is TRUE (None: no filter). It raises where
        Arrow cannot give Spark's result (see the module)."""
        ev = Evaluator(rows, self.ansi)
        passes = None
        if self.where is not None:
            passes = pc.fill_null(ev.array(self.where), False).to_numpy(zero_copy_only=False)
        names = [*keep, *(n for n, _ in self.columns)]
        arrays = [rows.field(k) for k in keep] + [ev.array(e) for _, e in self.columns]
        return pa.StructArray.from_arrays(arrays, names=names), passes
