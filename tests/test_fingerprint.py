"""Spec fingerprints (pure logic): which changes a checkpoint can resume under."""

from __future__ import annotations

import pytest

from flow_jobs.spec import parse_spec
from flow_jobs.spec.fingerprint import changed_fields, fingerprint_fields, fingerprint_of
from tests.test_spec_rules import VALID, edit


def _fingerprint(text: str) -> tuple[str, dict]:
    fields = fingerprint_fields(parse_spec(text))
    return fingerprint_of(fields), fields


BASE, BASE_FIELDS = _fingerprint(VALID)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('path = "./data/rules"', 'path = "./data/elsewhere"'),
        ('bootstrap_servers = "127.0.0.1:9092"', 'bootstrap_servers = "kafka:9093"'),
        ('format = "json"', 'format = "json"\nmax_offsets_per_trigger = 10'),
        ('format = "json"', 'format = "json"\nstarting_offsets = "latest"'),
        (
            'format = "json"',
            'format = "json"\nstarting_offsets = { timestamp = "2026-11-01T10:00:00Z" }',
        ),
        # Arrow or from_json: the same rows (tests/test_json_decode.py)
        ('format = "json"', 'format = "json"\ndecoder = "from_json"'),
        ("lateness_ms = 5000", "lateness_ms = 5000\nmax_groups_per_window = 10"),
        ("lateness_ms = 5000", "lateness_ms = 5000\nmax_event_time_skew_ms = 10"),
        ('path = "./data/rules"', 'path = "./data/rules"\n\n[runtime]\ntrigger_interval_ms = 5'),
        ('path = "./data/rules"', 'path = "./data/rules"\n\n[spark]\nmaster = "spark://x:7077"'),
        # writing a default out explicitly is no change
        ('event_time_column = "ts"', 'event_time_column = "ts"\nemit = "final"'),
    ],
)
def test_safe_changes_keep_the_fingerprint(old: str, new: str) -> None:
    assert _fingerprint(edit(old, new))[0] == BASE


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("duration_ms = 60000", "duration_ms = 30000", "transform.window.duration_ms"),
        ("kind = \"tumbling\"\nduration_ms = 60000", "kind = \"session\"\ngap_ms = 1000",
         "transform.window.kind"),
        ('group_by = ["user_id"]', "group_by = []", "transform.window.group_by"),
        ("lateness_ms = 5000", "lateness_ms = 1", "transform.window.lateness_ms"),
        ('event_time_column = "ts"', "", "transform.window.event_time_column"),
        ('as = "amount_sum"', 'as = "total"', "transform.window.aggregations.total.as"),
        ('agg = "sum"', 'agg = "max"', "transform.window.aggregations.amount_sum.agg"),
        ('topic = "events"', 'topic = "events2"', "sources.events.topic"),
        ("amount DOUBLE", "amount BIGINT", "sources.events.schema"),
        ("[transform.window]", '[transform]\nsql = "SELECT * FROM events"\n\n[transform.window]',
         "transform.sql"),
    ],
)  # fmt: skip
def test_state_changes_alter_the_fingerprint_and_are_named(old: str, new: str, key: str) -> None:
    fingerprint, fields = _fingerprint(edit(old, new))
    assert fingerprint != BASE
    changes = changed_fields(BASE_FIELDS, fields)
    assert any(change.startswith(f"{key}: ") for change in changes), changes


def test_no_secret_in_the_fingerprinted_fields() -> None:
    text = edit(
        'format = "json"', 'format = "json"\nclient_config = { "sasl.password" = "s3cr3t" }'
    )
    assert "s3cr3t" not in repr(fingerprint_fields(parse_spec(text)))


def test_keys_added_later_change_nothing_at_their_default() -> None:
    """Checkpoints started before a key existed resume under its default; setting it
    is a change like any other."""
    assert "transform.window.revision_column" not in BASE_FIELDS
    assert not any(k.endswith(".decoder") for k in BASE_FIELDS)  # added with issue 12
    assert "transform.window.dead_letter_topic" not in BASE_FIELDS
    reopen = 'lateness_ms = 5000\nlate_data = "reopen"\nallowed_lateness_ms = 1000'
    _, fields = _fingerprint(edit("lateness_ms = 5000", reopen + '\nrevision_column = "rev"'))
    assert 'transform.window.revision_column: "<absent>" -> "rev"' in "; ".join(
        changed_fields(BASE_FIELDS, fields)
    )


def test_a_window_that_moved_to_the_state_api_needs_a_new_checkpoint() -> None:
    """An exact count_distinct put tumbling windows on the state API: a checkpoint of the
    native aggregation (fingerprinted without the key) is refused, naming it."""
    exact = 'agg = "count_distinct"\ncolumn = "amount"\nmode = "exact"\n'
    exact += "max_distinct_values_per_group = 10"
    before = fingerprint_fields(parse_spec(edit('agg = "sum"\ncolumn = "amount"', exact)))
    assert before.pop("transform.window.state_api") is True  # what an older version stored
    _, after = _fingerprint(edit('agg = "sum"\ncolumn = "amount"', exact))
    assert 'transform.window.state_api: "<absent>" -> true' in changed_fields(before, after)
    assert "transform.window.state_api" not in BASE_FIELDS
