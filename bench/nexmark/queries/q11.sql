-- Nexmark q11, user sessions: how many bids each bidder makes in a session, a session
-- ending after 10 seconds without a bid.
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q11}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q11/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q11/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE user_sessions WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q11/target');

INSERT INTO user_sessions
SELECT window_start, window_end, bidder, COUNT(*) AS bid_count
FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, bidder;
