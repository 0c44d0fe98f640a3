"""Profile the Kafka reader alone: ``python -m bench.profile_source [--events N]``.

cProfile of ``read_range`` over one partition of the embedded broker: where a row's
time goes before Spark sees it (fetching, building Arrow columns, checking errors).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from flow_jobs.kafka.options import KafkaSourceOptions
from flow_jobs.kafka.partitions import KafkaRange
from flow_jobs.kafka.read import read_range
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import produce
from flow_jobs_dev.sample_events import sample_clicks


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.profile_source", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        broker.create_topic("profile", partitions=1)
        events = sample_clicks(
            args.events, users=1_000, start_ms=1_700_000_000_000, step_ms=1, partitions=1
        )
        produce(broker.bootstrap_servers, "profile", events)
        options = KafkaSourceOptions(bootstrap_servers=broker.bootstrap_servers, topic="profile")
        list(read_range(options, KafkaRange("profile", 0, 0, min(100_000, args.events))))  # warm
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        rows = sum(
            b.num_rows for b in read_range(options, KafkaRange("profile", 0, 0, args.events))
        )
        profile.disable()
        elapsed = time.perf_counter() - started
    print(f"{rows:,} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s (under cProfile)")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(10)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
