"""``bench.nexmark.generator``: Beam's Nexmark generator rules, checked on the events it
yields. Pure logic: no Spark, no broker.

Each statistical bound below is derived from the rule it checks (its expected value and
its binomial standard deviation over the events drawn); the bounds are several standard
deviations wide, and the generator is seeded, so the results do not vary between runs.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from fractions import Fraction

import pytest

from bench.nexmark.generator import (
    BEAM_BASE_TIME_MS,
    HOT_CHANNELS,
    GeneratorConfig,
    event,
    events,
    kind_of,
)

N = 50_000  # 1000 cycles of 50 events: 1000 persons, 3000 auctions, 46 000 bids
BASE = 1_700_000_000_000

PERSON_KEYS = ["id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra"]
AUCTION_KEYS = [
    "id",
    "itemName",
    "description",
    "initialBid",
    "reserve",
    "dateTime",
    "expires",
    "seller",
    "category",
    "extra",
]
BID_KEYS = ["auction", "bidder", "price", "channel", "url", "dateTime", "extra"]


def generate(count: int = N, **overrides: int) -> list[tuple[str, dict]]:
    return list(events(GeneratorConfig(base_time_ms=BASE, **overrides), count))


@pytest.fixture(scope="module")
def stream() -> list[tuple[str, dict]]:
    return generate()


def of_kind(stream: list[tuple[str, dict]], kind: str) -> list[dict]:
    return [row for k, row in stream if k == kind]


# -- event mix ------------------------------------------------------------------------


def test_kind_of_is_the_1_3_46_cycle() -> None:
    assert [kind_of(n) for n in range(50)] == ["person"] + ["auction"] * 3 + ["bid"] * 46
    assert [kind_of(n) for n in (50, 51, 53, 54, 99, 100)] == [
        "person",
        "auction",
        "auction",
        "bid",
        "bid",
        "person",
    ]


def test_proportions_are_exact_over_50k_events(stream: list[tuple[str, dict]]) -> None:
    assert Counter(kind for kind, _ in stream) == {"person": 1000, "auction": 3000, "bid": 46000}
    assert [kind for kind, _ in stream] == [kind_of(n) for n in range(N)]


def test_rows_have_the_flink_sql_fields(stream: list[tuple[str, dict]]) -> None:
    expected = {"person": PERSON_KEYS, "auction": AUCTION_KEYS, "bid": BID_KEYS}
    for kind, row in stream[:2000]:
        assert list(row) == expected[kind]
        assert isinstance(row["dateTime"], int)
        assert len(row["extra"]) == 3  # the default extra_chars
    for person in of_kind(stream, "person"):
        assert re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", person["name"])
        assert re.fullmatch(r"[a-z ]*@[a-z ]*\.com", person["emailAddress"])
        assert re.fullmatch(r"\d{4} \d{4} \d{4} \d{4}", person["creditCard"])
    # The states are Beam's six, drawn uniformly: each ~1/6 of 1000 persons (sd ~12).
    states = Counter(p["state"] for p in of_kind(stream, "person"))
    assert set(states) == {"AZ", "CA", "ID", "OR", "WA", "WY"}
    assert all(100 < count < 240 for count in states.values())


# -- event time -----------------------------------------------------------------------


def beam_time(n: int, rate: int, base: int = BASE) -> int:
    """Beam: delay = 1e6/rate µs rounded half up to whole µs; time = base + floor(n *
    delay / 1000) ms."""
    delay_us = math.floor(Fraction(1_000_000, rate) + Fraction(1, 2))
    return base + math.floor(Fraction(n * delay_us, 1000))


@pytest.mark.parametrize("rate", [10_000, 1_000, 1, 7, 3_000])
def test_event_times_follow_the_rate(rate: int) -> None:
    times = [row["dateTime"] for _, row in generate(3000, rate=rate)]
    assert times == [beam_time(n, rate) for n in range(3000)]
    if 1_000_000 % rate == 0:
        # No rounding of the delay: the n-th event is at base + n * 1e6/rate µs, floored
        # to whole milliseconds.
        assert times == [
            BASE + math.floor(Fraction(n * 1_000_000, rate * 1000)) for n in range(3000)
        ]


def test_event_times_at_10k_per_second(stream: list[tuple[str, dict]]) -> None:
    # 100 µs per event: ten events per millisecond, 50 000 events in 5 s.
    assert [row["dateTime"] for _, row in stream[:21]] == [BASE] * 10 + [BASE + 1] * 10 + [BASE + 2]
    assert stream[-1][1]["dateTime"] == BASE + 4999


def test_a_rate_that_rounds_to_no_delay_is_refused() -> None:
    GeneratorConfig(rate=1_999_999)  # 0.5 µs rounds half up to 1 µs
    with pytest.raises(ValueError, match="0 µs"):
        GeneratorConfig(rate=2_000_001)


def test_default_base_time_is_beams() -> None:
    assert GeneratorConfig().base_time_ms == BEAM_BASE_TIME_MS == 1_436_918_400_000
    assert event(GeneratorConfig(), 0)[1]["dateTime"] == BEAM_BASE_TIME_MS


def test_auction_expiry_is_within_twice_the_in_flight_horizon(
    stream: list[tuple[str, dict]],
) -> None:
    # Beam: length = 1 + uniform[0, 2 * horizon), horizon = time until the event
    # 100 * 50 // 3 = 1666 events later: floor((n + 1666) / 10) - floor(n / 10) ms at
    # 10k/s, i.e. 166 or 167 ms. Mean length ~ 167 ms; its sd over 3000 auctions ~ 1.8.
    lengths = [a["expires"] - a["dateTime"] for a in of_kind(stream, "auction")]
    assert min(lengths) >= 1
    assert max(lengths) <= 2 * 167
    assert 158 < sum(lengths) / len(lengths) < 176


# -- determinism ----------------------------------------------------------------------


def test_same_seed_same_events(stream: list[tuple[str, dict]]) -> None:
    assert generate(5000) == stream[:5000]
    assert generate(5000, seed=7) == generate(5000, seed=7)


def test_another_seed_changes_values_not_ids_or_times(stream: list[tuple[str, dict]]) -> None:
    other = generate(5000, seed=1)
    assert [k for k, _ in other] == [k for k, _ in stream[:5000]]
    assert [r["dateTime"] for _, r in other] == [r["dateTime"] for _, r in stream[:5000]]
    ids = [r["id"] for k, r in stream[:5000] if k != "bid"]
    assert [r["id"] for k, r in other if k != "bid"] == ids
    prices = [r["price"] for k, r in stream[:5000] if k == "bid"]
    other_prices = [r["price"] for k, r in other if k == "bid"]
    assert sum(a != b for a, b in zip(prices, other_prices, strict=True)) > 0.99 * len(prices)


def test_any_event_can_be_generated_alone(stream: list[tuple[str, dict]]) -> None:
    config = GeneratorConfig(base_time_ms=BASE)
    assert list(events(config, 500, start=12_345)) == stream[12_345:12_845]
    assert [event(config, n) for n in (0, 1, 4, 49_999)] == [stream[n] for n in (0, 1, 4, 49_999)]


# -- ids ------------------------------------------------------------------------------


def test_persons_and_auctions_are_numbered_from_1000(stream: list[tuple[str, dict]]) -> None:
    assert [p["id"] for p in of_kind(stream, "person")] == list(range(1000, 2000))
    assert [a["id"] for a in of_kind(stream, "auction")] == list(range(1000, 4000))


def test_references_stay_within_beams_window(stream: list[tuple[str, dict]]) -> None:
    """Beam picks a referenced id either as a hot id (the first, or for bidders the
    second, of the newest block of 100) or uniformly from a window ending LEAD = 10 ids
    past the newest one generated: auctions from the newest - numInFlightAuctions (100),
    persons from the newest numActivePeople (1000). So, with the newest ids tracked from
    the stream itself, every bid's auction lies in [newest - 100, newest + 10] and every
    bidder/seller in [newest - 999, newest + 10]: a reference is to an event already
    generated or at most 10 ids ahead of the newest."""
    newest_person = newest_auction = None
    ahead = Counter()
    auction_offsets, bidder_offsets = set(), set()
    for kind, row in stream:
        if kind == "person":
            newest_person = row["id"]
        elif kind == "auction":
            newest_auction = row["id"]
            assert max(1000, newest_person - 999) <= row["seller"] <= newest_person + 10
        else:
            assert max(1000, newest_auction - 100) <= row["auction"] <= newest_auction + 10
            assert max(1000, newest_person - 999) <= row["bidder"] <= newest_person + 10
            ahead["auction"] += row["auction"] > newest_auction
            ahead["bidder"] += row["bidder"] > newest_person
            auction_offsets.add(row["auction"] - newest_auction)
            bidder_offsets.add(row["bidder"] - newest_person)
    # Both ends of the windows are reached (each end id is drawn by ~1/222 of the bids
    # for auctions, ~50 bids in all for the bidder lead): the window is Beam's, not a
    # narrower one.
    assert min(auction_offsets) == -100
    assert max(auction_offsets) == max(bidder_offsets) == 10
    # The lead is used, and rarely: only non-hot picks (1/2 of bids) land ahead, 10 of
    # ~111 window ids, so ~4.5% of bids; bidders: 1/4 of picks, 10 of numPeople + 10
    # (~1.1% averaged over the growing population) plus the hot bidder while the newest
    # person opens a block of 100 (~0.75%): ~2%.
    assert 0.03 * 46_000 < ahead["auction"] < 0.06 * 46_000
    assert 0.005 * 46_000 < ahead["bidder"] < 0.04 * 46_000


# -- hot auctions, bidders, sellers ---------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "low", "high"),
    [
        # P(hot) = 1 - 1/ratio, plus a non-hot pick landing on the hot id (1/111 of the
        # other half): 0.5045 for ratio 2, 0.752 for 4, 0.009 for 1 (never hot). The sd
        # over 18 400 bids is <= 0.0037.
        (2, 0.48, 0.53),
        (4, 0.73, 0.78),
        (1, 0.0, 0.03),
    ],
)
def test_hot_auctions_get_their_share(ratio: int, low: float, high: float) -> None:
    rows = generate(20_000, hot_auction_ratio=ratio)
    bids = of_kind(rows, "bid")
    # The hot auction is the first of the newest block of 100: ids 1000, 1100, ..., up
    # to the block of the last auction generated (1000..2199 here: 12 hot ids).
    hot_ids = {1000 + 100 * k for k in range(12)}
    assert max(a["id"] for a in of_kind(rows, "auction")) == 2199
    share = sum(b["auction"] in hot_ids for b in bids) / len(bids)
    assert low < share < high
    if ratio > 1:
        # Each hot id draws half its window's ~1530 bids (~770, or ~1150 at ratio 4);
        # any other auction ~8: the 12 most frequent auctions are exactly the hot ones.
        top = Counter(b["auction"] for b in bids).most_common(13)
        assert {auction for auction, _ in top[:12]} == hot_ids
        assert top[11][1] > 10 * top[12][1]


def test_hot_auctions_over_50k_events(stream: list[tuple[str, dict]]) -> None:
    # hotAuctionRatio 2: at least ~50% of bids to the hot auctions (expected 0.5045, sd
    # 0.0023 over 46 000 bids); 30 hot ids for auctions 1000..3999.
    bids = of_kind(stream, "bid")
    hot_ids = {1000 + 100 * k for k in range(30)}
    share = sum(b["auction"] in hot_ids for b in bids) / len(bids)
    assert 0.49 < share < 0.52
    most_common, count = Counter(b["auction"] for b in bids).most_common(1)[0]
    assert most_common in hot_ids
    # One hot id's window is 100 auctions = 1666 events = ~1533 bids, half of them its.
    assert 650 < count < 900


def test_hot_bidders_and_sellers_get_their_share(stream: list[tuple[str, dict]]) -> None:
    # hotBiddersRatio 4: P(hot bidder) = 3/4, the hot bidder the second person of the
    # newest block of 100 (1001, 1101, ...); sd 0.002 over 46 000 bids.
    hot_bidders = {1001 + 100 * k for k in range(10)}
    bids = of_kind(stream, "bid")
    share = sum(b["bidder"] in hot_bidders for b in bids) / len(bids)
    assert 0.74 < share < 0.78
    # hotSellersRatio 4: P(hot seller) = 3/4, the first person of the block (1000,
    # 1100, ...); sd 0.008 over 3000 auctions.
    hot_sellers = {1000 + 100 * k for k in range(10)}
    auctions = of_kind(stream, "auction")
    share = sum(a["seller"] in hot_sellers for a in auctions) / len(auctions)
    assert 0.71 < share < 0.80


# -- prices, categories, channels -----------------------------------------------------


def test_prices_follow_beams_log_uniform_formula(stream: list[tuple[str, dict]]) -> None:
    # round(10^(6u) * 100), u uniform in [0, 1): every price in [100, 1e8]; log10(price /
    # 100) uniform on [0, 6), so each decade holds 1/6 (sd 0.0017 over 46 000 bids) and
    # the median is ~100 * 10^3.
    prices = [b["price"] for b in of_kind(stream, "bid")]
    assert all(isinstance(p, int) and 100 <= p <= 100_000_000 for p in prices)
    decades = Counter(min(int(math.log10(p / 100)), 5) for p in prices)
    assert sorted(decades) == [0, 1, 2, 3, 4, 5]
    assert all(abs(count / len(prices) - 1 / 6) < 0.012 for count in decades.values())
    median = sorted(prices)[len(prices) // 2]
    assert 80_000 < median < 125_000
    for auction in of_kind(stream, "auction"):
        # Beam: initialBid = nextPrice, reserve = initialBid + nextPrice.
        assert 100 <= auction["initialBid"] <= 100_000_000
        assert 100 <= auction["reserve"] - auction["initialBid"] <= 100_000_000


def test_categories_are_beams_five(stream: list[tuple[str, dict]]) -> None:
    # FIRST_CATEGORY_ID 10 + uniform of NUM_CATEGORIES 5: ~600 of 3000 each (sd ~22).
    categories = Counter(a["category"] for a in of_kind(stream, "auction"))
    assert set(categories) == {10, 11, 12, 13, 14}
    assert all(500 < count < 700 for count in categories.values())


def test_channels_follow_the_flink_generator(stream: list[tuple[str, dict]]) -> None:
    # HOT_CHANNELS_RATIO 2: half the bids on the four hot channels (sd 0.0023), the rest
    # on channel-0..9999, each channel with one fixed URL.
    bids = of_kind(stream, "bid")
    hot = sum(b["channel"] in HOT_CHANNELS for b in bids) / len(bids)
    assert 0.49 < hot < 0.51
    urls: dict[str, set[str]] = {}
    for bid in bids:
        assert bid["channel"] in HOT_CHANNELS or re.fullmatch(r"channel-\d{1,4}", bid["channel"])
        assert re.fullmatch(
            r"https://www\.nexmark\.com/[a-z_]+/[a-z_]+/[a-z_]+/item\.htm\?query=1"
            r"(&channel_id=\d+)?",
            bid["url"],
        )
        urls.setdefault(bid["channel"], set()).add(bid["url"])
    assert all(len(u) == 1 for u in urls.values())
    # 9 in 10 non-hot channels carry a channel_id (sd ~0.004 over ~9000 channels seen).
    others = [next(iter(u)) for c, u in urls.items() if c not in HOT_CHANNELS]
    with_id = sum("&channel_id=" in u for u in others) / len(others)
    assert 0.87 < with_id < 0.93
