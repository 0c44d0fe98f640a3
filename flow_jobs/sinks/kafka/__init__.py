"""The Kafka target (``kind = "kafka"``): rows produced to a topic, keyed by the natural
key. Append-only: a batch whose ledger row exists is skipped; a crash after the produce
and before the ledger commit repeats the batch's rows (warned at start-up).
"""

from flow_jobs.sinks import register
from flow_jobs.sinks.kafka.sink import KafkaProduceSink
from flow_jobs.sinks.kafka.spec import KafkaTarget

register(KafkaProduceSink)

__all__ = ["KafkaProduceSink", "KafkaTarget"]
