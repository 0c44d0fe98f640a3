"""An Iceberg batch that only inserts, written by the executors: each task writes its
rows as a Parquet data file into the table's ``data`` folder (``flow_jobs.io.task_files``)
and the driver adds the files to the table (pyiceberg's ``add_files``, which reads their
footers, never their rows) in one commit with the batch id in the table's properties,
as the sink's every commit. A replayed batch finds the id and commits nothing; its new
files are removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from flow_jobs.io.batch import StagedFiles
from flow_jobs.io.task_files import remove_files, stage_files

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame

#: a snapshot's summary: how it was written ("files": the executors' inserts)
WRITE = "flow-jobs.write"


class IcebergFileInserts:
    """An Iceberg table's inserts written by the executors into ``root``."""

    def __init__(self, root: str, schema: pa.Schema) -> None:
        self.root = root
        self.schema = schema

    def stage(self, frame: DataFrame, batch_id: int) -> StagedFiles:
        Path(self.root).mkdir(parents=True, exist_ok=True)
        return stage_files(frame, self.root, self.schema, f"flow-b{batch_id:08d}")

    def commit(
        self, table: Table, staged: StagedFiles, txn: dict[str, str], properties: dict[str, str]
    ) -> None:
        """The files added, and the batch id set, in one commit."""
        with table.transaction() as tx:
            if staged.files:
                paths = [Path(self.root, f["path"]).as_uri() for f in staged.files]
                tx.add_files(paths, snapshot_properties={**properties, WRITE: "files"})
            tx.set_properties(txn)

    def discard(self, staged: StagedFiles) -> None:
        remove_files(self.root, staged)


def inserted_only_by(table: Table, query_id: str) -> bool:
    """Whether every snapshot of the table is one of ``query_id``'s executor inserts:
    then no row in it can come again from this query."""
    for snapshot in table.snapshots():
        summary: Any = snapshot.summary
        if summary is None or summary.get(WRITE) != "files":
            return False
        if summary.get("flow-jobs.query-id") != query_id:
            return False
    return True
