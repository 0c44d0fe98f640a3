"""Spec fingerprints (pure logic): which changes a checkpoint can resume under."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_jobs.spec import load_spec, parse_spec
from flow_jobs.spec.fingerprint import (
    changed_fields,
    comparable,
    earlier_fingerprint,
    fingerprint_fields,
    fingerprint_of,
)
from flow_jobs.spec.models import PipelineSpec
from tests.test_spec_rules import JOIN, PAYMENTS, VALID, edit


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


_DEDUP = '[[transform.dedup]]\nkeys = ["user_id"]\nwithin_ms = 1000\n\n[transform.window]'


def test_deduplication_is_fingerprinted_but_what_happens_to_a_duplicate_is_not() -> None:
    """A dedup is a stateful operator keyed by its keys, holding records by
    within_ms; on_duplicate only routes what it decided."""
    deduplicated, fields = _fingerprint(edit("[transform.window]", _DEDUP))
    assert deduplicated != BASE
    assert fields["transform.dedup.events.keys"] == ["user_id"]
    routed = edit("[transform.window]", _DEDUP.replace("1000", '1000\non_duplicate = "dlq"'))
    assert _fingerprint(routed)[0] == deduplicated
    wider = edit("[transform.window]", _DEDUP.replace("1000", "2000"))
    assert _fingerprint(wider)[0] not in (deduplicated, BASE)


def test_a_temporal_join_is_fingerprinted_but_its_retention_is_not() -> None:
    """Its keys and sides lay out the state; retention_ms only says when a version
    leaves it. A checkpoint from before the key has no temporal join field."""
    assert "transform.temporal_join" not in BASE_FIELDS
    spec = load_spec(Path(__file__).parent.parent / "pipelines/orders_with_rates.toml")
    fields = fingerprint_fields(spec)
    assert fields["transform.temporal_join.stream_keys"] == ["currency"]
    doc = spec.to_document()
    doc["transform"]["temporal_join"]["retention_ms"] = 3_600_000
    assert fingerprint_fields(PipelineSpec.model_validate(doc)) == fields
    doc["transform"]["temporal_join"]["version_keys"] = ["rate"]
    changed = changed_fields(fields, fingerprint_fields(PipelineSpec.model_validate(doc)))
    assert changed == ['transform.temporal_join.version_keys: ["currency"] -> ["rate"]']


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


# -- orders: what keeps the state's types but changes its meaning ------------------------

AGGREGATIONS = """
[[transform.window.aggregations]]
agg = "sum"
column = "amount"
as = "total"

[[transform.window.aggregations]]
agg = "max"
column = "amount"
as = "hi"

