"""``Stage``: the interface of ``[transform]``'s stages, for the core."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource


class Stage(Protocol):
    """What the core asks of a stage of ``[transform]`` (a window, a join, a temporal
    join) without naming its kind: ``TransformSpec.stages()`` lists them in order, and
    the compile step and the inspect reading of each are found by its ``STAGE``
    (``flow_jobs.plan.pipelines.PIPELINES``, ``flow_jobs.runtime.inspect.READINGS``)."""

    #: the stage's name: its ``[transform.<name>]`` table, its registries' key
    STAGE: ClassVar[str]
    #: what its state holds for ``flow-jobs inspect`` (``StateReport``): open windows,
    #: or buffered rows
    HOLDS: ClassVar[Literal["windows", "rows"]]
    lateness_ms: int

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

    def key_columns(self) -> list[str]:
        """The columns ``flow-jobs inspect --group KEY=VALUE`` may filter its state on."""
        ...
