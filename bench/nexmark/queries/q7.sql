-- Nexmark q7, highest bid: per 10-second window, the bids at the window's highest price
-- (Beam's Query7: the bids of a fixed window whose price is the window's maximum; the
-- Flink SQL text joins each bid with its window's MAX(price) on price and dateTime
-- BETWEEN the window's end - 10 s AND its end, which also takes a bid at exactly the
-- end, of the next window, when its price equals this window's maximum: a boundary this
-- spelling does not copy). Every bid is its own group (all its columns grouped, with
-- COUNT(*) for bids identical in every column) and the top-N with ties keeps each at
-- the window's highest price: RANK() <= 1.
SET 'pipeline.name' = '${NEXMARK_PIPELINE:-nexmark-q7}';
SET 'checkpoint.location' = '${NEXMARK_DIR:-./data/nexmark}/q7/checkpoint';
SET 'dead_letter.path' = '${NEXMARK_DIR:-./data/nexmark}/q7/dead_letters';

CREATE TABLE bid (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  dateTime BIGINT, extra STRING,
  WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (
  'topic' = '${NEXMARK_BID_TOPIC:-nexmark-bid}',
  'bootstrap_servers' = '${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}'
);

CREATE TABLE highest_bids WITH ('kind' = 'delta', 'path' = '${NEXMARK_DIR:-./data/nexmark}/q7/target');

INSERT INTO highest_bids
SELECT window_start, window_end, auction, bidder, price, dateTime, extra, maxprice, bids FROM (
  SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY maxprice DESC) AS rownum
  FROM (
    SELECT window_start, window_end, auction, bidder, price, dateTime, extra,
           MAX(price) AS maxprice, COUNT(*) AS bids
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
    GROUP BY window_start, window_end, auction, bidder, price, dateTime, extra
  )
) WHERE rownum <= 1;
