-- Clicks and spend per user per minute, written in Flink SQL's spelling: the same
-- pipeline as `flow-jobs sql-to-toml docs/examples/clicks_per_minute.sql` prints.
SET 'pipeline.name' = 'clicks-per-minute-sql';
SET 'checkpoint.location' = '${FLOW_DATA_DIR:-./data}/.flow/clicks-per-minute-sql/checkpoint';

CREATE TABLE clicks (
  user_id STRING,
  page STRING,
  amount DOUBLE,
  ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'clicks',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}',
  'format' = 'json',
  'scan.startup.mode' = 'earliest-offset'
);

CREATE TABLE clicks_per_minute (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  user_id STRING,
  clicks BIGINT,
  amount_sum DOUBLE,
  amount_avg DOUBLE,
  amount_max DOUBLE,
  first_page STRING,
  last_page STRING
) WITH (
  'kind' = 'delta',
  'path' = '${FLOW_DATA_DIR:-./data}/clicks_per_minute_sql'
);

INSERT INTO clicks_per_minute
SELECT window_start, window_end, user_id,
       COUNT(*) AS clicks,
       SUM(amount) AS amount_sum,
       AVG(amount) AS amount_avg,
       MAX(amount) AS amount_max,
       FIRST_VALUE(page) AS first_page,
       LAST_VALUE(page) AS last_page
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
WHERE user_id IS NOT NULL
GROUP BY window_start, window_end, user_id;
