"""A source's ``schema`` (Spark DDL) read without Spark, so ``flow-jobs validate`` can
refuse a misspelt type or a column the window cannot read at once, naming the key,
instead of ``--plan`` or the run failing in the JVM.

This is Spark's own grammar for a table schema (``DataType.fromDDL``: ``name [:] TYPE
[NOT NULL] [COMMENT 'text']``, comma-separated) and its type names, as Spark 4 accepts
them; ``tests/test_ddl.py`` holds it to Spark's parser over a corpus, type by type. No
library fits: sqlglot's Spark dialect (the nearest) accepts types Spark refuses (TEXT,
JSON, UUID, DATETIME) and drops an unknown type inside ``ARRAY<...>`` silently. Where
the two could still differ, this one errs on accepting: the run's parse in the JVM
stays the final word.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

#: Spark's primitive type names (and aliases), as their ``simpleString``.
PRIMITIVES = {
    "BOOLEAN": "boolean",
    "TINYINT": "tinyint",
    "BYTE": "tinyint",
    "SMALLINT": "smallint",
    "SHORT": "smallint",
    "INT": "int",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "LONG": "bigint",
    "FLOAT": "float",
    "REAL": "float",
    "DOUBLE": "double",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_LTZ": "timestamp",
    "TIMESTAMP_NTZ": "timestamp_ntz",
    "STRING": "string",
    "BINARY": "binary",
    "VOID": "void",
    "VARIANT": "variant",
}
_SIZED = {"CHAR": "char", "CHARACTER": "char", "VARCHAR": "varchar"}
_DECIMAL = ("DECIMAL", "DEC", "NUMERIC")
_YEAR_MONTH = ("YEAR", "MONTH")
_DAY_TIME = ("DAY", "HOUR", "MINUTE", "SECOND")
#: Every type name, for "did you mean" and the list an error shows.
TYPE_NAMES = (
    *PRIMITIVES, *_SIZED, *_DECIMAL, "TIME", "INTERVAL", "ARRAY", "MAP", "STRUCT",
)  # fmt: skip
_COMMON = (
    "STRING, BOOLEAN, INT, BIGINT, DOUBLE, DECIMAL(p,s), DATE, TIMESTAMP, TIMESTAMP_NTZ, "
    "BINARY, ARRAY<T>, MAP<K,V>, STRUCT<name: T, ...>"
)

_SHAPE = 'write the columns as "name TYPE, name TYPE", e.g. "user_id STRING, ts BIGINT"'

#: Integral types an event time may be in (epoch milliseconds), and the timestamps.
EPOCH_MILLIS = ("bigint", "int", "smallint", "tinyint")
TIMESTAMPS = ("timestamp", "timestamp_ntz")

_TOKEN = re.compile(
    r"""\s+|--[^\n]*|/\*.*?\*/                  # space and comments: skipped
    |(?P<quoted>`(?:[^`]|``)*`)
    |(?P<string>[rR]?(?:'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"))
    |(?P<word>[A-Za-z0-9_]+)
    |(?P<punct>[<>(),:])""",
    re.VERBOSE | re.DOTALL,
)


class DdlError(ValueError):
    """A schema Spark would refuse; the message says where and what to write."""


@dataclass(frozen=True)
class Column:
    """A top-level column: its name and its type as Spark's ``simpleString``."""

    name: str
    type: str


@dataclass(frozen=True)
class Schema:
    """A schema as Spark reads it: its top-level columns, and why Spark's JSON decoder
    (``from_json``) would refuse it, if it would (CHAR and VARCHAR, a MAP whose key is
    not a STRING: the JVM's parser takes them, the decoder does not)."""

    columns: tuple[Column, ...]
    not_json: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Token:
    kind: str  # quoted | string | word | punct | end
    text: str
    at: int

    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def _tokens(ddl: str) -> list[_Token]:
    out, at = [], 0
    while at < len(ddl):
        match = _TOKEN.match(ddl, at)
        if match is None:
            raise DdlError(
                f"{ddl[at]!r} at character {at + 1} is not valid Spark DDL (a name with other "
                "characters than letters, digits and _ goes in backquotes: `my-name`); " + _SHAPE
            )
        if match.lastgroup:
            out.append(_Token(match.lastgroup, match.group(), at))
        at = match.end()
    return [*out, _Token("end", "", len(ddl))]


class _Parser:
    def __init__(self, ddl: str) -> None:
        self.ddl = ddl
        self.tokens = _tokens(ddl)
        self.i = 0
        self.not_json: list[str] = []

    @property
    def next(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def accept(self, text: str) -> bool:
        token = self.next
        if (token.kind == "punct" and token.text == text) or token.upper() == text:
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str) -> None:
        if not self.accept(text):
            self.fail(f"expected {what}")

    def fail(self, message: str) -> None:
        token = self.next
        near = "the end" if token.kind == "end" else repr(token.text)
        raise DdlError(f"{message} at {near} (character {token.at + 1}); {_SHAPE}")

    # -- the grammar ---------------------------------------------------------------

    def columns(self) -> list[Column]:
        out = [self.column(colon=False)]
        while self.accept(","):
            out.append(self.column(colon=False))
        if self.next.kind != "end":
            self.fail('expected "," between columns')
        return out

    def column(self, colon: bool) -> Column:
        name = self.name()
        if colon:
            self.accept(":")
        elif self.next.text == ":" and self.next.kind == "punct":
            # Spark's JSON decoder reads a table schema, where a colon is a syntax error
            self.fail(f'write "{name} TYPE" without a colon (only STRUCT<name: TYPE> takes one)')
        kind = self.type(name)
        if self.accept("NOT"):
            self.expect("NULL", "NULL after NOT")
        if self.accept("COMMENT"):
            if self.next.kind != "string":
                self.fail("expected a quoted comment")
            while self.next.kind == "string":
                self.take()
        return Column(name, kind)

    def name(self) -> str:
        token = self.next
        if token.kind == "quoted":
            self.take()
            return token.text[1:-1].replace("``", "`")
        if token.kind == "word" and not token.text.isdigit():
            self.take()
            return token.text
        self.fail("expected a column name")
        raise AssertionError  # fail() raised

    def type(self, column: str) -> str:
        token = self.next
        word = token.upper()
        if not word:
            self.fail(f"expected the type of column {column}")
        self.take()
        if word == "ARRAY":
            self.expect("<", "ARRAY<element type>")
            element = self.type(column)
            self.expect(">", "> closing ARRAY<")
            return f"array<{element}>"
        if word == "MAP":
            self.expect("<", "MAP<key type, value type>")
            key = self.type(column)
            self.expect(",", "MAP<key type, value type>")
            value = self.type(column)
            self.expect(">", "> closing MAP<")
            if not key.startswith("string"):
                self.not_json.append(
                    f"MAP<{key.upper()}, ...> (column {column}): a JSON object's keys are "
                    "strings; declare MAP<STRING, ...>"
                )
            return f"map<{key},{value}>"
        if word == "STRUCT":
            self.expect("<", "STRUCT<name: type, ...>")
            fields = []
            if not self.accept(">"):
                fields.append(self.column(colon=True))
                while self.accept(","):
                    fields.append(self.column(colon=True))
                self.expect(">", "> closing STRUCT<")
            return "struct<" + ",".join(f"{f.name}:{f.type}" for f in fields) + ">"
        if word == "INTERVAL":
            return self.interval()
        sizes = self.sizes()
        if word in PRIMITIVES and not sizes:
            collation = self.collation() if word == "STRING" else None
            if collation not in (None, "UTF8_BINARY"):
                return f"string collate {collation}"
            return PRIMITIVES[word]
        if word in _SIZED and len(sizes) == 1:
            self.collation()  # accepted, and left out of the type (as Spark does)
            self.not_json.append(
                f"{token.text}({sizes[0]}) (column {column}): Spark's JSON decoder takes no "
                "CHAR or VARCHAR; declare STRING"
            )
            return f"{_SIZED[word]}({sizes[0]})"
        if word in _SIZED and not sizes:
            raise DdlError(f"{token.text} (column {column}) needs a length, e.g. {word}(10)")
        if word in _DECIMAL and len(sizes) <= 2:
            return _decimal(sizes, column)
        if word == "TIME" and len(sizes) <= 1:
            return f"time({sizes[0] if sizes else 6})"
        written = token.text + (f"({','.join(map(str, sizes))})" if sizes else "")
        if word in TYPE_NAMES:
            raise DdlError(f"{written} (column {column}) is not a Spark SQL type")
        raise DdlError(_unknown_type(written, word, column))

    def sizes(self) -> list[int]:
        if not self.accept("("):
            return []
        out = [self.integer()]
        while self.accept(","):
            out.append(self.integer())
        self.expect(")", ") closing the type's parameters")
        return out

    def integer(self) -> int:
        token = self.next
        if token.kind != "word" or not token.text.isdigit():
            self.fail("expected a whole number")
        self.take()
        return int(token.text)

    def collation(self) -> str | None:
        """``COLLATE name`` after a string type, if there."""
        if not self.accept("COLLATE"):
            return None
        if self.next.kind != "word":
            self.fail("expected a collation name (e.g. UTF8_LCASE)")
        return self.take().text.upper()

    def interval(self) -> str:
        start = self.next.upper()
        if start not in (*_YEAR_MONTH, *_DAY_TIME):
            return "interval"  # CalendarIntervalType
        self.take()
        units = _YEAR_MONTH if start in _YEAR_MONTH else _DAY_TIME
        if not self.accept("TO"):
            return f"interval {start.lower()}"
        end = self.next.upper()
        if end not in units or units.index(end) <= units.index(start):
            self.fail(f"expected a unit after {start} in INTERVAL {start} TO ...")
        self.take()
        return f"interval {start.lower()} to {end.lower()}"


