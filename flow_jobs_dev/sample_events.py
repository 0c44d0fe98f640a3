"""Sample click events for the demo and the benchmark (tests generate their own)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from flow_jobs_dev.producer import Record

PAGES = ("/home", "/search", "/product", "/cart", "/checkout")


def sample_clicks(
    n: int,
    *,
    users: int,
    start_ms: int,
    step_ms: int,
    partitions: int,
    seed: int = 1,
    malformed_every: int | None = None,
) -> Iterator[Record]:
    """``n`` click events, ``step_ms`` apart in event time, keyed and partitioned by user.

    Payloads are formatted directly (not ``json.dumps``) so the benchmark can produce
    millions quickly; every ``malformed_every``-th record is deliberately broken JSON.
    """
    rng = random.Random(seed)
    for i in range(n):
        user = rng.randrange(users)
        ts = start_ms + i * step_ms
        if malformed_every and i % malformed_every == malformed_every - 1:
            value = f'{{"user_id": "u{user}", "page": '  # truncated: not JSON
        else:
            page = PAGES[rng.randrange(len(PAGES))]
            amount = rng.uniform(0.5, 120.0)
            value = (
                f'{{"user_id": "u{user}", "page": "{page}", "amount": {amount:.2f}, "ts": {ts}}}'
            )
        yield _record(value, f"u{user}", user % partitions, ts)


def sample_orders(
    n: int, *, start_ms: int, step_ms: int, partitions: int, customers: int = 1_000
) -> Iterator[Record]:
    """``n`` orders ``o<i>``, ``step_ms`` apart, keyed by order id."""
    for i in range(n):
        ts = start_ms + i * step_ms
        value = (
            f'{{"order_id": "o{i}", "customer": "c{i % customers}", '
            f'"amount": {(i % 500) + 0.5}, "ts": {ts}}}'
        )
        yield _record(value, f"o{i}", i % partitions, ts)


def sample_payments(
    n: int, *, start_ms: int, step_ms: int, partitions: int, seed: int = 2
) -> Iterator[Record]:
    """Payments for 9 orders in 10, 0-30 s after them, in payment-time order (within
    the second); the tenth pays nothing."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        if i % 10 == 9:
            continue
        ts = start_ms + i * step_ms + rng.randrange(0, 30_000)
        rows.append((ts, i))
    rows.sort(key=lambda r: r[0] // 1_000)
    for ts, i in rows:
        value = (
            f'{{"payment_id": "p{i}", "order_id": "o{i}", "paid": {(i % 500) + 0.5}, "ts": {ts}}}'
        )
        yield _record(value, f"o{i}", i % partitions, ts)


def _record(value: str, key: str, partition: int, timestamp_ms: int) -> Record:
    return Record(value.encode(), partition, key.encode(), timestamp_ms)


def sample_plans(
    span_ms: int, *, start_ms: int, every_ms: int, partitions: int, customers: int = 1_000
) -> Iterator[Record]:
    """Each customer's plan (the versions of a temporal join), one new version per
    customer every ``every_ms`` from ``start_ms - every_ms`` to ``start_ms + span_ms``,
    in time order, keyed by customer."""
    plans = ("free", "basic", "pro")
    for step, t0 in enumerate(range(start_ms - every_ms, start_ms + span_ms + 1, every_ms)):
        for c in range(customers):
            ts = t0 + c * every_ms // customers
            plan = plans[(c + step) % len(plans)]
            value = (
                f'{{"customer": "c{c}", "plan": "{plan}", '
                f'"discount": {((c + step) % 7) / 20}, "ts": {ts}}}'
            )
            yield _record(value, f"c{c}", c % partitions, ts)
