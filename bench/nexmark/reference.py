"""Nexmark queries' outputs computed from their definitions, in plain Python, over the
bids the generator made: what ``make bench-nexmark`` and tests/test_nexmark_queries.py
check the pipelines' targets against.

Closed windows only: a window is closed once the watermark (the latest event time minus
the 4-second delay of Nexmark's ``WATERMARK``) reaches its end."""

from __future__ import annotations

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
