"""scripts/bench_rollout_groups.py's bookkeeping: what a group holds against the greedy play of its task."""

import math

import pytest

from tests.script_module import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_rollout_groups.py")


def test_a_failed_task_counts_as_signal_only_where_its_group_holds_a_success(bench):
    greedy = [False, False, True, True]
    groups = [[False, False], [False, True], [True, True], [True, False]]
    figures = bench.group_outcomes(greedy, groups)
    assert figures["failed"] == 2 and figures["completed"] == 2
    assert figures["success_where_greedy_failed"] == 0.5
    assert figures["failure_where_greedy_completed"] == 0.5
    assert figures["mixed"] == 0.5
    assert figures["sampled_success"] == 0.5


def test_without_failed_tasks_their_share_is_not_a_number_and_a_missing_group_is_refused(bench):
    figures = bench.group_outcomes([True], [[True, True]])
    assert math.isnan(figures["success_where_greedy_failed"]) and figures["failure_where_greedy_completed"] == 0.0
    with pytest.raises(ValueError, match="one group per task"):
        bench.group_outcomes([True, False], [[True]])
