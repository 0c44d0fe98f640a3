"""README.md and the guide in docs/guide/ stay true: the README stays short, its
pipeline is a shipped one, every command it or the guide shows is a make target or a
``flow-jobs`` command with those options, every repository path they name exists, and
every relative link in the documents (README, BENCHMARKS, docs/) reaches its file and
heading."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from flow_jobs.cli import build_parser, main
from flow_jobs.spec import load_spec

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
GUIDE = sorted((ROOT / "docs" / "guide").glob("*.md"))
#: The pages a newcomer follows: what they show must run as shown.
PAGES = [README, *GUIDE]
#: Every document whose links must resolve.
DOCUMENTS = [README, ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


def _relative(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _fenced_lines(text: str) -> Iterator[str]:
    for block in FENCE.findall(text):
        yield from block.splitlines()[1:-1]


def _commands(text: str) -> Iterator[str]:
    """Each command a page shows: a code span that is one, or a line of a code block that
    starts with one (after a ``$`` prompt and environment assignments)."""
    for span in SPAN.findall(FENCE.sub("", text)):
        if re.match(r"(make|flow-jobs) ", span):
            yield span
    for line in _fenced_lines(text):
        line = re.sub(r"^\$ ", "", line.strip())
        line = re.sub(r"^(\w+=\S* )+", "", line)
        line = re.sub(r"^\.venv/bin/", "", line)
        if re.match(r"(make|flow-jobs) ", line):
            yield re.sub(r"\s+#.*$", "", line)


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", makefile, re.MULTILINE))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_the_readme_reads_in_five_minutes() -> None:
    size = len(README.read_bytes())
    assert size < 15_000, f"README.md is {size} bytes; move detail into docs/guide/"


def test_every_make_target_the_docs_show_exists() -> None:
    targets = _make_targets()
    shown = [
        (_relative(page), command)
        for page in PAGES
        for command in _commands(page.read_text())
        if command.startswith("make ")
    ]
    assert len(shown) > 10, "the pages show no make commands"
    missing = [f"{page}: `{cmd}`" for page, cmd in shown if cmd.split()[1] not in targets]
    assert not missing, "not a Makefile target:\n" + "\n".join(missing)


def test_every_flow_jobs_command_the_docs_show_parses() -> None:
    """The command, its subcommand and each option it passes exist in the CLI."""
    parser = build_parser()
    wrong = []
    shown = 0
    for page in PAGES:
        for command in _commands(page.read_text()):
            if not command.startswith("flow-jobs "):
                continue
            shown += 1
            words = command.replace("[", " ").replace("]", " ").split()[1:]
            level = parser
            while words and not words[0].startswith("-") and _subcommands(level):
                choices = _subcommands(level)
                if words[0] not in choices:
                    wrong.append(f"{_relative(page)}: `{command}`: no command {words[0]!r}")
                    break
                level = choices[words.pop(0)]
            for word in words:
                option = word.split("=")[0]
                if option.startswith("-") and option not in level._option_string_actions:
                    wrong.append(f"{_relative(page)}: `{command}`: no option {option}")
    assert shown > 20, "the pages show no flow-jobs commands"
    assert not wrong, "\n".join(wrong)


def test_the_readme_has_a_line_for_every_command() -> None:
    text = README.read_text()
    block = text[text.index("## Commands") :].split("```")[1]
    shown = {line.split()[1] for line in block.splitlines() if line.startswith("flow-jobs ")}
    assert set(_subcommands(build_parser())) | {"--version"} == shown


def test_every_repository_path_the_docs_name_exists() -> None:
    """A code span that looks like a path under one of the repository's folders names
    something there (a glob such as ``pipelines/*.toml`` matches something)."""
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    checked, missing = 0, []
    for page in PAGES:
        for span in SPAN.findall(FENCE.sub("", page.read_text())):
            if not re.fullmatch(r"[\w.*-]+(/[\w.*-]*)+", span) or span.split("/")[0] not in folders:
                continue
            checked += 1
            if not list(ROOT.glob(span.rstrip("/"))):
                missing.append(f"{_relative(page)}: `{span}`")
    assert checked > 30, "the pages name no repository paths"
    assert not missing, "no such path in the repository:\n" + "\n".join(missing)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE):
        slug = _slug(heading)
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


@pytest.mark.parametrize("page", DOCUMENTS, ids=_relative)
def test_every_relative_link_reaches_its_file_and_heading(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no such heading in {file.relative_to(ROOT)}")
    assert not broken, f"{_relative(page)}:\n" + "\n".join(broken)


def test_the_readme_pipeline_is_an_excerpt_of_a_shipped_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its lines, comments aside, appear in that order in the spec it names, and it
    validates on its own."""
    text = README.read_text()
    section = text[text.index("## A pipeline") :]
    shipped = ROOT / re.search(r"\]\((pipelines/\w+\.toml)\)", section).group(1)
    excerpt = section.split("```toml\n")[1].split("```")[0]

    def lines(toml: str) -> list[str]:
        stripped = (re.sub(r"\s+#.*$", "", line).strip() for line in toml.splitlines())
        return [line for line in stripped if line and not line.startswith("#")]

    remaining = iter(lines(shipped.read_text()))
    for line in lines(excerpt):
        assert line in remaining, f"{line!r} is not (in this order) in {shipped.name}"
    spec = tmp_path / "excerpt.toml"
    spec.write_text(excerpt)
    assert main(["validate", str(spec)]) == 0, capsys.readouterr().err


def test_the_readme_sql_is_its_toml_pipeline(tmp_path: Path) -> None:
    """The README's SQL block validates as a ``.sql`` pipeline file and is the TOML
    excerpt above it: the same sources, pre-stage, window (kind, size, time, lateness,
    keys, aggregations) and target."""
    text = README.read_text()
    section = text[text.index("## A pipeline") :]
    toml = tmp_path / "excerpt.toml"
    toml.write_text(section.split("```toml\n")[1].split("```")[0])
    sql = tmp_path / "excerpt.sql"
    sql.write_text(section.split("```sql\n")[1].split("```")[0])
    from_toml, from_sql = load_spec(toml), load_spec(sql)
    assert from_sql.sources == from_toml.sources
    assert from_sql.window == from_toml.window
    assert from_sql.target == from_toml.target
    assert from_sql.transform == from_toml.transform
