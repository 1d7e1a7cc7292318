"""The virtual clock and the tool executor's call graph: dependencies, commit, modify, cancel, failures."""

import asyncio
import time

import pytest

from clocktune.runtime.executor import ToolExecutor
from clocktune.runtime.virtual_clock import run_virtual
from clocktune.timeline.events import LatencyModel, ToolSchema
from clocktune.tools import ToolError

# Virtual clock ------------------------------------------------------------------------------------------------


def test_virtual_clock_jumps_to_timers_in_order():
    async def main():
        loop = asyncio.get_running_loop()
        seen = []

        async def sleeper(delay):
            await asyncio.sleep(delay)
            seen.append((delay, loop.time()))

        await asyncio.gather(*(sleeper(d) for d in (30.0, 10.0, 20.0)))
        return seen

    started = time.perf_counter()
    seen = run_virtual(main())
    assert seen == [(10.0, 10.0), (20.0, 20.0), (30.0, 30.0)]
    assert time.perf_counter() - started < 1.0


# Executor -----------------------------------------------------------------------------------------------------


class _Counter:
    """A backend that records the order calls execute in; ``fail`` raises a ToolError."""

    sequential = False

    def __init__(self):
        self.log = []

    def execute(self, name, arguments):
        if name == "fail":
            raise ToolError("refused")
        self.log.append((name, arguments))
        return {"n": len(self.log), "echo": arguments}

    def state(self):
        return {"log": self.log}


def _tools(latency=1.0):
    model = LatencyModel(median_s=latency, sigma=0.0, tail_prob=0.0)
    schema = {"type": "object", "properties": {}}
    return [
        ToolSchema("read", "", schema, False, model),
        ToolSchema("write", "", schema, True, model),
        ToolSchema("fail", "", schema, False, model),
    ]


def _run_executor(script, latency=1.0, **options):
    """Runs ``script(executor)`` (a coroutine function) and returns (results as (t, call, content, error), backend)."""
    backend = _Counter()
    delivered = []

    async def main():
        loop = asyncio.get_running_loop()
        executor = ToolExecutor(
            _tools(latency),
            backend,
            0,
            lambda call_id, content, error: delivered.append((loop.time(), call_id, content, error)),
            **options,
        )
        await script(executor)
        await asyncio.sleep(100)
        return executor

    executor = run_virtual(main())
    return delivered, backend, executor


def test_reads_run_at_once_writes_wait_for_commit_and_refs_wait_for_inputs():
    async def script(executor):
        executor.call("c1", "read", {"q": 1})
        executor.call("c2", "write", {"x": {"$ref": "c1.n"}})
        executor.call("c3", "read", {"y": {"$ref": "c1"}})
        await asyncio.sleep(5)
        executor.commit()

    delivered, backend, _ = _run_executor(script)
    times = {call: t for t, call, _, _ in delivered}
    assert times["c1"] == pytest.approx(1.0)
    assert times["c3"] == pytest.approx(2.0)  # waited for c1, then ran
    assert times["c2"] == pytest.approx(6.0)  # held until the commit at 5 s
    assert ("write", {"x": 1}) in backend.log  # the reference was resolved with c1's result


def test_modify_aborts_the_request_in_flight_and_reruns_dependents():
    async def script(executor):
        executor.call("c1", "read", {"q": 1})
        executor.call("c2", "read", {"y": {"$ref": "c1.echo"}})
        await asyncio.sleep(0.5)
        executor.modify("c1", {"q": 2})  # its first request's result is dropped
        await asyncio.sleep(3)
        executor.modify("c1", {"q": 3})  # after both returned: both run again
        executor.call("c4", "read", {})
        executor.cancel("c4")

    delivered, _, executor = _run_executor(script)
    results = [(round(t, 3), call, content["echo"] if content else None) for t, call, content, _ in delivered]
    assert results == [
        (1.5, "c1", {"q": 2}),
        (2.5, "c2", {"y": {"q": 2}}),
        (4.5, "c1", {"q": 3}),
        (5.5, "c2", {"y": {"q": 3}}),
    ]
    assert executor.wasted_dispatches == 4  # first c1 in flight, finished c1 and c2 replaced, c4 cancelled
    assert executor.in_flight == 0


def test_sequential_backends_order_calls_after_earlier_writes():
    async def script(executor):
        executor.call("c1", "write", {})
        executor.call("c2", "read", {})
        executor.commit()

    delivered, _, _ = _run_executor(script, sequential=True)
    assert [(round(t, 3), call) for t, call, _, _ in delivered] == [(1.0, "c1"), (2.0, "c2")]


def test_failures_timeouts_and_failed_inputs_become_error_results():
    async def script(executor):
        executor.call("c1", "fail", {})
        executor.call("c2", "read", {"x": {"$ref": "c1"}})

    delivered, _, _ = _run_executor(script)
    assert [(call, error) for _, call, _, error in delivered] == [
        ("c1", "refused"),
        ("c2", "input c1 failed or was cancelled"),
    ]

    async def missing_path(executor):  # c1's result has no "items", and "echo" holds no list
        executor.call("c1", "read", {})
        executor.call("c2", "read", {"x": {"$ref": "c1.items.0.id"}})
        executor.call("c3", "write", {"x": {"$ref": "c1.echo.0"}})
        executor.commit()

    delivered, backend, _ = _run_executor(missing_path)
    assert [(call, error) for _, call, _, error in delivered] == [
        ("c1", None),
        ("c2", "input 'c1.items.0.id': no 'items' in the result of c1"),
        ("c3", "input 'c1.echo.0': no '0' in the result of c1"),
    ]
    assert backend.log == [("read", {})]  # neither reached the backend, and the write changed nothing

    async def slow(executor):
        executor.call("c1", "read", {})

    delivered, _, _ = _run_executor(slow, latency=20.0, timeout_s=5.0)
    assert delivered[0][0] == pytest.approx(5.0) and "timed out" in delivered[0][3]

    delivered, _, _ = _run_executor(slow, failure_rate=1.0)
    assert delivered[0][3] is not None and delivered[0][2] is None
