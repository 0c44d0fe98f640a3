"""``[[transform.operators]]``: per-source stream operators, and the registry of their
spec models.

An operator runs on one source's view, after the source (late rows out, its watermark
taken) and before ``[transform].sql``, the window or the join. Its kind is a module
(the built-in ``dedup``: ``flow_jobs.dedup``; a plug-in's, ``flow_jobs.plugins``)
that registers its spec model (a subclass of ``OperatorSpec``) with its compile step
(``flow_jobs.operators.registry.register_operator``). The core reads each
``[[transform.operators]]`` table with the model its ``kind`` names in
``OPERATOR_SPECS``, and never names a kind itself.

``[[transform.dedup]]`` is the ``dedup`` kind written as its own table: a source's
operators are its ``[[transform.dedup]]`` first, then its ``[[transform.operators]]``
in the order written (``source_operators``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from flow_jobs.plugins import Registry
from flow_jobs.spec.base import SpecModel, key_error

if TYPE_CHECKING:
    from flow_jobs.spec.models import PipelineSpec

__all__ = ["OPERATOR_SPECS", "OperatorSpec", "SourceOperator", "source_operators"]

#: Every operator kind's spec model, by ``kind``.
OPERATOR_SPECS: Registry[type[OperatorSpec]] = Registry("operator kind")


class OperatorSpec(SpecModel):
    """The keys every operator shares: its ``kind`` and the ``source`` whose view it
    runs on (may be left out when the pipeline has one source). A kind's model narrows
    ``kind`` (``Literal["keep_every"]``), adds its own keys and rules, and may set the
    class variables below.

    ``OperatorSpec.model_validate`` gives the model of the data's ``kind``, looked up
    in ``OPERATOR_SPECS`` then."""

    kind: str
    source: str | None = None

    #: what messages call it ("a dedup")
    NOUN: ClassVar[str] = "an operator"
    #: why it needs event time (refused with time_mode = "processing"); None: it does not
    EVENT_TIME: ClassVar[str | None] = None
    #: at most one per source, said so ("deduplicated"); None: any number
    ONCE_PER_SOURCE: ClassVar[str | None] = None
    #: keys a checkpoint resumes under when changed (``flow_jobs.spec.fingerprint``)
    SAFE_KEYS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """On ``OperatorSpec`` itself: the model of ``obj``'s kind (``OPERATOR_SPECS``)."""
        if cls is OperatorSpec and isinstance(obj, dict):
            return _model_of(obj).model_validate(obj, *args, **kwargs)
        return super().model_validate(obj, *args, **kwargs)

    def columns(self) -> list[tuple[str, str]]:
        """The source columns it reads, each with its key (``("keys[0]", "user_id")``):
        ``validate`` refuses one the source's schema lacks."""
        return []

    def fingerprint(self, key: str, source: str) -> dict[str, Any]:
        """Its fingerprinted fields (``flow_jobs.spec.fingerprint``), under ``key``
        (``transform.operators.<source>[n]``): every key but ``SAFE_KEYS``."""
        dumped = self.model_dump(by_alias=True, mode="json", exclude={"source"})
        fields = {f"{key}.{k}": v for k, v in dumped.items() if k not in self.SAFE_KEYS}
        return {**fields, f"{key}.source": source}


def _model_of(data: dict[str, Any]) -> type[OperatorSpec]:
    """The model of ``data``'s kind, or one validation error on ``kind`` naming the
    registered kinds."""
    kind = data.get("kind")
    if kind is None:
        message = "required key is missing"
    elif not isinstance(kind, str) or kind not in OPERATOR_SPECS:
        names = [repr(k) for k in OPERATOR_SPECS.names()]
        expected = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        message = f"Input should be {expected} (got {kind!r})"
    else:
        return OPERATOR_SPECS.get(kind)
    error = InitErrorDetails(type=key_error("kind", message), loc=(), input=data)
    raise ValidationError.from_exception_data("OperatorSpec", [error])


@dataclass(frozen=True)
class SourceOperator:
    """One operator of a source, as the pipeline runs it."""

    key: str  # its spec key, for errors: "transform.operators[1]"
    source: str  # the source it runs on (named, or the only one)
    position: int  # its place among the source's operators, from 0
    spec: OperatorSpec

    @property
    def fingerprint_key(self) -> str:
        return f"transform.operators.{self.source}[{self.position}]"


def source_operators(spec: PipelineSpec, source: str | None = None) -> list[SourceOperator]:
    """The operators in the order each source runs them: its ``[[transform.dedup]]``,
    then its ``[[transform.operators]]``; only ``source``'s with it."""
    t = spec.transform
    tables = [("transform.dedup", t.dedup), ("transform.operators", t.operators)]
    written = [(f"{name}[{i}]", op) for name, ops in tables for i, op in enumerate(ops)]
    counts: dict[str, int] = {}
    out = []
    for key, op in written:
        name = op.source or spec.sources[0].name
        out.append(SourceOperator(key, name, counts.get(name, 0), op))
        counts[name] = counts.get(name, 0) + 1
    return [o for o in out if source is None or o.source == source]


def check_operators(spec: PipelineSpec) -> None:
    """Each operator names a declared source (or the pipeline has one), runs before a
    window or a join (not a temporal join), on event time where it needs it."""
    sources = [s.name for s in spec.sources]
    once: dict[tuple[str, str], str] = {}
    t = spec.transform
    for op in source_operators(spec):
        model = type(op.spec)
        if op.spec.source is None and len(sources) > 1:
            raise key_error(
                f"{op.key}.source",
                f"source is required with {len(sources)} sources ({', '.join(sources)})",
            )
        if op.source not in sources:
            raise key_error(
                f"{op.key}.source",
                f"{op.source!r} is not a declared source (sources: {', '.join(sources)})",
            )
        if model.ONCE_PER_SOURCE is not None:
            other = once.setdefault((op.spec.kind, op.source), op.key)
            if other != op.key:
                raise key_error(
                    f"{op.key}.source",
                    f"{op.source!r} is {model.ONCE_PER_SOURCE} by {other} already",
                )
        first = t.stages()[0]
        if not first.TAKES_OPERATORS:
            table = op.key.partition("[")[0]
            raise key_error(op.key, f"[[{table}]] before {first.NOUN} is not supported yet")
        if model.EVENT_TIME and any(stage.time_mode != "event" for stage in t.stages()):
            raise key_error(op.key, f'{model.EVENT_TIME}: it needs time_mode = "event"')
