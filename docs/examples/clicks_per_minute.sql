-- The shipped pipelines/clicks_per_minute.toml in Flink SQL's spelling: the same spec and
-- fingerprint (`flow-jobs sql-to-toml docs/examples/clicks_per_minute.sql` prints it).
SET 'pipeline.name' = 'clicks-per-minute';
SET 'checkpoint.location' = '${FLOW_DATA_DIR:-./data}/.flow/clicks-per-minute/checkpoint';
SET 'dead_letter.path' = '${FLOW_DATA_DIR:-./data}/.flow/clicks-per-minute/dead_letters';

CREATE TABLE clicks (user_id STRING, page STRING, amount DOUBLE, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'clicks',
  'properties.bootstrap.servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}',
  'format' = 'json', 'scan.startup.mode' = 'earliest-offset');

-- _kafka (the record's position) orders events of equal times for first / last
CREATE VIEW known_clicks AS
SELECT user_id, page, amount, ts, _kafka FROM clicks WHERE user_id IS NOT NULL;

CREATE TABLE clicks_per_minute WITH ('kind' = 'delta', 'path' = '${FLOW_DATA_DIR:-./data}/clicks_per_minute');

INSERT INTO clicks_per_minute
SELECT window_start, window_end, user_id,
       COUNT(*) AS clicks, SUM(amount) AS amount_sum, AVG(amount) AS amount_avg,
       MAX(amount) AS amount_max, FIRST_VALUE(page) AS first_page, LAST_VALUE(page) AS last_page
FROM TABLE(TUMBLE(TABLE known_clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, user_id;
