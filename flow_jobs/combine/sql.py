"""Whether ``[transform].sql`` is a simple pre-stage the window can fold behind: a
projection and a filter over the first source's view, each expression in the grammar of
``flow_jobs.kafka.prestage`` (column references, renames, literals, casts, comparisons,
``IS [NOT] NULL``, ``IN``, ``AND`` / ``OR`` / ``NOT``, ``+ - *``).

Spark decides what the SQL means: the SQL is analyzed and optimized by Spark over a
stand-in of the source's view (an empty relation of the view's columns), and this module
reads the optimized plan's expressions (its JSON: implicit casts made explicit,
constants folded). It translates them, never the SQL text, into the reader's
expressions and back into Spark columns for the query; anything outside the grammar,
or a plan of another shape (a join, an aggregate, a UDF, a second source, a lookup),
keeps today's path, and ``flow-jobs validate --plan`` says why.

For the query, the SQL then runs as this module rebuilds it from the same plan: the
filter applies to the source's own rows, a partial from the reader passes if it holds
kept rows (``flow_jobs.kafka.combine.KEPT``), and the projection keeps the columns the
window reads plus the hidden partial column, which the SQL as written would drop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from flow_jobs.aggregations.partials import PARTIAL_VIEW
from flow_jobs.kafka.combine import KEPT
from flow_jobs.kafka.prestage import (
    ARITHMETIC,
    ARROW_TYPES,
    COMPARISONS,
    Expr,
    Stage,
    castable,
)
from flow_jobs.records import EVENT_TS
from flow_jobs.spec.models import KAFKA_COLUMN

_CATALYST = "org.apache.spark.sql.catalyst.expressions."
_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
_BINARY = {
    "EqualTo": "eq", "LessThan": "lt", "LessThanOrEqual": "le", "GreaterThan": "gt",
    "GreaterThanOrEqual": "ge", "EqualNullSafe": "nse", "And": "and", "Or": "or",
    "Add": "add", "Subtract": "sub", "Multiply": "mul",
}  # fmt: skip
_UNARY = {"IsNull": "isnull", "IsNotNull": "notnull", "Not": "not", "UnaryMinus": "neg"}
#: ``_kafka`` as ``flow_jobs.plan.sources`` builds it (the record's position and bytes).
_KAFKA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
#: Spark's type of each of the reader's type names (``flow_jobs.kafka.prestage.ARROW_TYPES``).
SPARK_TYPES: dict[str, DataType] = {
    "byte": ByteType(), "short": ShortType(), "integer": IntegerType(), "long": LongType(),
    "float": FloatType(), "double": DoubleType(), "string": StringType(),
    "boolean": BooleanType(),
}  # fmt: skip


class NotInGrammar(Exception):
    """An expression or plan node the reader does not evaluate (the message says which)."""


@dataclass(frozen=True)
class PreStage:
    """The SQL as Spark's optimized plan has it: the filter (None: none) and each output
    column (name -> expression; a column the grammar cannot express is None, fine as
    long as the window does not read it)."""

    source: str
    where: Expr | None
    outputs: dict[str, Expr | None]
    ansi: bool

    def reference(self, name: str) -> str | None:
        """The view column an output is a plain reference to (renamed or not), or None."""
        e = self.outputs.get(name)
        return e["name"] if e is not None and e["op"] == "col" else None

    def stage(self, payload_keys: set[str], columns: list[str]) -> Stage:
        """The reader's stage: the filter and the aggregated ``columns`` that are not
        payload fields passed as they are (``payload_keys``: those the reader reads)."""
        computed = []
        for name in columns:
            e = self.outputs[name]
            assert e is not None
            if not (e["op"] == "col" and e["name"] == name and name in payload_keys):
                computed.append((name, e))
        return Stage(self.where, tuple(computed), self.ansi)

    def frame(self, spark: SparkSession, names: list[str]) -> DataFrame:
        """The query's pre-stage over the source view (with partials): the filter on
        rows, ``KEPT`` on partials, the output columns ``names`` and the partial."""
        view = spark.table(self.source)
        if self.where is not None:
            partial = F.col(PARTIAL_VIEW)
            view = view.where(
                F.when(partial.isNull(), to_column(self.where)).otherwise(partial.getField(KEPT))
            )
        out = []
        for name in names:
            e = self.outputs[name]
            assert e is not None
            out.append(to_column(e).alias(name))
        return view.select(*out, F.col(PARTIAL_VIEW))


def analyze(spark: SparkSession, sql: str, source: str, payload: StructType) -> PreStage:
    """The pre-stage of ``sql`` over the view ``source`` (whose payload schema is
    ``payload``), read from Spark's optimized plan; ``NotInGrammar`` says why not."""
    stand_in = StructType(
        [
            *payload.fields,
            StructField(EVENT_TS, TimestampType()),
            StructField(KAFKA_COLUMN, DataType.fromDDL(_KAFKA_DDL)),
        ]
    )
    # Analyzed in a session of its own, with the pipeline session's SQL settings (ANSI
    # mode changes what the optimizer folds), so the pipeline's views stay as they are.
    session = spark.newSession()
    for key in ("spark.sql.ansi.enabled", "spark.sql.caseSensitive", "spark.sql.session.timeZone"):
        session.conf.set(key, spark.conf.get(key))
    session.createDataFrame([], stand_in).createOrReplaceTempView(source)
    try:
        frame = session.sql(sql)
    except Exception as e:  # the query's own compile reports it with its key
        raise NotInGrammar(f"Spark cannot analyze it over {source} alone") from e
    ansi = spark.conf.get("spark.sql.ansi.enabled", "false").lower() == "true"
    nodes = json.loads(frame._jdf.queryExecution().optimizedPlan().toJSON())
    return _read_plan(nodes, source, ansi)


