-- Nexmark q14, calculation: each bid priced between 1,000,000 and 50,000,000 euros, with
-- the time of day it came at and how many 'c' its extra holds. Nexmark counts them with a
-- user function (count_char); here, the length lost by removing them. dateTime is epoch
-- milliseconds, its hour taken in UTC (the session's time zone). No window and no state:
-- each row appended once ([transform.append]).
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q14}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q14/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q14/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE bids WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q14/target');

INSERT INTO bids
SELECT auction, bidder, 0.908 * price AS price,
  CASE
    WHEN hour(timestamp_millis(dateTime)) >= 8 AND hour(timestamp_millis(dateTime)) <= 18 THEN 'dayTime'
    WHEN hour(timestamp_millis(dateTime)) <= 6 OR hour(timestamp_millis(dateTime)) >= 20 THEN 'nightTime'
    ELSE 'otherTime'
  END AS bidTimeType,
  dateTime, extra, length(extra) - length(replace(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;
