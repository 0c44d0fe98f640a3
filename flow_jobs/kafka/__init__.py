"""Kafka as a PySpark Python streaming data source, over confluent-kafka.

Spark's own ``kafka`` format needs the ``spark-sql-kafka-0-10`` jar, which cannot be
installed from the Python package registries; this source needs nothing but
``pip install``. It stays as small as PySpark's ``DataSourceStreamReader`` contract:

* an offset is a plain JSON dict ``{"<topic>": {"<partition>": <next offset>}}``, kept in
  Spark's offset log, so a restarted query resumes where its checkpoint says;
* ``partitions(start, end)`` plans one input partition per Kafka partition range, and
  ``read`` runs on executors, yielding Arrow record batches (no per-row Python objects
  reach Spark);
* with ``json_schema`` set (a payload schema Arrow decodes like ``from_json``), ``read``
  also decodes the payloads in bulk into the ``_decoded`` struct column; a record Arrow
  rejects is flagged ``_undecoded`` and left to ``from_json`` (``flow_jobs.kafka.json_decode``);
* every row carries ``_late_watermark``, the watermark Spark's window operators judge its
  batch by (from the checkpoint's offset log), so late rows can be counted one by one;
* with ``combine`` set (a ``flow_jobs.kafka.combine.CombinePlan``), ``read`` folds the
  records a window would aggregate into partial aggregates, one per (pane, group) and
  block, in the ``_partial`` column; the others pass through with a NULL one;
* with ``idle_file`` set, an idle source sends heartbeats: one row with no record and a
  ``_heartbeat`` watermark, which raises the source's own watermark so that it stops
  holding back the pipeline's (``flow_jobs.runtime.idleness`` decides when, and to what);
* a fresh checkpoint starts at ``starting_offsets``: the earliest or latest offsets, or
  by time (``timestamp:<epoch ms>``), each partition's first record stamped at or after
  it (``flow_jobs.kafka.time_offsets``);
* ``latestOffset(start, limit)`` honours ``max_offsets_per_trigger`` (Spark's read limit)
  and ``prepareForTriggerAvailableNow`` pins the end of an ``availableNow`` run;
* a range is read up to its end offset and no further, so the last partial fetch never
  waits for a timeout, and ranges are deterministic on replay.

Data loss fails the query with one line naming the topic, partition and offsets, like
Spark's ``failOnDataLoss``: a planned start already deleted (retention: the broker's
earliest offset is past it) or a partition whose latest offset went backwards (the topic
was deleted and recreated). With ``fail_on_data_loss = false`` the partition resumes at
the broker's earliest offset instead; the skip is planned on the driver and kept in the
batch's end offset (``"_data_loss"``), so it is replay-deterministic, and the ledger row
of the batch holds it. Retention that overtakes a range between planning and reading is
found by the executor (``_AUTO_OFFSET_RESET``) and treated the same way, logged there.

Transient broker errors (connection lost, all brokers down, leader changes, timeouts)
are retried with exponential backoff, ``retries`` in a row at most.
"""
