"""The SQL we read: Spark's dialect (sqlglot's), taught the three things of Flink SQL
and Spark it lacks: ``WATERMARK FOR col AS expr`` in ``CREATE TABLE``, a window
table-valued function's ``TABLE name [PARTITION BY ...]`` argument, and Spark's
``window(...)`` function, which sqlglot reads as the ``WINDOW`` clause's keyword.

A dialect subclass is how sqlglot is meant to be extended (its RisingWave dialect
parses the same ``WATERMARK`` clause); no library parses Flink SQL from Python.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.parsers.spark import SparkParser
from sqlglot.tokens import TokenType

#: Flink's window table-valued functions.
WINDOW_TVFS = ("TUMBLE", "HOP", "CUMULATE", "SESSION")


class WindowTVF(exp.Expression, exp.Func):
    """``TUMBLE(TABLE t [PARTITION BY k, ...], DESCRIPTOR(ts), INTERVAL ...)`` and its
    kin: ``this`` the function's name, ``table`` the data, ``partition`` its keys,
    ``expressions`` the other arguments (``exp.Kwarg`` where named)."""

    arg_types: ClassVar[dict[str, bool]] = {
        "this": True,
        "table": True,
        "partition": False,
        "expressions": False,
    }


def _parse_window_tvf(parser: Any, name: str) -> WindowTVF:
    table: exp.Expr | None = None
    partition: list[exp.Expr] = []
    args: list[exp.Expr] = []
    while True:
        key = None
        if parser._next and parser._next.token_type == TokenType.FARROW:
            key = parser._curr.text.upper()  # DATA => ..., TIMECOL => ..., SIZE => ...
            parser._advance(2)
        if parser._match(TokenType.TABLE):
            table = parser._parse_table_parts()
            if parser._match(TokenType.PARTITION_BY) or parser._match_text_seq("PARTITION", "BY"):
                # one key, or several in parentheses (Flink's own grammar)
                if parser._match(TokenType.L_PAREN):
                    partition = parser._parse_csv(parser._parse_column)
                    parser._match_r_paren()
                else:
                    partition = [parser._parse_column()]
        else:
            value = parser._parse_assignment()
            args.append(exp.Kwarg(this=exp.var(key), expression=value) if key else value)
        if not parser._match(TokenType.COMMA):
            break
    return parser.expression(
        WindowTVF(this=exp.var(name), table=table, partition=partition, expressions=args)
    )


class FlowParser(SparkParser):
    # SESSION is a keyword (SET SESSION ...) that Flink also names a function with
    FUNC_TOKENS: ClassVar[set[TokenType]] = {*SparkParser.FUNC_TOKENS, TokenType.SESSION}
    FUNCTION_PARSERS: ClassVar[dict[str, Any]] = {
        **SparkParser.FUNCTION_PARSERS,
        **{name: (lambda n: lambda self: _parse_window_tvf(self, n))(name) for name in WINDOW_TVFS},
    }
    CONSTRAINT_PARSERS: ClassVar[dict[str, Any]] = {
        **SparkParser.CONSTRAINT_PARSERS,
        "WATERMARK": lambda self: self.expression(
            exp.WatermarkColumnConstraint(
                this=self._match(TokenType.FOR) and self._parse_column(),
                expression=self._match(TokenType.ALIAS) and self._parse_disjunction(),
            )
        ),
    }
    SCHEMA_UNNAMED_CONSTRAINTS: ClassVar[set[str]] = {
        *SparkParser.SCHEMA_UNNAMED_CONSTRAINTS,
        "WATERMARK",
    }


class FlowSQL(Spark):
    """Spark SQL plus the clauses above."""

    class Tokenizer(Spark.Tokenizer):
        # ``window(ts, '1 minute')`` is Spark's function; a named WINDOW clause, the
        # keyword's other use, is nothing a pipeline needs.
        KEYWORDS: ClassVar[dict[str, TokenType]] = {
            k: v for k, v in Spark.Tokenizer.KEYWORDS.items() if k != "WINDOW"
        }

    Parser = FlowParser