def _read_plan(nodes: list[dict[str, Any]], source: str, ansi: bool) -> PreStage:
    """A chain Project? Filter? Project? down to the stand-in relation, or NotInGrammar."""
    leaf = nodes[-1]
    if not leaf["class"].endswith(".LogicalRDD") or leaf["num-children"] != 0:
        kind = leaf["class"].rsplit(".", 1)[-1]
        raise NotInGrammar(f"Spark's plan of it does not end in the source's rows ({kind})")
    # The source's columns by Spark's own id, so a name never stands for another
    # attribute (an alias of the same name computed above a filter, say).
    columns = {a[0]["exprId"]["id"]: (a[0]["name"], a[0]["dataType"]) for a in leaf["output"]}
    outputs: dict[str, Expr | None] | None = None
    where: list[Expr] = []
    for node in nodes[:-1]:
        kind = node["class"].removeprefix(_LOGICAL)
        if node["num-children"] != 1 or kind not in ("Project", "Filter"):
            raise NotInGrammar(f"it is not a projection and a filter ({kind})")
        if kind == "Filter":
            where.append(_expr(node["condition"], columns))
        elif outputs is None:  # the top projection: the SQL's output columns
            outputs = {}
            for item in node["projectList"]:
                name = item[0]["name"]
                try:  # a name given twice is ambiguous: None, like an expression
                    outputs[name] = None if name in outputs else _expr(item, columns)
                except NotInGrammar:
                    outputs[name] = None
        elif not all(i[0]["class"].endswith("AttributeReference") for i in node["projectList"]):
            raise NotInGrammar("it computes columns below its filter")
    if outputs is None:  # SELECT * (no projection left in the plan)
        outputs = {name: {"op": "col", "name": name, "type": t} for name, t in columns.values()}
    condition = reduce(lambda a, b: {"op": "and", "args": [a, b], "type": "boolean"}, where) \
        if where else None  # fmt: skip
    return PreStage(source, condition, outputs, ansi)


def _expr(nodes: list[dict[str, Any]], columns: dict[int, tuple[str, Any]]) -> Expr:
    """The expression of Spark's JSON (its nodes in pre-order), in the reader's grammar."""
    expr, used = _node(nodes, 0, columns)
    assert used == len(nodes)
    return expr


