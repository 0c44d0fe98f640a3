"""A micro-batch's observations (``DataFrame.observe``), read on the driver while the
batch is still in ``foreachBatch``.

Spark computes an observation with accumulators of the batch's own execution and puts
it in the progress report after the batch has committed: too late for rows that must
be written before the commit (the dead letters, ``flow_jobs.dead_letters``). So the
sink reads them, once the batch's action has run, from the query's current execution
(the one ``foreachBatch``'s frame runs: ``StreamExecution.lastExecution``), then empties
their accumulators, so the progress report (which Spark keeps in memory and logs) does
not carry the rows. Every step is pinned against the Spark we ship by
``tests/test_spark_contracts.py``.
"""

from __future__ import annotations

from typing import Any

from pyspark import SparkContext, cloudpickle
from pyspark.sql.streaming import StreamingQuery

from flow_jobs.java import java_class

_OBSERVATION = "CollectMetrics"  # the nodeName of Spark's CollectMetricsExec


class Observations:
    """Reads, then empties, the observations of a query's batches whose names start with
    ``prefix`` (each a ``collect_list`` aliased ``rows``).

    Finding them walks the physical plan over py4j (a few calls per node, ~35 nodes for
    a window over one source); every batch re-plans the same shape, so the walk runs on
    the first batch and the nodes' numbers (``TreeNode.apply``, pre-order) serve the
    next ones, checked, and walked anew if the plan changed."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._numbers: list[int] | None = None

    def take(self, query: StreamingQuery) -> dict[str, list[Any]]:
        """The rows each observation of the batch just run collected, by name."""
        execution = query._jsq.streamingQuery().lastExecution()
        if execution is None:
            return {}
        plan = execution.executedPlan()
        nodes = self._numbered(plan) if self._numbers is not None else None
        if nodes is None:
            self._numbers = _find(plan, self.prefix)
            nodes = [plan.apply(n) for n in self._numbers]
        found: dict[str, list[Any]] = {}
        for node in nodes:
            row = _python_row(node.collectedMetrics())
            # A view read twice has one node per read, both named alike, with the same
            # rows: the driver keeps one row per record position (dead_letters._distinct).
            found.setdefault(node.name(), []).extend(row["rows"] or ())
            _empty(node)
        return found

    def _numbered(self, plan: Any) -> list[Any] | None:
        assert self._numbers is not None
        nodes = [plan.apply(n) for n in self._numbers]
        if all(self._wanted(node) for node in nodes):
            return nodes
        return None

    def _wanted(self, node: Any) -> bool:
        return node is not None and _is_wanted(node, self.prefix)


def _is_wanted(node: Any, prefix: str) -> bool:
    return bool(node.nodeName() == _OBSERVATION and node.name().startswith(prefix))


def _find(plan: Any, prefix: str) -> list[int]:
    """The pre-order numbers of the wanted observations, as ``TreeNode.apply`` counts:
    a node, then its inner children, then its children."""
    numbers, stack, number = [], [plan], 0
    while stack:
        node = stack.pop()
        if _is_wanted(node, prefix):
            numbers.append(number)
        number += 1
        inner, children = node.innerChildren(), node.children()
        below = [inner.apply(i) for i in range(inner.size())]
        below += [children.apply(i) for i in range(children.size())]
        stack.extend(reversed(below))
    return numbers


def _empty(node: Any) -> None:
    """Empty an observation's accumulator, and only it: the node's ``resetMetrics``
    resets every metric of the plan below it too, the source's row count among them."""
    context = java_class(_jvm(), "org.apache.spark.util.AccumulatorContext")
    held = context.get(node.accumulatorId())
    if held.isEmpty():
        return
    accumulator = held.get()
    accumulator.reset()
    if accumulator.getClass().getSimpleName() == "LastAttemptAggregatingAccumulator":
        accumulator.resetLastAttemptAccumulator()


def _python_row(jrow: Any) -> Any:
    """A JVM ``Row`` as a PySpark ``Row``, the way PySpark converts observed metrics."""
    utils = java_class(_jvm(), "org.apache.spark.sql.api.python.PythonSQLUtils")
    return cloudpickle.loads(utils.toPyRow(jrow))


def _jvm() -> Any:
    jvm = SparkContext._jvm
    assert jvm is not None
    return jvm
