"""``[target]`` with ``kind = "delta"`` (the default kind): its keys."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr

from flow_jobs.locations import is_uri, on_object_store
from flow_jobs.spec.base import revealed
from flow_jobs.spec.targets import TargetSpec


class DeltaTarget(TargetSpec):
    """``[target]`` with ``kind = "delta"``: MERGE on the natural key, once per batch
    (Delta's application transaction)."""

    kind: Literal["delta"] = "delta"
    default = True  # a [target] without kind is a Delta table
    path: str = Field(min_length=1)
    #: delta-rs storage options of the table (credentials, endpoint): secrets.
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)
    #: Where a batch that only inserts (windows emitted "final", joins, appends, on a
    #: table only this checkpoint's inserts wrote) writes its data files: "executors"
    #: (each task its file, the driver commits their list: its rows never reach the
    #: driver) or "driver" (one MERGE, as every other batch). A table on an object store
    #: is written by the driver.
    inserts_from: Literal["executors", "driver"] = "executors"

    def describe(self) -> str:
        return self.path

    def short_name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def table_beside(self, suffix: str) -> tuple[str, dict[str, SecretStr]] | None:
        if not on_object_store(self.path):
            return None
        return self.path.rstrip("/") + suffix, dict(self.storage_options)

    def stored_under(
        self, root: str | None, storage_options: Mapping[str, str]
    ) -> dict[str, Any] | None:
        changes: dict[str, Any] = {}
        path = self.path
        if root and not is_uri(path) and not os.path.isabs(path):
            changes["path"] = (
                str(Path(root) / path)
                if not is_uri(root)
                else f"{root.rstrip('/')}/{path.removeprefix('./')}"
            )
        if storage_options:
            changes["storage_options"] = {**revealed(self.storage_options), **storage_options}
        return changes
