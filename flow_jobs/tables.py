"""Tables on the command line, through ``rich``: colour on a terminal, plain text when
piped (one line per row, so logs and grep see whole rows). ``flow-jobs state show``,
``flow-jobs inspect`` and the demo print theirs with it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.table import Table


def console(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout by default): rich on a terminal; without one, no
    colour and ``$COLUMNS`` (else 1,000) columns wide, so no row wraps."""
    file = file or sys.stdout
    if file.isatty():
        return Console(file=file)
    width = int(os.environ.get("COLUMNS", 1000))
    return Console(file=file, no_color=True, width=width, highlight=False)


def table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[str] = ()
) -> Table:
    """A table with a rule under its header; ``right`` names the right-aligned columns."""
    aligned = set(right)
    out = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in columns:
        out.add_column(name, justify="right" if name in aligned else "left", no_wrap=True)
    for row in rows:
        out.add_row(*(str(cell) for cell in row))
    return out


def show(*renderables: Any, file: IO[str] | None = None) -> None:
    """Print text and tables on ``file`` (stdout by default)."""
    out = console(file)
    for renderable in renderables:
        out.print(renderable)
