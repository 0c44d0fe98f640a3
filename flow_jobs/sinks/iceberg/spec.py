"""``[target]`` with ``kind = "iceberg"``: its keys, and its catalog's."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from flow_jobs.locations import is_uri
from flow_jobs.spec.base import SpecModel, _identifier, key_error
from flow_jobs.spec.targets import TargetSpec

#: ``partition_by`` entries: Iceberg's partition transforms, as Spark and Flink SQL
#: spell them (``days(ts)`` is Spark's plural of ``day(ts)``).
PARTITION = re.compile(
    r"^\s*(?:(?P<unary>identity|years?|months?|days?|hours?)\(\s*(?P<column>\w+)\s*\)"
    r"|(?P<binary>bucket|truncate)\(\s*(?P<n>\d+)\s*,\s*(?P<column2>\w+)\s*\)"
    r"|(?P<plain>\w+))\s*$"
)


class IcebergCatalog(SpecModel):
    """``[target.catalog]``: where the table is registered.

    ``kind = "sql"`` (the default): pyiceberg's SQL catalog, by default in the state
    store's own Postgres database (``uri`` unset), its data files under ``warehouse``.
    ``kind = "rest"``: an Iceberg REST catalog at ``uri``; its credentials
    (``token``, ``credential``, object-store keys) go in ``properties``, as secrets.
    """

    kind: Literal["sql", "rest"] = "sql"
    #: the catalog's name (a SQL catalog keeps several in one database by it)
    name: str = "flow_jobs"
    #: sql: a SQLAlchemy URL (``postgresql+psycopg://...``, ``sqlite:///...``); unset:
    #: the state store's database. rest: the catalog's URL. A secret: it may hold one.
    uri: SecretStr | None = None
    #: where new tables' files go: a folder or an object-store URI
    warehouse: str | None = None
    #: any other pyiceberg catalog property (``token``, ``s3.access-key-id``...)
    properties: dict[str, SecretStr] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rules(self) -> IcebergCatalog:
        if self.kind == "rest" and self.uri is None:
            raise key_error("uri", 'a REST catalog (kind = "rest") needs its uri')
        return self


class IcebergTarget(TargetSpec):
    """``[target]`` with ``kind = "iceberg"``: each batch committed once to an Iceberg
    table through pyiceberg, the rows it replaces rewritten in the same commit."""

    kind: Literal["iceberg"]
    #: ``namespace.table`` (``table`` alone: namespace ``flow_jobs``)
    table: str = Field(min_length=1)
    catalog: IcebergCatalog = Field(default_factory=IcebergCatalog)
    #: the table's partition spec when flow-jobs creates it, e.g. ``["day(window_start)"]``:
    #: identity, year, month, day, hour, ``bucket(N, column)``, ``truncate(W, column)``
    partition_by: list[str] = Field(default_factory=list)
    #: Where a batch that only inserts writes its data files, as for a Delta target:
    #: "executors" (an unpartitioned table in a local warehouse, written only by this
    #: checkpoint's inserts) or "driver" (the read, merge and overwrite of every batch)
    inserts_from: Literal["executors", "driver"] = "executors"

    @model_validator(mode="after")
    def _rules(self) -> IcebergTarget:
        parts = self.table.split(".")
        if len(parts) > 2:
            raise key_error("table", f"table = {self.table!r}: give namespace.table")
        for part in parts:
            _identifier("table", part)
        for entry in self.partition_by:
            if PARTITION.match(entry) is None:
                raise key_error(
                    "partition_by",
                    f"partition_by entry {entry!r} is not a partition transform; use a column, "
                    "identity(c), year(c), month(c), day(c), hour(c), bucket(N, c) or "
                    "truncate(W, c)",
                )
        return self

    @property
    def identifier(self) -> tuple[str, str]:
        namespace, _, name = self.table.rpartition(".")
        return (namespace or "flow_jobs", name)

    def describe(self) -> str:
        return ".".join(self.identifier)

    def short_name(self) -> str:
        return self.identifier[1]

    def partition_columns(self) -> list[str]:
        """The columns ``partition_by`` partitions on (the compiler checks they exist)."""
        columns = []
        for entry in self.partition_by:
            found = PARTITION.match(entry)
            assert found is not None
            columns.append(found["column"] or found["column2"] or found["plain"])
        return columns

    def stored_under(
        self, root: str | None, storage_options: Mapping[str, str]
    ) -> dict[str, Any] | None:
        warehouse = self.catalog.warehouse
        if not root or warehouse is None or is_uri(warehouse) or os.path.isabs(warehouse):
            return {}
        moved = (
            str(Path(root) / warehouse)
            if not is_uri(root)
            else f"{root.rstrip('/')}/{warehouse.removeprefix('./')}"
        )
        return {"catalog": self.catalog.model_copy(update={"warehouse": moved})}
