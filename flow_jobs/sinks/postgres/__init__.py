"""The Postgres target (``kind = "postgres"``): an upsert on the natural key into a table
of the state store's database, in one transaction with the batch's ledger row, so output
and ledger commit together; a batch whose ledger row exists is skipped.
"""

from flow_jobs.sinks import register
from flow_jobs.sinks.postgres.sink import PostgresUpsertSink
from flow_jobs.sinks.postgres.spec import PostgresTarget

register(PostgresUpsertSink)

__all__ = ["PostgresTarget", "PostgresUpsertSink"]
