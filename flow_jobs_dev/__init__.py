"""Scaffolding for the demo, the tests and the benchmarks, not the engine: an embedded
Kafka-protocol broker, sample events, a standalone Spark cluster, ``dg dev`` and a
client of it, and the demo (``python -m flow_jobs_dev.demo``). Its third-party
dependencies come with the extra ``demo``; ``flow_jobs`` never imports it."""
