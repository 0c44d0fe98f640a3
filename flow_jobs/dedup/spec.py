"""``[[transform.dedup]]``'s keys: the built-in ``dedup`` operator's spec model
(``flow_jobs.dedup.plugin`` registers it, with its compile step)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from flow_jobs.spec.base import _identifier, key_error
from flow_jobs.spec.operators import OperatorSpec


class DedupSpec(OperatorSpec):
    """``[[transform.dedup]]`` (or ``[[transform.operators]]`` with ``kind = "dedup"``):
    one source's records deduplicated before the window or the join
    (docs/spec-reference.md, "Deduplication"): per ``keys``, the first record in the
    order of events passes, and a later one at most ``within_ms`` after the last record
    that passed is a duplicate, dropped and counted, or dead-lettered."""

    kind: Literal["dedup"] = "dedup"
    keys: list[str] = Field(min_length=1)
    within_ms: Annotated[int, Field(ge=0)]
    on_duplicate: Literal["drop", "dlq"] = "drop"

    NOUN: ClassVar[str] = "a dedup"
    EVENT_TIME: ClassVar[str | None] = "deduplication orders records by event time"
    ONCE_PER_SOURCE: ClassVar[str | None] = "deduplicated"
    #: a duplicate is dropped or dead-lettered after the operator decided it: the same
    #: state either way
    SAFE_KEYS: ClassVar[frozenset[str]] = frozenset({"on_duplicate"})

    @model_validator(mode="after")
    def _keys(self) -> DedupSpec:
        for i, key in enumerate(self.keys):
            _identifier(f"keys[{i}]", key)
            if key in self.keys[:i]:
                raise key_error("keys", f"keys[{i}] = {key!r} is listed twice")
        return self

    def columns(self) -> list[tuple[str, str]]:
        return [(f"keys[{i}]", name) for i, name in enumerate(self.keys)]

    def fingerprint(self, key: str, source: str) -> dict[str, Any]:
        # As fingerprinted before the operators' registry: the checkpoints of then resume.
        return {
            f"transform.dedup.{source}.keys": self.keys,
            f"transform.dedup.{source}.within_ms": self.within_ms,
        }
