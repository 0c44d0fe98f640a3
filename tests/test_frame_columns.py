"""The plan's one error for a column a spec names that its frame lacks."""

from __future__ import annotations

import pytest

from flow_jobs.errors import PlanError
from flow_jobs.plan.frame_columns import require_column

COLUMNS = ["sensor", "temp", "_kafka", "__flow_event_time"]


def test_a_missing_column_names_the_key_where_and_the_columns_a_spec_may_name() -> None:
    with pytest.raises(PlanError) as refused:
        require_column(COLUMNS, "transform.window.group_by[0]", "site", "the window's input")
    assert str(refused.value) == (
        "transform.window.group_by[0]: 'site' is not a column of the window's input "
        "(columns: sensor, temp)"
    )


def test_the_plans_own_columns_are_not_the_specs() -> None:
    with pytest.raises(PlanError, match="'__flow_event_time' is not a column of source 'r'"):
        require_column(COLUMNS, "k", "__flow_event_time", "source 'r'", "; select it")
    require_column(COLUMNS, "k", "temp", "source 'r'")
    require_column(COLUMNS, "k", "_kafka", "source 'r'")  # the record, where a spec names it
