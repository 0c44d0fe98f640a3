"""``[transform.window.top_n]``: only the top ``n`` rows of each window."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_serializer

from flow_jobs.spec.aggregation import Aggregation
from flow_jobs.spec.base import SpecModel, key_error

if TYPE_CHECKING:
    from flow_jobs.spec.windows import WindowSpec


class TopNSpec(SpecModel):
    """``[transform.window.top_n]``: only the top ``n`` rows of each window (and
    ``partition_by`` values), ranked by ``order_by`` (docs/spec-reference.md, "Top N")."""

    n: Annotated[int, Field(gt=0)]
    #: aggregation aliases, each with its direction: "clicks DESC", "amount_sum ASC"
    order_by: list[str] = Field(min_length=1)
    partition_by: list[str] = Field(default_factory=list)
    #: rows tied with the n-th on every ``order_by`` value are written too (SQL's
    #: ``RANK() ... <= n``, ``FETCH FIRST n ROWS WITH TIES``); otherwise the group keys
    #: break ties and exactly ``n`` rows are written (``ROW_NUMBER()``)
    with_ties: bool = False

    @model_serializer(mode="wrap")
    def _without_default_ties(self, handler: Any) -> Any:
        # a spec written before with_ties existed dumps (and fingerprints) as it did
        dumped = handler(self)
        if isinstance(dumped, dict) and not self.with_ties:
            dumped.pop("with_ties", None)
        return dumped

    def ordering(self) -> list[tuple[str, Literal["ascending", "descending"]]]:
        """``order_by`` as (alias, direction) pairs (checked by ``check``)."""
        out: list[tuple[str, Literal["ascending", "descending"]]] = []
        for item in self.order_by:
            alias, _, direction = item.strip().rpartition(" ")
            out.append(
                (alias.strip(), "descending" if direction.upper() == "DESC" else "ascending")
            )
        return out

    def check(self, aggregations: list[Aggregation], group_by: list[str]) -> None:
        """``order_by`` names ordered aggregation aliases, ``partition_by`` group keys."""
        ranked = {
            name: a.agg
            for a in aggregations
            for name in a.output_names()
            if not name.endswith("_sketch")
        }
        for i, item in enumerate(self.order_by):
            words = item.split()
            if len(words) != 2 or words[1].upper() not in ("ASC", "DESC"):
                raise key_error(
                    f"top_n.order_by[{i}]",
                    f"{item!r}: give an aggregation alias and its direction, e.g. "
                    f"'{words[0] if words else 'clicks'} DESC'",
                )
            if words[0] not in ranked:
                raise key_error(
                    f"top_n.order_by[{i}]",
                    f"{words[0]!r} is not an aggregation alias ({', '.join(ranked)})",
                )
            if ranked[words[0]] in ("collect", "reduce"):
                raise key_error(
                    f"top_n.order_by[{i}]", f"{words[0]!r} is a {ranked[words[0]]}: not ordered"
                )
        for i, column in enumerate(self.partition_by):
            if column not in group_by:
                raise key_error(
                    f"top_n.partition_by[{i}]",
                    f"{column!r} is not a group_by column ({', '.join(group_by) or 'none'})",
                )

    def check_window(self, window: WindowSpec, shared: list[str]) -> None:
        """It ranks the groups of one window: a kind whose windows share their bounds
        across groups (``shared``: those kinds), not reopened."""
        if not window.SHARED_BOUNDS:
            raise key_error(
                "top_n",
                f'top_n ranks the groups of one window; kind = "{window.kind}" gives each '
                f"group windows of its own bounds: use one of {', '.join(shared)}",
            )
        if window.reopens:
            raise key_error("top_n", 'top_n with late_data = "reopen" is not supported')
        self.check(window.aggregations, window.group_by)
