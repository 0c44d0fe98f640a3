"""``[target]`` with ``kind = "postgres"``: its keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from flow_jobs.spec.base import _identifier
from flow_jobs.spec.targets import TargetSpec


class PostgresTarget(TargetSpec):
    """``[target]`` with ``kind = "postgres"``: upsert on the natural key, in the state
    store's database, in one transaction with the batch's ledger row."""

    kind: Literal["postgres"]
    table: str
    schema_name: str = Field(default="public", alias="schema")

    @model_validator(mode="after")
    def _rules(self) -> PostgresTarget:
        _identifier("table", self.table)
        _identifier("schema", self.schema_name)
        return self

    def describe(self) -> str:
        return f"{self.schema_name}.{self.table}"

    def short_name(self) -> str:
        return self.table
