-- Nexmark q2, selection: the bids on every 123rd auction. No window and no state: each row
-- appended once ([transform.append], docs/spec-reference.md), named by its Kafka
-- position (row_id).
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q2}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q2/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q2/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE bids WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q2/target');

INSERT INTO bids
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
