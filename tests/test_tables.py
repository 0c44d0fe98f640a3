"""The command line's tables (``flow_jobs.tables``) at the width of the terminal."""

from __future__ import annotations

import io

from rich.console import Console

from flow_jobs import tables

COLUMNS = ("window start", "user_id", "amount_sum", "closes when")
ROWS = [
    ("2026-12-07 23:33:00", "u0", "1,476.09", "closes when watermark 23:33:12 >= end 23:34:00"),
    ("2026-12-07 23:33:00", "u10", "523.18", "closes when watermark 23:33:12 >= end 23:34:00"),
]


def _printed(width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, no_color=True, highlight=False)
    tables.print_on(console, tables.table(COLUMNS, ROWS, right=("amount_sum",)))
    return out.getvalue()


def test_a_table_that_fits_is_one_line_per_row() -> None:
    text = _printed(200)
    lines = [line for line in text.splitlines() if "u0" in line or "u10" in line]
    assert len(lines) == 2
    assert "1,476.09" in lines[0] and lines[0].rstrip().endswith("end 23:34:00")
    assert "…" not in text


def test_a_table_wider_than_the_terminal_is_a_block_per_row_with_every_value_whole() -> None:
    text = _printed(70)
    assert "…" not in text  # rich would have cut the cells to fit
    blocks = text.split("-[ row ")
    assert [b.split(" ]-")[0] for b in blocks[1:]] == ["1", "2"]
    first = [line.rstrip() for line in blocks[1].splitlines()[1:]]
    assert first == [
        "window start | 2026-12-07 23:33:00",
        "user_id      | u0",
        "amount_sum   | 1,476.09",
        "closes when  | closes when watermark 23:33:12 >= end 23:34:00",
    ]
    assert "amount_sum   | 523.18" in blocks[2]


def test_a_long_value_wraps_beside_its_name() -> None:
    text = _printed(40)
    assert "…" not in text
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("closes when  | "))
    assert lines[at + 1].startswith(" " * len("closes when  | "))
    joined = lines[at][len("closes when  | ") :].rstrip() + " " + lines[at + 1].strip()
    assert joined.startswith("closes when watermark 23:33:12")
