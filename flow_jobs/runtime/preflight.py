"""Before a run starts: each source's brokers answer, and hold its topic.

A broker that is not there, or a topic that does not exist, is a mistake in the spec or
in its environment, not an outage: the run fails before its query starts, within the
source's ``connect_timeout_ms``, in one line that names the source, the brokers or the
topic, and what to do. Once a run has reached its brokers, a broker that goes away is an
outage: the reader waits it out (``retries``), and the run logs it
(``flow_jobs.runtime.outages``).
"""

from __future__ import annotations

from typing import Any

from flow_jobs.librdkafka_logs import librdkafka_logger
from flow_jobs.secrets import redact
from flow_jobs.spec.models import KafkaSource, PipelineSpec

#: How many of a cluster's topics a missing topic's error names.
_TOPICS_NAMED = 10


class SourceUnavailable(RuntimeError):
    """A source's brokers do not answer, or do not hold its topic."""


def check_sources(spec: PipelineSpec) -> None:
    """Raise ``SourceUnavailable`` for the first source whose brokers do not answer
    within its ``connect_timeout_ms``, or do not hold its topic."""
    clients: dict[tuple[tuple[str, str], ...], Any] = {}
    try:
        for index, source in enumerate(spec.sources):
            config = source.cluster_config()
            key = tuple(sorted(config.items()))
            if key not in clients:
                clients[key] = _client(config)
            _check(clients[key], source, index)
    finally:
        for client in clients.values():
            client.close()


def _client(config: dict[str, str]) -> Any:
    """A client that only asks for metadata. A consumer, told never to create a topic
    it asks about: an admin client's metadata request lets a broker that creates topics
    on demand (tansu does) create it, and the check would pass."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            **config,
            "group.id": "flow-jobs-preflight",
            "allow.auto.create.topics": False,
            "enable.auto.commit": False,
            "logger": librdkafka_logger(),
        }
    )


def _check(client: Any, source: KafkaSource, index: int) -> None:
    from confluent_kafka import KafkaError, KafkaException

    key = f"sources[{index}]"
    brokers = redact(source.bootstrap_servers)
    timeout_s = source.connect_timeout_ms / 1000
    what = f"source {source.name!r}"
    try:
        metadata = client.list_topics(source.topic, timeout=timeout_s)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        reason = err.str() if hasattr(err, "str") else str(e)
        if err is not None and err.code() == KafkaError._AUTHENTICATION:
            raise SourceUnavailable(
                f"{what}: the brokers at {brokers} refused to authenticate ({reason}); "
                f"check {key}.client_config"
            ) from None
        raise SourceUnavailable(
            f"{what}: no Kafka broker answered at {brokers} within {timeout_s:g} s "
            f"({reason}); check {key}.bootstrap_servers and that the broker runs "
            f"({key}.connect_timeout_ms sets the wait)"
        ) from None
    found = metadata.topics.get(source.topic)
    error = found.error if found is not None else None
    if found is not None and error is None and found.partitions:
        return
    if found is None or error is None or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        raise SourceUnavailable(
            f"{what}: topic {source.topic!r} does not exist on {brokers}"
            f"{_topics_there(client, timeout_s)}; create it, or name an existing one in "
            f"{key}.topic"
        )
    raise SourceUnavailable(
        f"{what}: the brokers at {brokers} cannot serve topic {source.topic!r} "
        f"({error.str()}); check {key}.topic and {key}.client_config"
    )


def _topics_there(client: Any, timeout_s: float) -> str:
    """`` (topics there: a, b, …)``, or nothing where the brokers do not list them."""
    try:
        names = sorted(t for t in client.list_topics(timeout=timeout_s).topics if t[:1] != "_")
    except Exception:  # only the error's detail: never a reason to fail otherwise
        return ""
    if not names:
        return " (it has no topics)"
    more = f", … {len(names) - _TOPICS_NAMED} more" if len(names) > _TOPICS_NAMED else ""
    return f" (topics there: {', '.join(names[:_TOPICS_NAMED])}{more})"