[[transform.window.aggregations]]
agg = "first"
column = "amount"
as = "opening"
"""
SUM, MAX, FIRST = (block.strip() for block in AGGREGATIONS.split("\n\n"))
ORDERED = edit(
    'group_by = ["user_id"]\n\n[[transform.window.aggregations]]\nagg = "count"\nas = "n"\n\n'
    '[[transform.window.aggregations]]\nagg = "sum"\ncolumn = "amount"\nas = "amount_sum"\n',
    'group_by = ["user_id", "region"]\n' + AGGREGATIONS,
    edit("amount DOUBLE", "region STRING, amount DOUBLE, price DOUBLE"),
)
ORDERED_FP, ORDERED_FIELDS = _fingerprint(ORDERED)
ORDER = "transform.window.aggregations.order"


def test_the_aggregations_order_is_a_field_of_its_own() -> None:
    assert ORDERED_FIELDS[ORDER] == ["total", "hi", "opening"]
    assert BASE_FIELDS[ORDER] == ["n", "amount_sum"]


@pytest.mark.parametrize(
    ("old", "new", "changes"),
    [
        # Swapped: the buffers (two DOUBLEs) keep their types, Spark would resume.
        (f"{SUM}\n\n{MAX}", f"{MAX}\n\n{SUM}",
         [f'{ORDER}: ["total", "hi", "opening"] -> ["hi", "total", "opening"]']),
        # Moved last; inserted in the middle; removed.
        (f"{SUM}\n\n{MAX}\n\n{FIRST}", f"{MAX}\n\n{FIRST}\n\n{SUM}",
         [f'{ORDER}: ["total", "hi", "opening"] -> ["hi", "opening", "total"]']),
        (f"{SUM}\n\n{MAX}", f'{SUM}\n\n[[transform.window.aggregations]]\nagg = "min"\n'
         f'column = "amount"\nas = "lo"\n\n{MAX}', [
             f'{ORDER}: ["total", "hi", "opening"] -> ["total", "lo", "hi", "opening"]',
             "transform.window.aggregations.lo.*",
         ]),
        (f"{MAX}\n\n{FIRST}", FIRST, [
            f'{ORDER}: ["total", "hi", "opening"] -> ["total", "opening"]',
            "transform.window.aggregations.hi.*",
        ]),
        # The aliases stay where they are, their aggregates change: per-alias keys.
        (f'{SUM}\n\n{MAX}', f"{SUM.replace('sum', 'max', 1)}\n\n{MAX.replace('max', 'sum', 1)}", [
            'transform.window.aggregations.hi.agg: "max" -> "sum"',
            'transform.window.aggregations.total.agg: "sum" -> "max"',
        ]),
        (FIRST, FIRST.replace('"first"', '"last"'),
         ['transform.window.aggregations.opening.agg: "first" -> "last"']),
        # Another column of the same type (DOUBLE): the same buffer type.
        (SUM, SUM.replace('"amount"', '"price"'),
         ['transform.window.aggregations.total.column: "amount" -> "price"']),
        # The group key's columns swap places in the state's key row.
        ('group_by = ["user_id", "region"]', 'group_by = ["region", "user_id"]',
         ['transform.window.group_by: ["user_id", "region"] -> ["region", "user_id"]']),
    ],
    ids=["swap", "move", "insert", "remove", "sum-max", "first-last", "column", "group_by"],
)  # fmt: skip
def test_a_change_the_state_s_types_cannot_show_is_refused_naming_it(
    old: str, new: str, changes: list[str]
) -> None:
    """``changes``: what the refusal names (``KEY.*``: every key of an added or removed
    aggregation, each from or to ``"<absent>"``)."""
    fingerprint, fields = _fingerprint(edit(old, new, ORDERED))
    assert fingerprint != ORDERED_FP
    named = changed_fields(ORDERED_FIELDS, fields)
    prefixes = tuple(c[:-1] for c in changes if c.endswith(".*"))
    assert sorted(c for c in named if not c.startswith(prefixes)) == sorted(
        c for c in changes if not c.endswith(".*")
    ), named
    for prefix in prefixes:
        assert f"{prefix}agg: " in "; ".join(named), named


def test_the_join_keys_order_is_in_their_values() -> None:
    """Both key lists reordered together pair the same columns, but the join's state key
    row holds them in the new order."""
    two = ('left_keys = ["user_id", "amount"]', 'right_keys = ["user_id", "paid"]')
    head = VALID.split("[transform.window]")[0]
    join = JOIN.replace('left_keys = ["user_id"]', two[0]).replace(
        'right_keys = ["user_id"]', two[1]
    )
    text = f'{head}{PAYMENTS}{join}\n[target]\nkind = "delta"\npath = "./data/joined"\n'
    before, fields = _fingerprint(text)
    swapped = text.replace(two[0], 'left_keys = ["amount", "user_id"]').replace(
        two[1], 'right_keys = ["paid", "user_id"]'
    )
    after, swapped_fields = _fingerprint(swapped)
    assert after != before
    assert changed_fields(fields, swapped_fields) == [
        'transform.join.left_keys: ["user_id", "amount"] -> ["amount", "user_id"]',
        'transform.join.right_keys: ["user_id", "paid"] -> ["paid", "user_id"]',
    ]


def test_the_order_of_sources_is_not_fingerprinted() -> None:
    """``[transform].sql`` (or the join's sides) places the sources in Spark's plan, not
    the order of ``[[sources]]`` (tests/test_state_store.py resumes a reorder)."""
    payments = PAYMENTS.replace("paid DOUBLE", "amount DOUBLE")  # the union's columns
    union = '[transform]\nsql = "SELECT * FROM events UNION ALL SELECT * FROM payments"\n\n'
    head, tail = VALID.split("[transform.window]")
    events = head[head.index("[[sources]]") :]
    first = f'name = "rules-check"\n\n{events}{payments}\n{union}[transform.window]{tail}'
    second = f'name = "rules-check"\n\n{payments}\n{events}{union}[transform.window]{tail}'
    assert [s.name for s in parse_spec(second).sources] == ["payments", "events"]
    assert _fingerprint(first) == _fingerprint(second)


# -- checkpoints registered before the order fields --------------------------------------


def test_an_earlier_fingerprint_is_the_current_fields_without_the_order() -> None:
    earlier = {k: v for k, v in ORDERED_FIELDS.items() if k != ORDER}  # what it stored
    assert earlier_fingerprint(ORDERED_FIELDS) == fingerprint_of(earlier) != ORDERED_FP
    # A reorder is invisible to it: the limitation of the upgrade (spec reference).
    _, swapped = _fingerprint(edit(f"{SUM}\n\n{MAX}", f"{MAX}\n\n{SUM}", ORDERED))
    assert earlier_fingerprint(swapped) == earlier_fingerprint(ORDERED_FIELDS)
    # Any other change is not.
    _, longer = _fingerprint(edit("duration_ms = 60000", "duration_ms = 1000", ORDERED))
    assert earlier_fingerprint(longer) != fingerprint_of(earlier)
    # Fields without aggregations (a join) have no order: the same fingerprint as before.
    assert earlier_fingerprint({"transform.window": None}) is None


def test_a_checkpoint_without_the_order_is_not_named_as_reordered() -> None:
    earlier = {k: v for k, v in ORDERED_FIELDS.items() if k != ORDER}
    _, fields = _fingerprint(edit("duration_ms = 60000", "duration_ms = 1000", ORDERED))
    assert changed_fields(earlier, comparable(earlier, fields)) == [
        "transform.window.duration_ms: 60000 -> 1000"
    ]
    assert comparable(ORDERED_FIELDS, fields) == fields


_TUMBLING = 'kind = "tumbling"\nduration_ms = 60000'


@pytest.mark.parametrize(
    ("window", "stored"),
    [
        (_TUMBLING, "4b1a7576a134e955"),
        ('kind = "hopping"\nduration_ms = 60000\nhop_ms = 20000', "5912f5488585f689"),
        ('kind = "session"\ngap_ms = 5000', "610824ac4b8c8ff6"),
        ('kind = "sliding"\nduration_ms = 60000', "f4f69f21ba070afa"),
        ('kind = "count_tumbling"\ncount = 5', "44a8a1c41d315b56"),
        ('kind = "count_hopping"\ncount = 5\nstep = 2', "3f31d17c0fe1cc6c"),
        ('kind = "count_sliding"\ncount = 5', "cf3a135a6b17c130"),
    ],
)
def test_every_kinds_fingerprint_is_the_one_its_checkpoints_hold(window: str, stored: str) -> None:
    """Fingerprints computed when one model held every kind's size keys (at 2684361):
    each family's model holds only its own now, and an upgrade must still resume the
    checkpoints those fingerprints guard."""
    assert _fingerprint(edit(_TUMBLING, window))[0] == stored
