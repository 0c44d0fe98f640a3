-- Nexmark q5, hot items: per 10-second window sliding by 2 seconds, the auction(s) with
-- the most bids, every auction tied at the most kept: RANK(), not ROW_NUMBER()
-- (docs/spec-reference.md, "Top N").
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q5}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q5/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q5/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE hot_items WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q5/target');

INSERT INTO hot_items
SELECT window_start, window_end, auction, num FROM (
  SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY num DESC) AS rownum
  FROM (
    SELECT window_start, window_end, auction, COUNT(*) AS num
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY window_start, window_end, auction
  )
) WHERE rownum <= 1;
