"""The Iceberg target (``kind = "iceberg"``): each batch one pyiceberg commit to an
Iceberg table, in a SQL catalog in the state store's database by default or a REST
catalog, once per batch by a table property holding the batch id.

A replay after a crash finds its batch id in the table's properties and skips the
commit; the ledger row is then written if the crash came before it.
"""

from flow_jobs.sinks import register
from flow_jobs.sinks.iceberg.sink import IcebergSink
from flow_jobs.sinks.iceberg.spec import IcebergCatalog, IcebergTarget

register(IcebergSink)

__all__ = ["IcebergCatalog", "IcebergSink", "IcebergTarget"]
