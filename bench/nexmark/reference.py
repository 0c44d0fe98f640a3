"""Nexmark queries' outputs computed from their definitions, in plain Python, over the
bids the generator made: what ``make bench-nexmark`` and tests/test_nexmark_queries.py
check the pipelines' targets against.

Closed windows only: a window is closed once the watermark (the latest event time minus
the 4-second delay of Nexmark's ``WATERMARK``) reaches its end."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

LATENESS_MS = 4_000


def q0(bids: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], int]:
    """Pass through: every bid's (auction, bidder, price, dateTime, extra), counted."""
    return dict(
        Counter((b["auction"], b["bidder"], b["price"], b["dateTime"], b["extra"]) for b in bids)
    )


def q1(bids: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], int]:
    """Currency conversion: every bid with its price times 0.908 (exact decimals)."""
    rate = Decimal("0.908")
    return dict(
        Counter(
            (b["auction"], b["bidder"], rate * b["price"], b["dateTime"], b["extra"]) for b in bids
        )
    )


def q2(bids: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], int]:
    """Selection: (auction, price) of every bid on an auction whose id is a multiple of
    123."""
    return dict(Counter((b["auction"], b["price"]) for b in bids if b["auction"] % 123 == 0))


def q14(bids: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], int]:
    """Calculation: bids priced (x 0.908) strictly between 1,000,000 and 50,000,000, with
    the hour's class (8-18 day, 0-6 and 20-23 night, else other, in UTC) and the number
    of 'c' in extra."""
    rate, out = Decimal("0.908"), []
    for b in bids:
        price = rate * b["price"]
        if not 1_000_000 < price < 50_000_000:
            continue
        hour = b["dateTime"] // 3_600_000 % 24
        kind = (
            "dayTime"
            if 8 <= hour <= 18
            else "nightTime"
            if hour <= 6 or hour >= 20
            else ("otherTime")
        )
        out.append((b["auction"], b["bidder"], price, kind, b["dateTime"], b["extra"],
                    b["extra"].count("c")))  # fmt: skip
    return dict(Counter(out))


_CHANNEL_IDS = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}


def q21(bids: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], int]:
    """Add channel id: bids of a known channel (its id) or with a channel_id in the URL
    (that id); the others are left out."""
    out = []
    for b in bids:
        found = re.search(r"(&|^)channel_id=([^&]*)", b["url"])
        in_url = found.group(2) if found else None
        known = _CHANNEL_IDS.get(b["channel"].lower())
        if known is None and in_url is None:
            continue
        out.append((b["auction"], b["bidder"], b["price"], b["channel"], known or in_url))
    return dict(Counter(out))


def q22(bids: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], int]:
    """URL directories: each bid with the URL's '/'-separated parts 3, 4 and 5 (None past
    the end)."""

    def part(url: str, i: int) -> str | None:
        parts = url.split("/")
        return parts[i] if i < len(parts) else None

    out = [
        (
            b["auction"],
            b["bidder"],
            b["price"],
            b["channel"],
            *(part(b["url"], i) for i in (3, 4, 5)),
        )
        for b in bids
    ]
    return dict(Counter(out))


def q11(bids: Iterable[dict[str, Any]], watermark_ms: int) -> dict[tuple[int, int, int], int]:
    """User sessions: per bidder, each run of bids at most 10 s apart, as (start, last bid
    + 10 s, bidder) -> its bid count."""
    by_bidder: dict[int, list[int]] = defaultdict(list)
    for bid in bids:
        by_bidder[bid["bidder"]].append(bid["dateTime"])
    sessions: dict[tuple[int, int, int], int] = {}
    for bidder, times in by_bidder.items():
        times.sort()
        start = last = times[0]
        count = 0
        for t in [*times, None]:
            if t is not None and t <= last + 10_000:
                last, count = t, count + 1
                continue
            if last + 10_000 <= watermark_ms:
                sessions[(start, last + 10_000, bidder)] = count
            if t is not None:
                start = last = t
                count = 1
    return sessions


def q5(bids: Iterable[dict[str, Any]], watermark_ms: int) -> dict[tuple[int, int, int], int]:
    """Hot items: per 10-second window every 2 seconds, each auction with the most bids
    (ties all kept, as Nexmark's ``num >= maxn`` join keeps them), as (start, end,
    auction) -> its count."""
    counts: dict[tuple[int, int], Counter[int]] = defaultdict(Counter)
    for bid in bids:
        t = bid["dateTime"]
        for start in range(t - t % 2_000 - 8_000, t + 1, 2_000):  # the 5 windows holding t
            counts[(start, start + 10_000)][bid["auction"]] += 1
    out = {}
    for (start, end), per_auction in counts.items():
        if end <= watermark_ms:
            most = max(per_auction.values())
            for auction, n in per_auction.items():
                if n == most:
                    out[(start, end, auction)] = n
    return out


def q7(bids: Iterable[dict[str, Any]], watermark_ms: int) -> dict[tuple[Any, ...], int]:
    """Highest bid, as Beam's Query7: per 10-second tumbling window, every bid whose
    price is the window's highest, as (start, end, auction, bidder, price, dateTime,
    extra) -> how many such bids (identical in every column)."""
    windows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for bid in bids:
        windows[bid["dateTime"] - bid["dateTime"] % 10_000].append(bid)
    out: Counter[tuple[Any, ...]] = Counter()
    for start, members in windows.items():
        if start + 10_000 > watermark_ms:
            continue
        top = max(b["price"] for b in members)
        out.update(
            (start, start + 10_000, b["auction"], b["bidder"], b["price"], b["dateTime"],
             b["extra"])
            for b in members
            if b["price"] == top
        )  # fmt: skip
    return dict(out)


def watermark(bids: Iterable[dict[str, Any]]) -> int:
    return max(b["dateTime"] for b in bids) - LATENESS_MS


def q8(
    persons: Iterable[dict[str, Any]], auctions: Iterable[dict[str, Any]], watermark_ms: int
) -> set[tuple[int, str, int]]:
    """New users, as Nexmark's SQL reads: persons grouped by (id, name, 10-second
    window), auctions by (seller, window), the two joined on id = seller and the window;
    (id, name, window start) of each closed window."""
    people = {(p["id"], p["name"], p["dateTime"] - p["dateTime"] % 10_000) for p in persons}
    sellers = {(a["seller"], a["dateTime"] - a["dateTime"] % 10_000) for a in auctions}
    return {
        (pid, name, start)
        for pid, name, start in people
        if (pid, start) in sellers and start + 10_000 <= watermark_ms
    }


def watermark_of(*sides: Iterable[dict[str, Any]]) -> int:
    """The watermark of a pipeline over several sources: the lowest of theirs."""
    return min(max(e["dateTime"] for e in side) for side in sides) - LATENESS_MS
