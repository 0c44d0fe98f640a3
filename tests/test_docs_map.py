"""docs/architecture.md stays true: every path its table names exists, and every name
in parentheses is defined in the file before it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_path_and_name_in_the_map_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) > 20, "the map's table is gone"
    checked = 0
    for row in rows:
        where = row.rsplit("|", 2)[-2]
        # `path` (`Name`) pairs, and bare `path`s
        for path, _, name in re.findall(r"`([\w./]+)`( \(`(\w+)`\))?", where):
            file = ROOT / path
            assert file.exists(), f"{path} (docs/architecture.md) does not exist"
            if name:
                assert re.search(rf"^\s*(def|class) {name}\b", file.read_text(), re.MULTILINE), (
                    f"{name} is not defined in {path} (docs/architecture.md)"
                )
            checked += 1
    assert checked > 25
