"""Equal-time events keep the order they were scheduled in, so a session's log depends on its timeline alone: not on
the number of concurrent sessions, and not on the clock's heap."""

import asyncio
import random
import time

import pytest

from clocktune.runtime.play import run_policy
from clocktune.runtime.scripted import SCRIPTED_POLICIES, ScriptedPolicy
from clocktune.runtime.session import SessionConfig
from clocktune.runtime.timer_order import OrderedEventLoop
from clocktune.runtime.virtual_clock import run_virtual
from clocktune.timeline.validate import validate_timeline
from data_gen.backends import make_backend
from data_gen.config import GeneratorConfig
from data_gen.dialogues import select_domains
from data_gen.generate import generate_dialogue


def _schedule(loop, times):
    fired = []
    for index, t in enumerate(times):
        loop.call_at(t, fired.append, (t, index))
    return fired


def _in_scheduling_order_within_each_time(fired, times):
    expected: dict[float, list[int]] = {}
    for index, t in enumerate(times):
        expected.setdefault(t, []).append(index)
    got: dict[float, list[int]] = {}
    for t, index in fired:
        got.setdefault(t, []).append(index)
    return got == expected and [t for t, _ in fired] == sorted(times)


def test_ten_thousand_timers_at_a_hundred_times_fire_in_scheduling_order_on_the_virtual_clock():
    rng = random.Random(0)
    times = [rng.randrange(100) * 0.25 for _ in range(10_000)]

    async def main():
        fired = _schedule(asyncio.get_running_loop(), times)
        await asyncio.sleep(30)
        return fired

    fired = run_virtual(main())
    assert len(fired) == 10_000 and _in_scheduling_order_within_each_time(fired, times)


def test_timers_at_equal_times_fire_in_scheduling_order_on_the_wall_clock_loop():
    rng = random.Random(1)
    loop = OrderedEventLoop()
    try:
        start = loop.time() + 0.05
        times = [start + rng.randrange(5) * 0.01 for _ in range(2_000)]
        fired = _schedule(loop, times)
        loop.run_until_complete(asyncio.sleep(max(times) - loop.time() + 0.05))
    finally:
        loop.close()
    assert len(fired) == 2_000 and _in_scheduling_order_within_each_time(fired, times)


@pytest.fixture(scope="module")
def five_thousand():
    config = GeneratorConfig()
    domains = select_domains(config)
    return [generate_dialogue(i, 11, config, domains) for i in range(5_000)]


def test_every_session_log_of_five_thousand_dialogues_under_every_scripted_policy_is_valid(five_thousand):
    started = time.perf_counter()
    for name in SCRIPTED_POLICIES:
        run = run_policy(name, five_thousand, lambda t, n=name: ScriptedPolicy(t, n), make_backend, SessionConfig())
        issues = [(log.timeline.id, issue) for log in run.logs for issue in validate_timeline(log.timeline)]
        assert issues == [], f"{name}: {len(issues)} issues, first {issues[:3]}"
    assert time.perf_counter() - started < 600


def test_eval_writes_the_same_session_logs_one_session_at_a_time_and_all_at_once(tmp_path, five_thousand):
    from clocktune.cli import main
    from clocktune.timeline.io import write_timelines

    data = tmp_path / "data.jsonl"
    write_timelines(data, five_thousand[:2_000])
    for out, extra in (("one", ["--concurrency", "1"]), ("all", [])):
        argv = ["eval", "--data", str(data), "--out", str(tmp_path / out), "--session-logs", *extra]
        assert main(argv) == 0
    for name in ("sessions_speculative.jsonl", "sessions_sync.jsonl", "sessions_oracle.jsonl"):
        one, everything = (tmp_path / "one" / name).read_bytes(), (tmp_path / "all" / name).read_bytes()
        assert one == everything, name
    assert (tmp_path / "one" / "results.jsonl").read_bytes() == (tmp_path / "all" / "results.jsonl").read_bytes()


