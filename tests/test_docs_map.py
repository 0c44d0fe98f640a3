"""docs/architecture.md stays true: every path its table names exists, and every name
in parentheses is defined in the file before it. And the code and docs cite only what a
reader has: the repository's own documents, not the design notes it was built from."""

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


#: Names of documents outside the repository (the design notes flow-jobs was built from).
OUTSIDE = re.compile(r"(?i:\bseeds?\b( \d{3}|'s))|\bMISSION\.md|\bARCHITECTURE\.md|\bSTYLE\.md")


def test_code_and_docs_cite_only_documents_in_the_repository() -> None:
    files = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "definitions.py"]
    for folder in ("flow_jobs", "flow_jobs_dev", "assets", "tests", "bench", "docs"):
        files += sorted((ROOT / folder).rglob("*.py")) + sorted((ROOT / folder).rglob("*.md"))
    found = [
        f"{file.relative_to(ROOT)}:{number}: {line.strip()}"
        for file in files
        if file != Path(__file__)
        for number, line in enumerate(file.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "cites a document outside the repository:\n" + "\n".join(found)
