"""One line of ``flow-jobs validate --plan``: a part of the pipeline and what runs it.

Each part that compiles (a source, the window, a join, a dedup, a lookup) or that will
run (the dead letters, the sink, the target) says its own lines with ``describe()``,
from what it holds: the reader's options, the engine the window compiled to, the
writer's class. ``--plan`` only puts them in pipeline order, so the words cannot drift
from the code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PlanLine:
    part: str  # the part of the spec, e.g. "source clicks", "window", "target"
    how: str  # what runs it, with its parameters


class Described(Protocol):
    def describe(self) -> Sequence[PlanLine]: ...