def _node(
    nodes: list[dict[str, Any]], at: int, columns: dict[int, tuple[str, Any]]
) -> tuple[Expr, int]:
    node = nodes[at]
    kind = node["class"].removeprefix(_CATALYST)
    children: list[Expr] = []
    nxt = at + 1
    for _ in range(node["num-children"]):
        child, nxt = _node(nodes, nxt, columns)
        children.append(child)
    if kind == "Alias":
        return children[0], nxt
    if kind == "AttributeReference":
        name, t = node["name"], node["dataType"]
        if columns.get(node["exprId"]["id"]) != (name, t):
            raise NotInGrammar(f"column {name} is not one of the source's")
        if not (isinstance(t, str) and t in ARROW_TYPES) and name not in (EVENT_TS, KAFKA_COLUMN):
            raise NotInGrammar(f"column {name} is of type {t}")
        return {"op": "col", "name": name, "type": t if isinstance(t, str) else "struct"}, nxt
    if any(c["type"] not in ARROW_TYPES for c in children):
        raise NotInGrammar(f"{kind} reads a column of a type the reader does not compute")
    if kind == "Literal":
        return _literal(node), nxt
    if kind == "Cast":
        target = node["dataType"]
        if not isinstance(target, str) or not castable(children[0]["type"], target):
            raise NotInGrammar(f"a cast from {children[0]['type']} to {target}")
        return {"op": "cast", "arg": children[0], "type": target}, nxt
    if kind in _BINARY:
        op = _BINARY[kind]
        left, right = children[node["left"]], children[node["right"]]
        if op in ARITHMETIC and left["type"] in ("string", "boolean"):
            raise NotInGrammar(f"{kind} of {left['type']}")
        result = left["type"] if op in ARITHMETIC else "boolean"
        return {"op": op, "args": [left, right], "type": result}, nxt
    if kind in _UNARY:
        op = _UNARY[kind]
        result = children[0]["type"] if op == "neg" else "boolean"
        return {"op": op, "arg": children[0], "type": result}, nxt
    if kind == "In":
        value = children[node["value"]]
        return {"op": "in", "arg": value, "list": [children[i] for i in node["list"]],
                "type": "boolean"}, nxt  # fmt: skip
    raise NotInGrammar(f"{kind} is not in the reader's grammar")


def _literal(node: dict[str, Any]) -> Expr:
    t, value = node["dataType"], node["value"]
    if t not in ARROW_TYPES:
        raise NotInGrammar(f"a literal of type {t}")
    if value is not None:
        if t in ("float", "double"):
            value = float(value)
        elif t == "boolean":
            value = value == "true"
        elif t != "string":
            value = int(value)
    return {"op": "lit", "value": value, "type": t}


def to_column(e: Expr) -> Column:
    """The Spark column of a reader expression: the same operators, so Spark evaluates it
    as it evaluated the SQL."""
    op = e["op"]
    if op == "col":
        return F.col(f"`{e['name'].replace('`', '``')}`")
    if op == "lit":
        return F.lit(e["value"]).cast(SPARK_TYPES[e["type"]])
    if op == "cast":
        return to_column(e["arg"]).cast(SPARK_TYPES[e["type"]])
    if op in ("and", "or", *COMPARISONS, *ARITHMETIC):
        a, b = (to_column(x) for x in e["args"])
        return {
            "and": lambda: a & b, "or": lambda: a | b, "eq": lambda: a == b,
            "lt": lambda: a < b, "le": lambda: a <= b, "gt": lambda: a > b,
            "ge": lambda: a >= b, "nse": lambda: a.eqNullSafe(b), "add": lambda: a + b,
            "sub": lambda: a - b, "mul": lambda: a * b,
        }[op]()  # fmt: skip
    arg = to_column(e["arg"])
    if op == "isnull":
        return arg.isNull()
    if op == "notnull":
        return arg.isNotNull()
    if op == "not":
        return ~arg
    if op == "neg":
        return -arg
    assert op == "in"
    return reduce(lambda x, y: x | y, [arg == to_column(v) for v in e["list"]])
