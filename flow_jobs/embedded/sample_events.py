"""Sample click events for the demo and the benchmark (tests generate their own)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from flow_jobs.embedded.producer import Record

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
            value = b'{"user_id": "u%d", "page": ' % user  # truncated: not JSON
        else:
            page = PAGES[rng.randrange(len(PAGES))]
            amount = rng.uniform(0.5, 120.0)
            value = (
                f'{{"user_id": "u{user}", "page": "{page}", "amount": {amount:.2f}, "ts": {ts}}}'
            ).encode()
        yield Record(value, partition=user % partitions, key=b"u%d" % user, timestamp_ms=ts)
