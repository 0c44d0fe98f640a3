"""The suite's own scheduling list names files that exist (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FILES


def test_every_file_the_order_names_exists() -> None:
    here = Path(__file__).parent
    assert [name for name in LONGEST_FILES if not (here / name).is_file()] == []
    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)
