"""Window rows as JSON: the messages of a ``format = "json"`` Kafka target (and their
keys), and the JSON values a JSON Schema target's serializer takes (instants and dates
as ISO-8601 text, bytes as base64, decimals as the text of their digits)."""

from __future__ import annotations

import base64
import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(value: Any) -> bytes:
    """``value`` as compact JSON bytes."""
    return json.dumps(value, default=_json_value, separators=(",", ":")).encode()


def json_values(value: Any) -> Any:
    """``value`` with only JSON's own types in it, as ``to_json`` writes them."""
    return json.loads(to_json(value))
