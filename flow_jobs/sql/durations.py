"""A window's size as SQL writes it, in milliseconds: Flink's ``INTERVAL '5' MINUTE``,
Spark's ``INTERVAL 5 MINUTES`` and its duration strings (``'1 minute'``,
``'1 hour 30 minutes'``). Months and years have no fixed length: refused."""

from __future__ import annotations

from sqlglot import exp

from flow_jobs.sql.errors import SqlError, clause

UNIT_MS = {
    "MILLISECOND": 1,
    "SECOND": 1_000,
    "MINUTE": 60_000,
    "HOUR": 3_600_000,
    "DAY": 86_400_000,
    "WEEK": 7 * 86_400_000,
}


def _unit(word: str, node: exp.Expr) -> int:
    name = word.upper().rstrip("S") if word.upper() != "MS" else "MILLISECOND"
    if name not in UNIT_MS:
        raise SqlError(
            f"{clause(node)}: {word.lower()} has no fixed length in milliseconds; give the "
            "size in milliseconds, seconds, minutes, hours, days or weeks",
            node,
        )
    return UNIT_MS[name]


def _words(text: str, node: exp.Expr) -> int:
    """'1 hour 30 minutes' (Spark's duration string)."""
    words = text.split()
    if not words or len(words) % 2:
        raise SqlError(
            f"{clause(node)}: a duration is pairs of number and unit, e.g. '1 minute'", node
        )
    total = 0
    for number, unit in zip(words[::2], words[1::2], strict=True):
        try:
            value = float(number)
        except ValueError:
            raise SqlError(f"{clause(node)}: {number!r} is not a number", node) from None
        total += round(value * _unit(unit, node))
    return total


def duration_ms(node: exp.Expr, zero: bool = False) -> int:
    """``node`` (an interval or a duration string) in milliseconds, above zero (or zero,
    if ``zero``: a watermark's delay)."""
    if isinstance(node, exp.Interval):
        value, unit = node.this, node.args.get("unit")
        if unit is None:  # INTERVAL '1 minute'
            ms = _words(value.name, node)
        elif isinstance(unit, exp.IntervalSpan) or not isinstance(value, exp.Literal):
            raise SqlError(f"{clause(node)}: give the interval as INTERVAL 'n' UNIT", node)
        else:
            try:
                ms = round(float(value.name) * _unit(unit.name, node))
            except ValueError:
                raise SqlError(f"{clause(node)}: {value.name!r} is not a number", node) from None
    elif isinstance(node, exp.Literal) and node.is_string:
        ms = _words(node.name, node)
    else:
        raise SqlError(
            f"{clause(node)}: a window's size is an interval (INTERVAL '1' MINUTE) or a "
            "duration string ('1 minute')",
            node,
        )
    if ms < 0 or (ms == 0 and not zero):
        raise SqlError(f"{clause(node)}: must be above zero", node)
    return ms
