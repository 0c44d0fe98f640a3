"""The column names a spec can be checked against without Spark: where a window or a
join reads a source directly (no ``[transform] sql``, no lookups), every column it names
must be in that source's declared schema. ``flow-jobs validate`` then fails on a typo
at once, naming the key, instead of ``--plan`` or the first run failing in Spark's
analyzer. With a SQL pre-stage the columns are the SQL's to define: Spark checks them.

Our own reader of Spark's DDL (only the top-level column names): no library parses it
outside the JVM, and this needs no more than splitting at top-level commas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NAME = re.compile(r"\s*(`(?:[^`]|``)+`|[^\s:`]+)")


def ddl_columns(ddl: str) -> list[str]:
    """The top-level column names of a Spark DDL string ("a STRING, b STRUCT<x: INT>")."""
    names, depth, start = [], 0, 0
    for i, ch in enumerate(ddl + ","):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            field = ddl[start:i]
            start = i + 1
            match = _NAME.match(field)
            if match and field.strip():
                name = match.group(1)
                names.append(name[1:-1].replace("``", "`") if name.startswith("`") else name)
    return names


def unknown(named: Iterable[str | None], known: Iterable[str]) -> list[str]:
    """The names in ``named`` that are not in ``known`` (Spark resolves them without
    regard to case)."""
    have = {k.lower() for k in known}
    return [n for n in named if n is not None and n.lower() not in have]
