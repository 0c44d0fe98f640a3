"""Profile the state-API window operator alone: ``python -m bench.profile_operator``.

Feeds ``WindowProcessor`` (sliding or count windows) the pandas frames Spark would,
through an in-memory stand-in for Spark's state handle, and prints cProfile's top
functions: the operator's own cost per row, without Spark's JVM <-> Python transfer.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from typing import Any

import numpy as np
import pandas as pd

from flow_jobs.aggregations.avg import Avg
from flow_jobs.aggregations.count import Count
from flow_jobs.aggregations.extremes import Extreme
from flow_jobs.aggregations.sum import Sum
from flow_jobs.kernels.frame import LANE, NULL_SUFFIX, POSITION, TIME, VALUE_PREFIX, ColumnKind
from flow_jobs.windows.count import Count as CountFamily
from flow_jobs.windows.processor import WindowOperatorPlan, WindowProcessor
from flow_jobs.windows.sliding import Sliding


class _State:
    def __init__(self) -> None:
        self.value: tuple | None = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self) -> tuple | None:
        return self.value

    def update(self, value: tuple) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class _Handle:
    """What WindowProcessor uses of Spark's StatefulProcessorHandle, in memory."""

    def __init__(self) -> None:
        self.states: dict[Any, _State] = {}
        self.key: Any = None
        self.timers: dict[Any, set[int]] = {}  # each group's own, as Spark holds them

    def getValueState(self, name: str, schema: Any) -> Any:
        handle = self

        class _Keyed:
            def __getattr__(self, attr: str) -> Any:
                return getattr(handle.states.setdefault(handle.key, _State()), attr)

        return _Keyed()

    def registerTimer(self, ms: int) -> None:
        self.timers.setdefault(self.key, set()).add(ms)

    def deleteTimer(self, ms: int) -> None:
        self.timers.get(self.key, set()).discard(ms)


class _Timers:
    def __init__(self, watermark: int) -> None:
        self.watermark = watermark

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark


class _Expired:
    """The timer that fired (Spark's ExpiredTimerInfo)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def getExpiryTimeInMs(self) -> int:
        return self.ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.profile_operator", description=__doc__)
    parser.add_argument("--kind", default="sliding", choices=["sliding", "count_tumbling"])
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--events-per-key", type=int, default=2_000)
    args = parser.parse_args(argv)

    count = args.kind == "count_tumbling"
    plan = WindowOperatorPlan(
        pipeline="profile",
        kind=args.kind,
        family=CountFamily(100, 100) if count else Sliding(60_000),
        emit="final",
        group_columns=("user_id",),
        columns=(ColumnKind("amount", "float"),),
        aggregators=(
            Count(None, ["n"]),
            Sum("amount", ["amount_sum"]),
            Avg("amount", ["amount_avg"]),
            Extreme("amount", ["amount_max"], largest=True),
        ),
        output_columns=(
            "window_start",
            "window_end",
            *(("window_index",) if count else ()),
            "user_id",
            "n",
            "amount_sum",
            "amount_avg",
            "amount_max",
        ),
    )
    processor = WindowProcessor(plan)
    handle = _Handle()
    processor.init(handle)
    rng = np.random.default_rng(1)
    n = args.events_per_key
    frames = {
        k: pd.DataFrame(
            {
                TIME: 1_700_000_000_000 + np.arange(n) * 1_000 + k,
                LANE: 0,
                POSITION: np.arange(n),
                VALUE_PREFIX + "amount": rng.uniform(0, 100, n),
                VALUE_PREFIX + "amount" + NULL_SUFFIX: False,
            }
        )
        for k in range(args.keys)
    }
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    windows = 0
    for k, pdf in frames.items():
        handle.key = k
        rows = processor.handleInputRows((f"u{k}",), iter([pdf]), _Timers(0))
        windows += sum(len(o) for o in rows)
    # the closing batch: every timer a group holds fires (count windows number their
    # events), and Spark deletes it once its handler returns
    for k in frames:
        handle.key = k
        for expiry in sorted(handle.timers.get(k, ())):
            out = processor.handleExpiredTimer((f"u{k}",), _Timers(2**62), _Expired(expiry))
            windows += sum(len(o) for o in out)
            handle.timers[k].discard(expiry)
    profile.disable()
    elapsed = time.perf_counter() - started
    rows = args.keys * n
    print(
        f"{args.kind}: {rows:,} rows, {windows:,} windows in {elapsed:.2f}s = "
        f"{rows / elapsed:,.0f} rows/s (under cProfile)"
    )
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
