-- Nexmark q21, add channel id: each bid from a known channel or with a channel_id in its
-- URL, with that id. Flink's REGEXP_EXTRACT gives NULL where nothing matches and Spark's
-- regexp_extract an empty string, so NULLIF turns Spark's back into Flink's. No window and
-- no state: each row appended once ([transform.append]).
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q21}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q21/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q21/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE bids WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q21/target');

INSERT INTO bids
SELECT auction, bidder, price, channel,
  CASE
    WHEN lower(channel) = 'apple' THEN '0'
    WHEN lower(channel) = 'google' THEN '1'
    WHEN lower(channel) = 'facebook' THEN '2'
    WHEN lower(channel) = 'baidu' THEN '3'
    ELSE NULLIF(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '')
  END AS channel_id
FROM bid
WHERE NULLIF(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '') IS NOT NULL
   OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu');
