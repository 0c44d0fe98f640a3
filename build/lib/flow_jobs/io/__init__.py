"""Sources and sinks: the Kafka streaming source, the Delta MERGE writer, dead letters."""
