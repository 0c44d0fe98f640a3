"""librdkafka's own log lines through Python's logging, at a fitting level.

Without a ``logger`` in its config, every librdkafka client prints its lines raw to
stderr (``%3|1795754307.367|FAIL|rdkafka#consumer-1| [thrd:…]: … Connection refused``),
in whichever process runs it: the driver, the reader's planning worker, each executor's
Python worker. With ``"logger": librdkafka_logger()`` (confluent-kafka's option) they go
to the logger ``flow_jobs.kafka.librdkafka``: configured by the run in the driver, and
Python's last-resort handler (WARNING and above, to stderr) in a worker.

Levels: confluent-kafka maps librdkafka's syslog levels onto Python's (3 ERROR, 4
WARNING, 6 INFO, 7 DEBUG). A broker going away makes every client log its lost
connections and refused reconnects, at ERROR, once per attempt; the run watches the
brokers itself and logs an outage once when it starts and once when it ends
(``flow_jobs.runtime.outages``), so these lines (facilities ``FAIL``, ``ERROR`` about the
transport, and ``Disconnected``) go down to DEBUG. Everything else keeps its level.
"""

from __future__ import annotations

import logging
from typing import Any

LOGGER_NAME = "flow_jobs.kafka.librdkafka"

#: librdkafka facilities of connection state: a broker down, refused, disconnected.
_CONNECTION_FACILITIES = frozenset({"FAIL", "ERROR", "DISCONNECT", "BROKERFAIL", "CONNECT"})
_CONNECTION_WORDS = (
    "Connection refused",
    "Disconnected",
    "all brokers are down",
    "Connect to ",
    "Broker transport failure",
    "timed out",
)


class _ConnectionLinesToDebug(logging.Filter):
    """Re-levels librdkafka's lines about lost or refused connections to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and _about_connections(record):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _about_connections(record: logging.LogRecord) -> bool:
    args: Any = record.args
    facility = args[0] if isinstance(args, tuple) and args else ""
    text = record.getMessage()
    return facility in _CONNECTION_FACILITIES or any(w in text for w in _CONNECTION_WORDS)


def librdkafka_logger() -> logging.Logger:
    """The logger to give a confluent-kafka client as its ``logger`` setting."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, _ConnectionLinesToDebug) for f in logger.filters):
        logger.addFilter(_ConnectionLinesToDebug())
    return logger
