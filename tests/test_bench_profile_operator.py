"""``python -m bench.profile_operator`` runs on the operator as it is: it drifted from
``WindowOperatorPlan`` once (the house's window families) and nothing noticed."""

from __future__ import annotations

import pytest

from bench import profile_operator


@pytest.mark.parametrize(
    ("kind", "windows"),
    [
        # one window per distinct event time of a group (every event's time is its own)
        ("sliding", 3 * 250),
        # windows of 100 events every 100: two complete ones per group of 250 events
        ("count_tumbling", 3 * 2),
    ],
)
def test_the_operator_profile_runs_and_counts_the_windows(
    kind: str, windows: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert profile_operator.main(["--kind", kind, "--keys", "3", "--events-per-key", "250"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{kind}: 750 rows, {windows:,} windows in "), first
