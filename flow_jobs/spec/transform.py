"""``[transform]``: the SQL, the lookups, the per-source operators (the deduplication
among them) and the stages (``stages()``: the window, ``flow_jobs.spec.windows``; the
joins, whose models their packages register in ``STAGE_SPECS``)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    SerializeAsAny,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from flow_jobs.spec.base import SpecModel, _identifier, key_error
from flow_jobs.spec.operators import OPERATOR_SPECS, OperatorSpec
from flow_jobs.spec.stages import STAGE_SPECS, Stage
from flow_jobs.spec.windows import WindowSpec

LookupKind = Literal["delta", "postgres", "csv", "parquet"]


class LookupSpec(SpecModel):
    """``[[transform.lookups]]``: a static table joined in the SQL pre-stage, refreshed."""

    name: str
    kind: LookupKind
    path: str | None = None
    url: SecretStr | None = None
    table: str | None = None
    schema_ddl: str | None = Field(default=None, alias="schema")
    options: dict[str, str] = Field(default_factory=dict)
    #: Cached, and re-read once this much time has passed (0: not cached, read by every
    #: micro-batch); micro-batches planned after a refresh see the new contents.
    refresh_interval_ms: Annotated[int, Field(ge=0)] = 60_000

    @model_validator(mode="after")
    def _rules(self) -> LookupSpec:
        _identifier("name", self.name)
        postgres = self.kind == "postgres"
        if not postgres and not self.path:
            raise key_error("path", f'path is required for kind = "{self.kind}"')
        if postgres and self.path:
            raise key_error("path", 'path is not used by kind = "postgres"; set url and table')
        for key in ("url", "table"):
            if postgres and not getattr(self, key):
                raise key_error(key, f'{key} is required for kind = "postgres"')
            if not postgres and getattr(self, key):
                raise key_error(key, f'{key} is only valid for kind = "postgres"')
        if self.table and not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$", self.table):
            raise key_error("table", f"table = {self.table!r} must be table or schema.table")
        if self.schema_ddl and self.kind != "csv":
            raise key_error("schema", 'schema is only for kind = "csv" (others carry theirs)')
        return self


def _dedup(v: Any, info: ValidationInfo) -> Any:
    """One ``[[transform.dedup]]`` table: the ``dedup`` operator kind, written apart."""
    if not isinstance(v, dict):
        return v
    return OPERATOR_SPECS.get("dedup").model_validate(v, context=info.context)


def _operator_kind(v: Any, info: ValidationInfo) -> Any:
    """One ``[[transform.operators]]`` table: the model of its kind, registered now
    (``OPERATOR_SPECS``: the built-ins, the plug-ins)."""
    return OperatorSpec.model_validate(v, context=info.context) if isinstance(v, dict) else v


class TransformSpec(SpecModel):
    """``[transform]``: a SQL pre-stage with lookups then a window, or a join (then,
    with ``chain = ["join", "window"]``, a window over the joined stream)."""

    sql: str | None = None
    lookups: list[LookupSpec] = Field(default_factory=list)
    #: ``[[transform.dedup]]``: the ``dedup`` operator's model (``OPERATOR_SPECS``)
    dedup: list[Annotated[SerializeAsAny[OperatorSpec], BeforeValidator(_dedup)]] = Field(
        default_factory=list
    )
    #: each the model of its kind (``OperatorSpec.model_validate``); dumped as that model
    operators: list[Annotated[SerializeAsAny[OperatorSpec], BeforeValidator(_operator_kind)]] = (
        Field(default_factory=list)
    )
    #: the model of its kind (``WindowSpec.model_validate``); dumped as that model
    window: SerializeAsAny[WindowSpec] | None = None
    #: each the model its package registered under the table's name (``STAGE_SPECS``)
    join: SerializeAsAny[Any] | None = None
    temporal_join: SerializeAsAny[Any] | None = None
    window_join: SerializeAsAny[Any] | None = None
    append: SerializeAsAny[Any] | None = None
    mirror: SerializeAsAny[Any] | None = None
    chain: list[Literal["join", "window"]] | None = None

    def stages(self) -> list[Stage]:
        """Its stages in the order rows flow through them: the first reads the sources
        (after their operators and the SQL), e.g. ``[join, window]`` with a chain."""
        ordered = [
            self.join, self.temporal_join, self.window_join, self.append, self.mirror,
            self.window,
        ]  # fmt: skip
        return [stage for stage in ordered if stage is not None]

    @field_validator("window", mode="before")
    @classmethod
    def _window_kind(cls, v: Any, info: ValidationInfo) -> Any:
        # the kinds registered now (``WINDOW_FAMILIES``: the built-ins, the plug-ins)
        return WindowSpec.model_validate(v, context=info.context) if isinstance(v, dict) else v

    @field_validator("join", "temporal_join", "window_join", "append", "mirror", mode="before")
    @classmethod
    def _stage_model(cls, v: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None
        model = STAGE_SPECS.get(info.field_name)
        if v is None or isinstance(v, model):
            return v
        if not isinstance(v, dict):
            raise ValueError(f"[transform.{info.field_name}] is a table of keys, not {v!r}")
        return model.model_validate(v, context=info.context)

    @field_serializer("operators", mode="wrap")
    def _operators_with_kind(self, v: list[OperatorSpec], handler: Any) -> Any:
        # ``kind`` names the model to read a table back with, default or not
        return [{"kind": o.kind, **d} for o, d in zip(v, handler(v), strict=True)]

    @model_validator(mode="after")
    def _operator(self) -> TransformSpec:
        if self.chain is not None and self.chain != ["join", "window"]:
            raise key_error(
                "chain", f'chain = {self.chain!r}: the supported chain is ["join", "window"]'
            )
        if self.window is not None and self.join is not None and self.chain is None:
            raise key_error(
                "join",
                "[transform.window] and [transform.join] are both set: to aggregate the "
                'joined stream, add chain = ["join", "window"]; otherwise keep one of them',
            )
        if self.chain is not None and (self.window is None or self.join is None):
            raise key_error("chain", "chain needs both [transform.join] and [transform.window]")
        if self.chain is not None and self.window is not None and self.window.late_data != "drop":
            raise key_error(
                "window",
                f'window.late_data = "{self.window.late_data}" after a join: the window\'s '
                "input is the join's output, whose late rows the join drops; use "
                '"drop" (the default) for a window after a join',
            )
        alone = [
            k
            for k in ("temporal_join", "window_join", "append", "mirror")
            if getattr(self, k) is not None
        ]
        if alone:
            # the append stage runs the SQL itself
            reads = ("sql",) if alone[0] == "append" else ()
            stages = ("window", "join", "temporal_join", "window_join", "append", "mirror")
            others = [
                k
                for k in (*stages, "sql", "lookups")
                if k != alone[0] and k not in reads and getattr(self, k)
            ]
            if others:
                noun = alone[0].replace("_", " ")
                raise key_error(
                    alone[0],
                    f"[transform.{alone[0]}] with {others[0]} is not supported yet: the "
                    f"{noun} reads the source views and writes the target itself",
                )
        elif self.window is None and self.join is None:
            raise key_error(
                "window",
                "[transform.window], [transform.join], [transform.temporal_join], "
                "[transform.window_join], [transform.append] (each row of [transform].sql "
                "written once) or [transform.mirror] (a table kept equal to a Debezium "
                "source's) is required: what should run?",
            )
        if self.join is not None and (self.sql or self.lookups):
            raise key_error(
                "sql",
                "[transform].sql and lookups with a join are not supported yet: the join reads "
                "the source views directly",
            )
        names: dict[str, int] = {}
        for i, lookup in enumerate(self.lookups):
            if lookup.name in names:
                raise key_error(
                    "lookups",
                    f"lookups[{i}].name = {lookup.name!r} repeats "
                    f"lookups[{names[lookup.name]}].name",
                )
            names[lookup.name] = i
        if self.lookups and not self.sql:
            raise key_error("lookups", "lookups are joined in [transform].sql, which is empty")
        return self