def _decimal(sizes: list[int], column: str) -> str:
    precision = sizes[0] if sizes else 10
    scale = sizes[1] if len(sizes) > 1 else 0
    if precision > 38:
        raise DdlError(f"DECIMAL({precision}, ...) (column {column}): the precision is at most 38")
    if scale > precision:
        raise DdlError(
            f"DECIMAL({precision},{scale}) (column {column}): the scale cannot exceed the precision"
        )
    return f"decimal({precision},{scale})"


def _unknown_type(written: str, word: str, column: str) -> str:
    guess = difflib.get_close_matches(word, TYPE_NAMES, n=1, cutoff=0.6)
    hint = f" (did you mean {guess[0]}?)" if guess else ""
    return f"{written} (column {column}) is not a Spark SQL type{hint}; use one of {_COMMON}"


@lru_cache(maxsize=256)
def parse_schema(ddl: str) -> Schema:
    """A Spark DDL schema ("a STRING, b ARRAY<INT>") read as Spark reads it, or a
    ``DdlError`` where Spark would refuse it."""
    parser = _Parser(ddl)
    columns = parser.columns()
    return Schema(tuple(columns), tuple(parser.not_json))


def ddl_columns(ddl: str) -> list[str]:
    """The top-level column names of a valid Spark DDL schema."""
    return [c.name for c in parse_schema(ddl).columns]


def unknown(named: Iterable[str | None], known: Iterable[str]) -> list[str]:
    """The names in ``named`` that are not in ``known`` (Spark resolves them without
    regard to case)."""
    have = {k.lower() for k in known}
    return [n for n in named if n is not None and n.lower() not in have]
