"""The fair share of the CPU cores: torch's threads follow the cores other processes leave."""

from __future__ import annotations

import pytest
import torch

from clocktune.train import cpu_share
from clocktune.train.cpu_share import CpuSample, FairShare, FairShareCallback, other_busy_cores


def test_other_processes_load_is_the_machines_busy_time_less_this_processs_own():
    before = CpuSample(wall_s=100.0, machine_busy_s=500.0, own_s=50.0)
    after = CpuSample(wall_s=110.0, machine_busy_s=520.0, own_s=60.0)  # 20 busy seconds in 10, 10 of them ours
    assert other_busy_cores(before, after) == pytest.approx(1.0)
    assert other_busy_cores(after, after) == 0.0  # no time passed
    assert other_busy_cores(before, CpuSample(110.0, 505.0, 60.0)) == 0.0  # never negative


@pytest.mark.parametrize(("others", "threads"), [(0.0, 2), (0.3, 2), (0.6, 1), (1.0, 1), (1.4, 1), (3.0, 1)])
def test_a_core_counts_as_taken_once_other_processes_use_more_than_half_of_it(others, threads):
    assert FairShare(max_threads=2, cores=2).threads_for(others) == threads


def test_threads_never_exceed_what_torch_started_with_on_a_bigger_machine():
    share = FairShare(max_threads=4, cores=16)
    assert share.threads_for(0.0) == 4 and share.threads_for(13.0) == 3 and share.threads_for(20.0) == 1


@pytest.fixture
def fake_proc_stat(monkeypatch):
    """``/proc/stat`` and this process's CPU time, advanced by hand; torch's thread count restored afterwards."""
    state = {"wall": 0.0, "busy": 0.0, "own": 0.0}
    monkeypatch.setattr(cpu_share, "_read_sample", lambda: CpuSample(state["wall"], state["busy"], state["own"]))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield state
    torch.set_num_threads(threads)


def _advance(state: dict, seconds: float, own_cores: float, other_cores: float) -> None:
    state["wall"] += seconds
    state["own"] += seconds * own_cores
    state["busy"] += seconds * (own_cores + other_cores)


def test_training_gives_a_core_to_a_cpu_bound_neighbour_and_takes_it_back_when_it_stops(fake_proc_stat):
    share = FairShare(max_threads=2, cores=2)
    callback = FairShareCallback(share, every=2)
    state = type("State", (), {"global_step": 0})()
    steps = []
    for step, other_cores in enumerate([0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0], start=1):
        _advance(fake_proc_stat, 7.0, own_cores=share.threads * 0.95, other_cores=other_cores)
        state.global_step = step
        callback.on_step_end(None, state, None)
        steps.append(torch.get_num_threads())
    # Measured every two steps: the neighbour starts at step 3, is seen at step 4, leaves at 7, is gone at 8.
    assert steps == [2, 2, 2, 1, 1, 1, 1, 2]
    assert share.busiest_others == pytest.approx(1.0)


def test_without_proc_stat_nothing_changes(monkeypatch):
    monkeypatch.setattr(cpu_share, "_read_sample", lambda: None)
    share = FairShare(max_threads=2, cores=2)
    threads = torch.get_num_threads()
    assert share.adjust() == threads == torch.get_num_threads()
