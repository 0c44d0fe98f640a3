"""Broker outages, seen from the driver while a run lasts.

When a source's broker goes away, Spark's micro-batch in flight simply waits: the
reader's clients time out, then retry with backoff (``sources[].retries``), and nothing
says why the run stands still. So the run watches each source cluster itself: a thread
asks the brokers for metadata every ``interval_s`` (``AdminClient.list_topics``, a
``probe_timeout_s`` answer at most). The first probe without an answer starts an outage:
logged once, at WARNING, naming the brokers and the sources on them, and counted
(``flow_source_outages_total{source=…}``, the run summary's ``source_outages``). The first
answer after it ends the outage, logged once with its length. librdkafka's own lines
about the lost connections go to DEBUG meanwhile (``flow_jobs.librdkafka_logs``).

Whether the run survives is the reader's business, not this watch's: its retries wait
out an outage up to ``retries`` tries with backoff, then fail the run with one line
naming the setting to raise; a new run resumes from the checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flow_jobs.librdkafka_logs import librdkafka_logger
from flow_jobs.secrets import redact
from flow_jobs.spec.models import KafkaSource

log = logging.getLogger(__name__)


@dataclass
class Cluster:
    """The sources that read from one cluster (the same brokers and client settings)."""

    config: dict[str, str] = field(repr=False)  # secrets revealed: never logged
    sources: list[str] = field(default_factory=list)

    @property
    def brokers(self) -> str:
        return redact(self.config["bootstrap.servers"])


def clusters_of(sources: Sequence[KafkaSource]) -> list[Cluster]:
    by_config: dict[tuple[tuple[str, str], ...], Cluster] = {}
    for s in sources:
        config = s.cluster_config()
        cluster = by_config.setdefault(tuple(sorted(config.items())), Cluster(config))
        cluster.sources.append(s.name)
    return list(by_config.values())


class Outage:
    """One cluster's state: reachable, or down since a time (monotonic seconds)."""

    def __init__(
        self,
        pipeline: str,
        cluster: Cluster,
        started: Callable[[list[str]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pipeline, self.cluster, self._started, self._clock = pipeline, cluster, started, clock
        self.down_since: float | None = None
        self.outages = 0

    def failed(self, error: str) -> None:
        if self.down_since is not None:
            return
        self.down_since = self._clock()
        self.outages += 1
        log.warning(
            "%s: Kafka broker %s unreachable (%s); sources %s wait, their reader retrying "
            "(sources' retries and retry_backoff_ms)",
            self.pipeline,
            self.cluster.brokers,
            error,
            ", ".join(self.cluster.sources),
        )
        self._started(self.cluster.sources)

    def answered(self) -> None:
        if self.down_since is None:
            return
        down = self._clock() - self.down_since
        self.down_since = None
        log.warning(
            "%s: Kafka broker %s is back after %.1f s (sources %s)",
            self.pipeline,
            self.cluster.brokers,
            down,
            ", ".join(self.cluster.sources),
        )


class BrokerWatch:
    """One thread per source cluster, probing its brokers while the run lasts."""

    def __init__(
        self,
        pipeline: str,
        sources: Sequence[KafkaSource],
        started: Callable[[list[str]], None],
        interval_s: float = 0.5,
        probe_timeout_s: float = 2.0,
    ) -> None:
        self.interval_s, self.probe_timeout_s = interval_s, probe_timeout_s
        self.outages = [Outage(pipeline, c, started) for c in clusters_of(sources)]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> BrokerWatch:
        for outage in self.outages:
            thread = threading.Thread(
                target=self._watch, args=(outage,), name="flow-broker-watch", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.probe_timeout_s + 1)

    def _watch(self, outage: Outage) -> None:
        from confluent_kafka.admin import AdminClient

        try:
            admin = AdminClient({**outage.cluster.config, "logger": librdkafka_logger()})
        except Exception as e:  # a watch must never fail the run
            log.warning("%s: cannot watch the brokers: %s", outage.pipeline, e)
            return
        while not self._stop.is_set():
            error = _probe(admin, self.probe_timeout_s)
            if error is None:
                outage.answered()
            else:
                outage.failed(error)
            admin.poll(0)  # serves its queued log lines
            self._stop.wait(self.interval_s)


def _probe(admin: Any, timeout_s: float) -> str | None:
    """None when the brokers answered a metadata request in time, else why not."""
    try:
        admin.list_topics(timeout=timeout_s)
        return None
    except Exception as e:
        err = e.args[0] if e.args else e
        return err.str() if hasattr(err, "str") else str(err)
