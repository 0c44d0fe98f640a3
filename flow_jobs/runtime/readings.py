"""The registry of each stage's reading of its state for ``flow-jobs inspect``
(``READINGS``, by ``Stage.STAGE``), and what a reading is handed (``StateInput``).
Light on purpose: a feature registers here when the registries load, before (and
without) anything of inspect."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flow_jobs.plugins import Registry

if TYPE_CHECKING:
    from pyspark.sql import DataFrameReader, Row, SparkSession

    from flow_jobs.runtime.inspect.report import Reading


@dataclass(frozen=True)
class StateInput:
    """What inspect hands a stage's reading: it fills ``reading.report`` (its windows,
    or its buffered rows, with the counts before the limit).

    Attributes
    ----------
    spark : SparkSession
        The session the state is read with.
    checkpoint : str
        The query's checkpoint.
    batch : int
        The committed micro-batch the state is read at.
    operators : sequence of Row
        Spark's ``state-metadata`` rows of the query's stateful operators
        (``operatorId``, ``operatorName``, ...).
    reading : Reading
        The spec, the report so far, the filter and the limit.
    """

    spark: SparkSession
    checkpoint: str
    batch: int
    operators: Sequence[Row]
    reading: Reading

    def reader(self, operator_id: int) -> DataFrameReader:
        """Spark's state data source at ``batch`` for one operator (each reading adds its
        own options: ``joinSide``, ``stateVarName``)."""
        return (
            self.spark.read.format("statestore")
            .option("batchId", self.batch)
            .option("operatorId", operator_id)
        )


#: Each stage's reading of its state, by ``Stage.STAGE``.
READINGS: Registry[Callable[[StateInput], None]] = Registry("inspect reading")


def register_reading(
    stage: str, read: Callable[[StateInput], None]
) -> Callable[[StateInput], None]:
    """Register how ``flow-jobs inspect`` reads the state of the stage ``stage``."""
    return READINGS.register(stage, read)
