-- Nexmark q8, new users: the persons who opened an auction in the 10-second window in
-- which they registered. Nexmark's SQL groups each side by its key and TUMBLE window and
-- joins the two on the key and the window. Each person event is a new person (its id is
-- new), so grouping the persons keeps every one once, and the join is the persons that
-- have an auction with seller = id in their window, once each: a semi window join
-- (docs/spec-reference.md, "[transform.window_join]"). q8.toml is its TOML twin.
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q8}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q8/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q8/dead_letters';

CREATE TABLE person (
  id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING,
  state STRING, dateTime BIGINT, extra STRING,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (
  'topic' = '${NEXMARK_PERSON_TOPIC:-nexmark-person}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE auction (
  id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
  dateTime BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (
  'topic' = '${NEXMARK_AUCTION_TOPIC:-nexmark-auction}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE new_users WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q8/target');

INSERT INTO new_users
SELECT P.window_start AS starttime, P.window_end AS endtime, P.id, P.name
FROM (SELECT * FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))) P
WHERE P.id IN (
  SELECT A.seller
  FROM (SELECT * FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))) A
  WHERE P.window_start = A.window_start AND P.window_end = A.window_end
);
