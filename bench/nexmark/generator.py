"""A deterministic, pure-Python Nexmark event generator.

It follows the generator rules of Apache Beam's Java Nexmark
(``sdks/java/testing/nexmark/.../sources/generator/``: ``GeneratorConfig``, ``Generator``
and ``model/{Person,Auction,Bid,Price,Long,Strings}Generator``), with the field names of
the Nexmark Flink SQL tables (``person``, ``auction``, ``bid``). The comments name the
Beam class each rule comes from. What differs from Beam, on purpose:

* randomness: Python's ``random.Random`` (Mersenne Twister), not ``java.util.Random``;
  like Beam, each event draws from a generator seeded by its own event number (mixed with
  ``GeneratorConfig.seed``), so event ``n`` depends only on the config and ``n``. Ids,
  kinds and times are therefore exactly Beam's; the random choices follow Beam's rules and
  distributions but not its values;
* one generator on one timeline (Beam's ``numEventGenerators = 1``), a constant rate (no
  SQUARE/SINE rate shape), no out-of-order groups (Beam's default ``outOfOrderGroupSize``
  of 1) and no wall-clock delays (``probDelayedEvent``: a property of emitting, not of
  the events);
* strings: person names and cities come from short lists of our own (the six states are
  Beam's, ``AZ CA ID OR WA WY``: Nexmark query 3 filters on ``OR``/``ID``/``CA``), and
  ``extra`` is a few letters (``GeneratorConfig.extra_chars``) rather than padding to
  Beam's average event sizes of 200/500/100 bytes;
* ``bid.channel`` and ``bid.url`` do not exist in Beam's ``Bid``: they follow the Nexmark
  Flink generator (``nexmark/nexmark``, ``BidGenerator``), made deterministic (there the
  URLs come from unseeded ``Random``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# -- Beam GeneratorConfig: first ids and the 1:3:46 event mix. -------------------------
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION  # 50

# -- Beam AuctionGenerator / PersonGenerator / BidGenerator constants. ------------------
NUM_CATEGORIES = 5  # AuctionGenerator
AUCTION_ID_LEAD = 10  # AuctionGenerator: not-yet-generated auction ids a bid may name
PERSON_ID_LEAD = 10  # PersonGenerator: not-yet-generated person ids a bid/auction may name
HOT_SELLER_RATIO = 100  # AuctionGenerator: a hot seller is the first of each 100 people
HOT_AUCTION_RATIO = 100  # BidGenerator: a hot auction is the first of each 100 auctions
HOT_BIDDER_RATIO = 100  # BidGenerator: a hot bidder is the second of each 100 people
MIN_STRING_LENGTH = 3  # StringsGenerator

# -- Nexmark Flink BidGenerator (channel and url; not in Beam's Bid). -------------------
HOT_CHANNELS_RATIO = 2
CHANNELS_NUMBER = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
URL_PREFIX = "https://www.nexmark.com/"

#: Beam's NexmarkUtils.BASE_TIME, 2015-07-15T00:00:00Z, in epoch milliseconds.
BEAM_BASE_TIME_MS = 1_436_918_400_000

# Beam's PersonGenerator states (query 3 filters on OR, ID and CA); the cities and names
# are our own, of the same shape ("First Last", a US city).
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Tucson",
    "Sacramento",
    "San Diego",
    "Fresno",
    "Nampa",
    "Eugene",
    "Salem",
    "Spokane",
    "Tacoma",
    "Casper",
)
FIRST_NAMES = ("Ada", "Ben", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jo", "Kim")
LAST_NAMES = ("Adler", "Brook", "Cole", "Dunn", "Ellis", "Frost", "Grant", "Hale", "Irwin")

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_SEED_STRIDE = 1 << 64  # event numbers stay below this, so (seed, n) -> seed key is 1:1

Row = dict[str, Any]


@dataclass(frozen=True)
class GeneratorConfig:
    """What the generator needs. Defaults are Beam's ``NexmarkConfiguration`` defaults
    (``firstEventRate`` 10 000/s, ``hotAuctionRatio`` 2, ``hotSellersRatio`` 4,
    ``hotBiddersRatio`` 4, ``numInFlightAuctions`` 100, ``numActivePeople`` 1000) and
    Beam's base time."""

    #: events per second (an int, as Beam's rate).
    rate: int = 10_000
    #: event time of event 0, epoch milliseconds.
    base_time_ms: int = BEAM_BASE_TIME_MS
    #: mixed into every event's random seed; 0 or more.
    seed: int = 0
    #: a bid is for the current hot auction with probability 1 - 1/hot_auction_ratio.
    hot_auction_ratio: int = 2
    #: an auction's seller is the current hot seller with probability 1 - 1/ratio.
    hot_sellers_ratio: int = 4
    #: a bid's bidder is the current hot bidder with probability 1 - 1/ratio.
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    #: length of every row's ``extra`` (Beam pads events to ~100-500 bytes instead).
    extra_chars: int = 3

    def __post_init__(self) -> None:
        for name in (
            "rate",
            "hot_auction_ratio",
            "hot_sellers_ratio",
            "hot_bidders_ratio",
            "num_in_flight_auctions",
            "num_active_people",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("base_time_ms", "seed", "extra_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if self.seed < 0 or self.extra_chars < 0:
            raise ValueError("seed and extra_chars must be >= 0")
        if self.inter_event_delay_us < 1:
            # Beam would give every event the same time; refuse rather than do that.
            raise ValueError(f"rate {self.rate}/s rounds to a 0 µs delay (max 2_000_000)")

    @property
    def inter_event_delay_us(self) -> int:
        """Beam's ``RateUnit.rateToPeriodUs``: 1e6/rate µs rounded half up to whole µs."""
        return (1_000_000 + self.rate // 2) // self.rate


def kind_of(n: int) -> str:
    """Beam's ``Generator.nextEvent``: event ``n`` is a person when n mod 50 < 1, an
    auction when n mod 50 < 4, a bid otherwise."""
    rem = n % PROPORTION_DENOMINATOR
    if rem < PERSON_PROPORTION:
        return "person"
    if rem < PERSON_PROPORTION + AUCTION_PROPORTION:
        return "auction"
    return "bid"


def event_time_ms(config: GeneratorConfig, n: int) -> int:
    """Beam's ``GeneratorConfig.timestampAndInterEventDelayUsForEvent`` for one rate:
    ``base + floor(n * delay_us / 1000)`` with ``delay_us`` = 1e6/rate rounded half up
    (exactly ``floor`` of base + n * 1e6/rate µs in ms when rate divides 1e6)."""
    return config.base_time_ms + (n * config.inter_event_delay_us) // 1000


def last_base0_person_id(n: int) -> int:
    """Beam's ``PersonGenerator.lastBase0PersonId``: the newest person id (from 0) at
    event ``n``; event ``n``'s own id when it is a person."""
    epoch, offset = divmod(n, PROPORTION_DENOMINATOR)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_base0_auction_id(n: int) -> int:
    """Beam's ``AuctionGenerator.lastBase0AuctionId``: the newest auction id (from 0) at
    event ``n``; event ``n``'s own id when it is an auction (-1 before any auction)."""
    epoch, offset = divmod(n, PROPORTION_DENOMINATOR)
    if offset < PERSON_PROPORTION:  # a person: the last auction of the previous epoch
        epoch -= 1
        offset = AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:  # a bid: this epoch's last
        offset = AUCTION_PROPORTION - 1
    else:  # an auction: this one
        offset -= PERSON_PROPORTION
    return epoch * AUCTION_PROPORTION + offset


def _next_base0_person_id(n: int, rng: random.Random, config: GeneratorConfig) -> int:
    # PersonGenerator.nextBase0PersonId: uniform over the active people (the newest
    # num_active_people) plus PERSON_ID_LEAD ids not generated yet.
    num_people = last_base0_person_id(n) + 1
    active = min(num_people, config.num_active_people)
    return num_people - active + rng.randrange(active + PERSON_ID_LEAD)


def _next_base0_auction_id(n: int, rng: random.Random, config: GeneratorConfig) -> int:
    # AuctionGenerator.nextBase0AuctionId: uniform over the last num_in_flight_auctions
    # auctions, the newest, and AUCTION_ID_LEAD ids not generated yet. (Beam's
    # LongGenerator.nextLong is nextInt(n) here; randrange is its uniform equivalent.)
    newest = last_base0_auction_id(n)
    oldest = max(newest - config.num_in_flight_auctions, 0)
    return oldest + rng.randrange(newest - oldest + 1 + AUCTION_ID_LEAD)


def _next_price(rng: random.Random) -> int:
    # PriceGenerator.nextPrice: Math.round(10^(u*6) * 100), u in [0, 1): log-uniform over
    # [100, 1e8]. Java's Math.round is floor(x + 0.5), not Python's half-to-even round.
    return math.floor(10.0 ** (rng.random() * 6.0) * 100.0 + 0.5)


def _next_string(rng: random.Random, max_length: int, sep: str = " ") -> str:
    # StringsGenerator.nextString: 3..max_length-1 characters, each a separator with
    # probability 1/13 else a lowercase letter; trimmed (only spaces are trimmed).
    length = MIN_STRING_LENGTH + rng.randrange(max_length - MIN_STRING_LENGTH)
    chars = [sep if rng.randrange(13) == 0 else rng.choice(_LETTERS) for _ in range(length)]
    return "".join(chars).strip()


def _extra(rng: random.Random, config: GeneratorConfig) -> str:
    return "".join(rng.choice(_LETTERS) for _ in range(config.extra_chars))


def _auction_length_ms(n: int, timestamp: int, rng: random.Random, config: GeneratorConfig) -> int:
    # AuctionGenerator.nextAuctionLengthMs: the horizon is the time until the auction
    # num_in_flight_auctions ahead is due; the length is uniform in [1, 2 * horizon].
    events_ahead = (config.num_in_flight_auctions * PROPORTION_DENOMINATOR) // AUCTION_PROPORTION
    horizon_ms = event_time_ms(config, n + events_ahead) - timestamp
    return 1 + rng.randrange(max(horizon_ms * 2, 1))


def _java_reverse_abs(value: int) -> int:
    # Math.abs(Integer.reverse(value)) for 0 <= value < 2**31 (Java keeps abs(MIN_VALUE)
    # negative, which only channel 1 would reach; we give its positive value).
    reversed_bits = int(f"{value:032b}"[::-1], 2)
    return abs(reversed_bits - (1 << 32) if reversed_bits >= 1 << 31 else reversed_bits)


def _base_url(rng: random.Random) -> str:
    # Nexmark Flink BidGenerator.getBaseUrl: three short path segments ('_' separators).
    parts = "/".join(_next_string(rng, 5, "_") for _ in range(3))
    return f"{URL_PREFIX}{parts}/item.htm?query=1"


@lru_cache(maxsize=4 * len(HOT_CHANNELS))
def _hot_url(seed: int, index: int) -> str:
    return _base_url(random.Random(f"nexmark-hot-url/{seed}/{index}"))


@lru_cache(maxsize=2 * CHANNELS_NUMBER)
def _channel_url(seed: int, channel: int) -> str:
    # Nexmark Flink BidGenerator.getNextChannelAndurl: one fixed URL per channel, with
    # "&channel_id=<abs(reverse(channel))>" on 9 channels in 10.
    rng = random.Random(f"nexmark-channel-url/{seed}/{channel}")
    url = _base_url(rng)
    if rng.randrange(10) > 0:
        url += f"&channel_id={_java_reverse_abs(channel)}"
    return url


def _person(n: int, timestamp: int, rng: random.Random, config: GeneratorConfig) -> Row:
    # PersonGenerator.nextPerson; draw order as Beam's.
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    email = f"{_next_string(rng, 7)}@{_next_string(rng, 5)}.com"
    credit_card = " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4))
    city = rng.choice(US_CITIES)
    state = rng.choice(US_STATES)
    return {
        "id": last_base0_person_id(n) + FIRST_PERSON_ID,
        "name": name,
        "emailAddress": email,
        "creditCard": credit_card,
        "city": city,
        "state": state,
        "dateTime": timestamp,
        "extra": _extra(rng, config),
    }


def _auction(n: int, timestamp: int, rng: random.Random, config: GeneratorConfig) -> Row:
    # AuctionGenerator.nextAuction; draw order as Beam's.
    if rng.randrange(config.hot_sellers_ratio) > 0:
        # P = 1 - 1/hot_sellers_ratio: the first person of the newest block of 100.
        seller = (last_base0_person_id(n) // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
    else:
        seller = _next_base0_person_id(n, rng, config)
    category = FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES)
    initial_bid = _next_price(rng)
    expires = timestamp + _auction_length_ms(n, timestamp, rng, config)
    item_name = _next_string(rng, 20)
    description = _next_string(rng, 100)
    reserve = initial_bid + _next_price(rng)
    return {
        "id": last_base0_auction_id(n) + FIRST_AUCTION_ID,
        "itemName": item_name,
        "description": description,
        "initialBid": initial_bid,
        "reserve": reserve,
        "dateTime": timestamp,
        "expires": expires,
        "seller": seller + FIRST_PERSON_ID,
        "category": category,
        "extra": _extra(rng, config),
    }


def _bid(n: int, timestamp: int, rng: random.Random, config: GeneratorConfig) -> Row:
    # BidGenerator.nextBid; draw order as Beam's, then the Flink generator's channel.
    if rng.randrange(config.hot_auction_ratio) > 0:
        # P = 1 - 1/hot_auction_ratio: the first auction of the newest block of 100.
        auction = (last_base0_auction_id(n) // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
    else:
        auction = _next_base0_auction_id(n, rng, config)
    if rng.randrange(config.hot_bidders_ratio) > 0:
        # P = 1 - 1/hot_bidders_ratio: the second person of the newest block of 100 (so
        # hot bidders and hot sellers differ).
        bidder = (last_base0_person_id(n) // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
    else:
        bidder = _next_base0_person_id(n, rng, config)
    price = _next_price(rng)
    if rng.randrange(HOT_CHANNELS_RATIO) > 0:
        index = rng.randrange(len(HOT_CHANNELS))
        channel, url = HOT_CHANNELS[index], _hot_url(config.seed, index)
    else:
        number = rng.randrange(CHANNELS_NUMBER)
        channel, url = f"channel-{number}", _channel_url(config.seed, number)
    return {
        # FIRST_PERSON_ID is added once, as Beam does (the Flink generator adds it twice).
        "auction": auction + FIRST_AUCTION_ID,
        "bidder": bidder + FIRST_PERSON_ID,
        "price": price,
        "channel": channel,
        "url": url,
        "dateTime": timestamp,
        "extra": _extra(rng, config),
    }


_BUILDERS = {"person": _person, "auction": _auction, "bid": _bid}


def _make(config: GeneratorConfig, n: int, rng: random.Random) -> tuple[str, Row]:
    # Generator.nextEvent: seed the event's randomness with its number (Beam: the event
    # id, which is the event number for one generator starting at id 0).
    rng.seed(config.seed * _SEED_STRIDE + n)
    kind = kind_of(n)
    return kind, _BUILDERS[kind](n, event_time_ms(config, n), rng, config)


def event(config: GeneratorConfig, n: int) -> tuple[str, Row]:
    """Event number ``n`` (from 0) alone: the same as ``events``'s ``n``-th."""
    if n < 0 or n >= _SEED_STRIDE:
        raise ValueError(f"event number out of range: {n}")
    return _make(config, n, random.Random())


def events(config: GeneratorConfig, count: int, *, start: int = 0) -> Iterator[tuple[str, Row]]:
    """``count`` events in event order, from event number ``start``: ``(kind, row)`` with
    kind "person", "auction" or "bid". ``events(c, k, start=s)`` is ``events(c, s + k)``
    without its first ``s``."""
    if count < 0 or start < 0 or start + count > _SEED_STRIDE:
        raise ValueError(f"bad range: start={start}, count={count}")
    rng = random.Random()
    for n in range(start, start + count):
        yield _make(config, n, rng)
