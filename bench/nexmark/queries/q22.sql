-- Nexmark q22, get URL directories: each bid with the first three directories of its
-- URL. Flink's SPLIT_INDEX(url, '/', i) is get(split(url, '/'), i) here (NULL past the
-- end, as Flink's). No window and no state: each row appended once ([transform.append]).
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q22}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q22/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q22/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE bids WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q22/target');

INSERT INTO bids
SELECT auction, bidder, price, channel,
  get(split(url, '/'), 3) AS dir1,
  get(split(url, '/'), 4) AS dir2,
  get(split(url, '/'), 5) AS dir3
FROM bid;
