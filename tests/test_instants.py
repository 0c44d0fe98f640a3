"""Instants as flow-jobs writes them: one ISO 8601 form (UTC, ``Z``) and exact epoch
milliseconds, whatever the instant's own zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from flow_jobs.instants import epoch_ms, from_epoch_ms, iso


def test_every_instant_is_written_in_utc_with_a_z() -> None:
    paris = timezone(timedelta(hours=1))
    assert iso(datetime(2026, 1, 1, 1, tzinfo=paris)) == "2026-01-01T00:00:00Z"
    assert iso(1_767_225_600_250) == "2026-01-01T00:00:00.250000Z"
    assert iso(1_767_225_600_250, "milliseconds") == "2026-01-01T00:00:00.250Z"
    # the year keeps four digits at the bottom of Spark's range
    assert iso(datetime(1, 1, 1, tzinfo=UTC), "microseconds") == "0001-01-01T00:00:00.000000Z"


def test_epoch_milliseconds_are_exact_at_the_ends_of_sparks_range() -> None:
    for ms in (-62_135_596_800_000, 0, 1, 253_402_300_799_999):
        assert epoch_ms(from_epoch_ms(ms)) == ms
    # a float's 53 bits would round this one
    assert epoch_ms(datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == 253_402_300_799_999


def test_a_naive_instant_is_local_time_as_spark_hands_it_out() -> None:
    naive = datetime(2026, 1, 1, 12)
    assert epoch_ms(naive) == epoch_ms(naive.astimezone(UTC))
    assert iso(naive) == iso(naive.astimezone(UTC))
