"""A Postgres connection whose errors never quote the password."""

from __future__ import annotations

from typing import Any

import psycopg

from flow_jobs.secrets import redact


def connect_postgres(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(url, **kwargs)``; a connection error is re-raised with the URL's
    credentials masked and without the original chained (a traceback would print it)."""
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as e:
        raise type(e)(redact(str(e))) from None
