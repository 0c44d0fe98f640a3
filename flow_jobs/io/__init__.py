"""What flow-jobs reads and writes beside Spark: the checkpoint's files (the Kafka reader
reads them too) and its claim, the Delta MERGE writer, dead letters, lookup tables, top-N
standings, Postgres connections and the retries around them. The Kafka source itself is
``flow_jobs.kafka``."""