def test_a_delay_halfway_between_two_milliseconds_lands_on_the_same_step_at_any_loop_time():
    async def wait_from(start: float, delay: float) -> float:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(start)
        begun = loop.time()
        await asyncio.sleep(delay)
        return round(loop.time() - begun, 6)

    delays = [0.0125, 0.0005, 0.1235, 7.3415]
    for delay in delays:
        waited = {run_virtual(wait_from(start, delay)) for start in (0.0, 0.001, 3.7, 1234.567, 98765.432)}
        assert len(waited) == 1 and round(waited.pop() * 1000, 6).is_integer(), delay


def test_every_virtual_run_starts_at_time_zero_with_no_timer_left_from_the_run_before():
    fired = []

    async def leave_work_behind() -> float:
        loop = asyncio.get_running_loop()
        loop.call_later(5.0, fired.append, "timer")
        asyncio.ensure_future(asyncio.sleep(30.0))  # a task still pending when the run ends
        await asyncio.sleep(1.5)
        return loop.time()

    async def look() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(10.0)  # long past the first run's timer
        return start, len(asyncio.all_tasks(loop))

    assert run_virtual(leave_work_behind()) == 1.5
    assert run_virtual(look()) == (0.0, 1)  # only this run's own task
    assert fired == []


def test_a_virtual_run_that_raises_leaves_the_next_one_a_clean_loop():
    async def fail() -> None:
        asyncio.get_running_loop().call_later(1.0, pytest.fail, "a timer of the failed run fired")
        await asyncio.sleep(0.5)
        raise RuntimeError("boom")

    async def sleep_past() -> float:
        await asyncio.sleep(2.0)
        return asyncio.get_running_loop().time()

    with pytest.raises(RuntimeError, match="boom"):
        run_virtual(fail())
    assert run_virtual(sleep_past()) == 2.0


def test_a_charge_jumps_the_clock_when_nothing_is_due_and_sleeps_when_a_callback_or_timer_falls_inside_it():
    from clocktune.runtime.clocks import VirtualClock

    clock, seen = VirtualClock(), []

    async def main() -> list:
        loop = asyncio.get_running_loop()
        assert loop.fast_forward(0.25) and loop.time() == 0.25  # idle: the clock moves, no pass of the loop
        loop.call_at(1.0, seen.append, "timer at 1.0")
        await clock.charge(0.5)
        seen.append(("charged to", loop.time()))
        loop.call_soon(seen.append, "ready callback")
        await clock.charge(0.1)  # a ready callback runs first: the charge sleeps
        seen.append(("charged to", loop.time()))
        await clock.charge(0.15)  # ends exactly when the timer is due, which fires first, as it would for a sleep
        seen.append(("charged to", loop.time()))
        await clock.charge(2.0)
        return [*seen, ("charged to", loop.time())]

    assert run_virtual(main()) == [
        ("charged to", 0.75),
        "ready callback",
        ("charged to", 0.85),
        "timer at 1.0",
        ("charged to", 1.0),
        ("charged to", 3.0),
    ]


def test_generated_timelines_are_the_same_whether_charges_jump_the_clock_or_sleep(monkeypatch):
    from clocktune.runtime.virtual_clock import VirtualClockLoop
    from clocktune.timeline.io import timeline_to_json

    def generate() -> list[str]:
        lines = []
        for teacher in ("speculative", "sync"):
            config = GeneratorConfig(teacher=teacher)
            lines += [timeline_to_json(generate_dialogue(i, 3, config)) for i in range(200)]
        return lines

    moved, fast_forward = [], VirtualClockLoop.fast_forward

    def counted(loop, seconds: float) -> bool:
        moved.append(fast_forward(loop, seconds))
        return moved[-1]

    monkeypatch.setattr(VirtualClockLoop, "fast_forward", counted)
    jumped = generate()
    assert moved.count(True) > 0.9 * len(moved) > 1000  # the jumps did happen, for nearly every charge
    monkeypatch.setattr(VirtualClockLoop, "fast_forward", lambda self, seconds: False)
    assert generate() == jumped
