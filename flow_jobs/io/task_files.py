"""Data files written by the executors: a micro-batch that only inserts runs as
``mapInArrow``, each task writing its rows as one Parquet file into the target's folder
and handing the driver one row about it (``FILE_SCHEMA``); the target's sink commits the
files (``flow_jobs.sinks.delta.files``, ``flow_jobs.sinks.iceberg.files``). The driver
holds the files' names and statistics, never the rows."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from flow_jobs.io.batch import StagedFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: what each task hands the driver: one row per data file it wrote
FILE_SCHEMA = "path STRING, size BIGINT, rows BIGINT, stats STRING, modified BIGINT"
#: the key of a data file's footer metadata naming the process that wrote it
WRITTEN_BY = "flow-jobs.written-by"


def write_task_files(
    root: str, schema_ipc: bytes, prefix: str, stats: Callable[[Any, int], str] | None = None
) -> Any:  # a function for mapInArrow, shipped to the executors
    """The function each task runs: its Arrow batches into one Parquet file under
    ``root`` (none for a task without rows), then the file's row for the driver, with
    ``stats(parquet metadata, rows)`` where the target wants its statistics."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        # who wrote the file, in its footer: an executor, not the driver (tests/test_cluster.py)
        writer_of = json.dumps({"pid": os.getpid(), "cwd": os.getcwd()}).encode()
        schema = schema.with_metadata({WRITTEN_BY: writer_of})
        name = f"{prefix}-{uuid.uuid4().hex}.parquet"
        path = os.path.join(root, name)
        writer = None
        rows = 0
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if writer is None:
                    writer = pq.ParquetWriter(path, schema)
                writer.write_batch(batch.select(schema.names).cast(schema))
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            return
        shown = stats(pq.ParquetFile(path).metadata, rows) if stats is not None else None
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "path": name,
                    "size": os.path.getsize(path),
                    "rows": rows,
                    "stats": shown,
                    "modified": int(os.path.getmtime(path) * 1000),
                }
            ]
        )

    return write


def stage_files(
    frame: DataFrame,
    root: str,
    schema: pa.Schema,
    prefix: str,
    stats: Callable[[Any, int], str] | None = None,
) -> StagedFiles:
    """Run a micro-batch (its one action), each task writing its rows' file into
    ``root`` as ``schema``: the files, as the driver holds them."""
    from pyspark.sql.types import StructType

    function = write_task_files(root, schema.serialize().to_pybytes(), prefix, stats)
    files = frame.mapInArrow(function, StructType.fromDDL(FILE_SCHEMA)).collect()
    return StagedFiles(tuple(f.asDict() for f in files))


def remove_files(root: str, staged: StagedFiles) -> None:
    """Take away files no commit will name (a replayed batch's)."""
    for f in staged.files:
        Path(root, f["path"]).unlink(missing_ok=True)


def local_root(uri: str) -> str | None:
    """A folder every process reaches by a path, of a plain path or a ``file://`` URI
    (None: an object store, which the driver writes)."""
    if uri.startswith("file://"):
        return uri.removeprefix("file://")
    if "://" in uri:
        return None
    return str(Path(uri).resolve())
