"""A Python streaming data source for tests/test_spark_contracts.py.

It hands out one numbered "block" of rows per offset and, each time Spark asks it for a
micro-batch's partitions, records what the checkpoint's offset log holds at that moment:
the contract ``flow_jobs.kafka.heartbeats.batch_stamps`` relies on. It lives in a module
of its own so that the process Spark runs Python sources in can import it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


class Block(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


class OffsetLogProbe(DataSource):
    """Options: ``latest`` (a file holding how many blocks exist), ``checkpoint`` (the query's
    checkpoint folder), ``probe`` (a file the reader appends one JSON line to per
    ``partitions`` call)."""

    @classmethod
    def name(cls) -> str:
        return "flow_contract_probe"

    def schema(self) -> str:
        return "block BIGINT, ts TIMESTAMP"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _Reader(self.options)


class _Reader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def initialOffset(self) -> dict:
        return {"block": 0}

    def latestOffset(self) -> dict:
        with open(self.options["latest"], encoding="utf-8") as f:
            return {"block": int(f.read())}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        folder = os.path.join(self.options["checkpoint"], "offsets")
        ids = sorted(int(n) for n in os.listdir(folder) if n.isdigit())
        newest = ids[-1] if ids else None
        lines: list[str] = []
        if newest is not None:
            with open(os.path.join(folder, str(newest)), encoding="utf-8") as f:
                lines = f.read().splitlines()
        with open(self.options["probe"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"start": start, "end": end, "newest": newest, "lines": lines}))
            f.write("\n")
        return [Block(int(start["block"]), int(end["block"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        import datetime as dt

        assert isinstance(partition, Block)
        for block in range(partition.start, partition.end):
            yield (block, dt.datetime.fromtimestamp(block * 10, tz=dt.UTC))

    def commit(self, end: dict) -> None:
        return None
