-- Nexmark q1, currency conversion: every bid with its price in euros (dollars x 0.908,
-- a DECIMAL as in Flink). No window and no state: each row appended once
-- ([transform.append], docs/spec-reference.md), named by its Kafka position (row_id).
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q1}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q1/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q1/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE bids WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q1/target');

INSERT INTO bids
SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid;
