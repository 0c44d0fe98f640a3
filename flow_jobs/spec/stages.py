"""``Stage``: the interface of ``[transform]``'s stages, for the core, and
``STAGE_SPECS``: the model that reads each ``[transform.<stage>]`` table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from flow_jobs.plugins import Registry

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource

#: (spec key, source, column names): what a stage reads of a source's own columns.
ColumnUse = tuple[str, str, list[str | None]]


class Stage(Protocol):
    """What the core asks of a stage of ``[transform]`` (a window, a join, a temporal
    join) without naming its kind: ``TransformSpec.stages()`` lists them in order, and
    the compile step and the inspect reading of each are found by its ``STAGE``
    (``flow_jobs.plan.pipelines.PIPELINES``, ``flow_jobs.runtime.inspect.READINGS``)."""

    #: the stage's name: its ``[transform.<name>]`` table, its registries' key
    STAGE: ClassVar[str]
    #: it in a few words, for errors: "a temporal join"
    NOUN: ClassVar[str]
    #: what its state holds for ``flow-jobs inspect`` (``StateReport``): open windows,
    #: or buffered rows
    HOLDS: ClassVar[Literal["windows", "rows"]]
    #: whether the sources' operators (``[[transform.dedup]]``, ...) may run before it
    TAKES_OPERATORS: ClassVar[bool]
    lateness_ms: int
    #: "event" or "processing": the time its rows are placed by
    time_mode: str
    # Optional, read with getattr: ``DELETES`` (a batch may take rows back),
    # ``TAKES_CHANGES`` and ``takes_changes(source)`` (it reads Debezium sources, and how).

    @property
    def watermark_delay_ms(self) -> int:
        """How far the watermark it runs on lags the highest event time."""
        ...

    @property
    def dead_letter_topic(self) -> str | None:
        """Where its late rows go as Kafka records (None: not to a topic)."""
        ...

    def summary(self, over: Sequence[str] | None) -> str:
        """It in a few words, for the pipeline's one line (``flow_jobs.one_line``);
        ``over``: the sources it reads, when it is the first stage."""
        ...

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """As the first stage: the declared sources are what it reads (``sql``: the
        pre-stage over them, if any); a ``ValueError`` (``key_error``) says why not."""
        ...

    def columns_read(self, sources: Sequence[KafkaSource]) -> list[ColumnUse]:
        """As the first stage, with no ``[transform].sql``: the columns it reads of each
        source, by the spec key naming them (``flow_jobs.spec.columns`` checks each is
        in the source's schema)."""
        ...

    def event_time_columns(self, sources: Sequence[KafkaSource]) -> list[tuple[str, str, str]]:
        """As the first stage: (spec key, source, column) of each event time it reads of
        a source, whose declared type must be a TIMESTAMP or epoch milliseconds."""
        ...

    def key_columns(self) -> list[str]:
        """The columns ``flow-jobs inspect --group KEY=VALUE`` may filter its state on."""
        ...


#: The model of each ``[transform.<stage>]`` table but the window's (whose families have
#: a registry of their own), by ``STAGE``: the stage's package registers it.
STAGE_SPECS: Registry[type[Any]] = Registry("[transform] stage")

M = TypeVar("M", bound=type[Any])


def register_stage_spec(model: M) -> M:
    """Read ``[transform.<model.STAGE>]`` with ``model``."""
    STAGE_SPECS.register(model.STAGE, model)
    return model
