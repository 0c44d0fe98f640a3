"""Transient broker errors, retried with exponential backoff."""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)


FAIL_HINT = "set fail_on_data_loss = false on the source to skip to the earliest offset"

#: librdkafka error codes that a retry (or librdkafka's own reconnect) can cure: what a
#: broker that is away, restarting or moving leaders answers. A topic or partition the
#: client does not know (yet) is among them: a run checks its topics before it starts
#: (``flow_jobs.runtime.preflight``), so later it is a broker that has not loaded them.
_TRANSIENT_NAMES = (
    "_TRANSPORT",
    "_ALL_BROKERS_DOWN",
    "_TIMED_OUT",
    "_MSG_TIMED_OUT",
    "_RESOLVE",
    "_UNKNOWN_PARTITION",
    "_UNKNOWN_TOPIC",
    "_WAIT_COORD",
    "UNKNOWN_TOPIC_OR_PART",
    "NOT_LEADER_FOR_PARTITION",
    "NOT_LEADER_OR_FOLLOWER",
    "LEADER_NOT_AVAILABLE",
    "BROKER_NOT_AVAILABLE",
    "REPLICA_NOT_AVAILABLE",
    "OFFSET_NOT_AVAILABLE",
    "UNKNOWN_LEADER_EPOCH",
    "FENCED_LEADER_EPOCH",
    "KAFKA_STORAGE_ERROR",
    "NOT_ENOUGH_REPLICAS",
    "FETCH_SESSION_ID_NOT_FOUND",
    "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "NOT_COORDINATOR",
    "REQUEST_TIMED_OUT",
    "NETWORK_EXCEPTION",
)


def is_transient(err: Any) -> bool:
    from confluent_kafka import KafkaError

    codes = {getattr(KafkaError, n) for n in _TRANSIENT_NAMES if hasattr(KafkaError, n)}
    return err.code() in codes or bool(err.retriable())


class BrokerUnavailable(RuntimeError):
    """A source's brokers failed ``retries`` tries in a row."""


class Backoff:
    """Exponential backoff over consecutive transient errors, ``retries`` at most."""

    def __init__(
        self, retries: int, base_ms: int, sleep: Any = time.sleep, setting: str = ""
    ) -> None:
        self.retries, self.base_ms, self.sleep = retries, base_ms, sleep
        #: what to raise, named in the failure (``KafkaSourceOptions.retries_setting``)
        self.setting = setting or "retries on the source"
        self.failures = 0

    def failed(self, what: str, err: str) -> None:
        """Wait before the next try, or raise once ``retries`` tries in a row failed."""
        self.failures += 1
        if self.failures > self.retries:
            raise BrokerUnavailable(
                f"{what}: {err} ({self.retries} retries with backoff exhausted; raise "
                f"{self.setting} if the broker needs longer to recover)"
            )
        # INFO: the run logs an outage once as it starts and once as it ends
        # (flow_jobs.runtime.outages); the last failure names the setting.
        log.info("%s: %s; retry %d of %d", what, err, self.failures, self.retries)
        self.sleep(min(self.base_ms * 2 ** (self.failures - 1), 30_000) / 1000)

    def succeeded(self) -> None:
        self.failures = 0


def retry(
    call: Any, what: str, retries: int, base_ms: int, sleep: Any = time.sleep, setting: str = ""
) -> Any:
    """``call()``, retried on transient Kafka errors (``KafkaException``)."""
    from confluent_kafka import KafkaException

    backoff = Backoff(retries, base_ms, sleep, setting)
    while True:
        try:
            return call()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is None or not hasattr(err, "code") or not is_transient(err):
                raise
            backoff.failed(what, err.str())
