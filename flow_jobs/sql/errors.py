"""A clause the SQL front end refuses, with where it stands in the text."""

from __future__ import annotations

from sqlglot import exp


class SqlError(ValueError):
    """``message`` about ``node``; ``locate`` turns its offset into a line and column
    of the text it was read from."""

    def __init__(self, message: str, node: exp.Expr | None = None) -> None:
        self.message = message
        self.start = start(node) if node is not None else None
        self.line: int | None = None
        self.column: int | None = None
        super().__init__(message)

    def locate(self, text: str, offset: int = 0) -> SqlError:
        """Where it is in ``text``, of which the parsed statement began at ``offset``."""
        if self.start is not None:
            before = text[: offset + self.start]
            self.line = before.count("\n") + 1
            self.column = len(before) - (before.rfind("\n") + 1) + 1
        return self

    def __str__(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line else ""
        return where + self.message


def start(node: exp.Expr) -> int | None:
    """The offset of the first character of ``node`` that the parser kept a place for
    (sqlglot keeps one on the leaves it read: identifiers, literals, function names)."""
    starts = [c.meta["start"] for c in node.walk() if "start" in (getattr(c, "meta", None) or {})]
    return min(starts) if starts else None


def clause(node: exp.Expr) -> str:
    """The clause as the user reads it, cut short."""
    text = node.sql(dialect="spark")
    return text if len(text) <= 80 else text[:77] + "..."
