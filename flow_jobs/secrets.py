"""Keep secrets out of what flow-jobs prints: URLs, DSNs and errors that quote them.

Specs hold secrets as pydantic ``SecretStr`` (printed as ``**********``), but a secret
can still reach a message through text that quotes it: a pydantic error echoing a value
of the wrong type, psycopg echoing the connection string it could not parse, a log line
with a URL. ``redact`` masks the credentials in such text (and
``flow_jobs.io.postgres.connect_postgres`` in psycopg's connection errors). No library
here does this for us: psycopg's ``conninfo`` helpers parse a DSN but leave error texts
alone.
"""

from __future__ import annotations

import logging
import re

MASK = "***"

# scheme://user:password@host -> scheme://user:***@host (any scheme: postgresql, kafka...)
_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*):[^@\s'\"]*@")
# password=... in a key/value DSN or a librdkafka/JAAS setting (quoted or not)
_KEY_VALUE = re.compile(
    r"(?i)(?P<key>\b(?:password|passwd|pwd|secret|token|sasl\.password)\s*=\s*)"
    r"(?P<value>\"[^\"]*\"|'(?:[^'\\]|\\.)*'|[^\s;,)]+)"
)


def redact(text: str) -> str:
    """``text`` with the credentials of every URL and ``password=`` setting masked."""
    text = _URL_CREDENTIALS.sub(rf"\g<head>:{MASK}@", text)
    return _KEY_VALUE.sub(rf"\g<key>{MASK}", text)


class RedactingFilter(logging.Filter):
    """Masks credentials in every record a handler emits (the last line of defence)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True
