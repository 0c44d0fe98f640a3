"""User reduce functions for the tests (import paths: tests.reduce_fns:<name>).

They are order-sensitive on purpose: a fold in the wrong order gives another answer.
"""

from __future__ import annotations

from typing import Any


def start_trail(value: Any) -> str:
    return str(value)


def extend_trail(trail: str, value: Any) -> str:
    return f"{trail}>{value}"


def start_summary(row: dict[str, Any]) -> dict[str, Any]:
    return {"n": 1, "pages": row["page"] or "-", "spend": row["amount"] or 0.0}


def extend_summary(summary: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    return {
        "n": summary["n"] + 1,
        "pages": f"{summary['pages']},{row['page'] or '-'}",
        "spend": summary["spend"] + (row["amount"] or 0.0),
    }


def refuse(_aggregate: Any, value: Any) -> Any:
    """A reducer with a bug: it fails on the second value of any window."""
    raise ValueError(f"reducer refuses {value!r}")
