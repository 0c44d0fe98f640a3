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
from rich.text import Text


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
        print_on(out, renderable)


def print_on(out: Console, renderable: Any) -> None:
    """Print ``renderable`` on ``out``; a table wider than ``out`` as one block per row,
    a line per column (psql's expanded display, ``\\x auto``): squeezed to the width,
    rich would cut every cell to an ellipsis, numbers included."""
    unbounded = out.options.update_width(1 << 20)  # its natural width, not the terminal's
    if not isinstance(renderable, Table) or (
        out.measure(renderable, options=unbounded).maximum <= out.width
    ):
        out.print(renderable)
        return
    names = [str(c.header) for c in renderable.columns]
    cells = [[str(cell) for cell in c.cells] for c in renderable.columns]
    for i, row in enumerate(zip(*cells, strict=True), start=1):
        out.print(f"-[ row {i} ]-", style="dim", highlight=False)
        record = Table.grid(padding=(0, 1))
        record.add_column(no_wrap=True)
        record.add_column(no_wrap=True)
        record.add_column(overflow="fold")  # a long value wraps in its own column
        for name, value in zip(names, row, strict=True):
            record.add_row(Text(name), "|", Text(value))
        out.print(record)
