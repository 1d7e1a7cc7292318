"""The tool executor: runs an agent's calls against a session's backend on the event loop's clock.

It keeps the call graph (docs/design.md §5): read-only calls dispatch at once; calls whose arguments reference other
calls (``{"$ref": "c1"}``) wait for those results; state-changing calls wait for ``commit``; a modified call
cancels its in-flight request and runs again, and so do the calls that used its old result; a cancelled call's
late result is dropped. With a ``sequential`` backend (one whose reads depend on earlier writes, like a file
system), calls also keep program order around state-changing calls.

Latency is drawn from the tool's latency model with a generator seeded by the session seed and the call's
content, so the same call takes the same time under every policy: speedups compare like with like.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clocktune.clock import sample_failure, sample_latency
from clocktune.runtime.virtual_clock import session_seconds
from clocktune.timeline.events import ToolSchema
from clocktune.timeline.refs import iter_refs, resolve_refs
from clocktune.tools import ToolBackend, ToolError

# deliver(call_id, content, error): hands a result to the session at the loop's current time.
Deliver = Callable[[str, Any, "str | None"], None]

ERROR_KINDS = ("input", "transient", "refused")
_INPUT = "input "
_TIMED_OUT = " timed out after "


def input_error(what: str) -> str:
    """The error of a call that never ran because of an input: ``what`` says which and why."""
    return f"{_INPUT}{what}"


def timeout_error(name: str, timeout_s: float) -> str:
    """The error of a call that took longer than the executor's timeout."""
    return f"{name}{_TIMED_OUT}{timeout_s:g} s"


def unavailable_error(name: str) -> str:
    """The error of an injected fault (the tool's failure rate, ``SessionConfig.failure_rate``)."""
    return f"{name} failed: service unavailable"


def error_kind(name: str, error: str) -> str:
    """Who made an error result: the executor (whose phrases are the functions above) or the service.

    The log holds only the error's words, so a policy that reacts to failures (the experts of ``data_gen.expert``)
    classifies them here, with the phrases the executor writes, rather than by its own copy of them.

    Args:
        name: The call's tool.
        error: The error text of its result.

    Returns:
        One of :data:`ERROR_KINDS`: ``input`` (an input failed, was cancelled or lacks the referenced path: the call
        never ran), ``transient`` (a timeout or an injected fault: the call never ran and may succeed when run
        again), or ``refused`` (the service ran and refused it: an outcome, final).
    """
    if error.startswith(_INPUT):
        return "input"
    if error.startswith(name + _TIMED_OUT) or error == unavailable_error(name):
        return "transient"
    return "refused"


@dataclass
class CallState:
    """The executor's view of one call.

    Args:
        call_id: Id the agent gave the call.
        name: Tool name.
        side_effect: Whether the tool changes state.
        arguments: Current arguments (references unresolved).
        order: Position in issue order.
        executed_with: The resolved arguments of its latest run that reached the backend (a refusal counts; a
            timeout, an injected fault or a failed input does not): what a dialogue's ground truth records.
    """

    call_id: str
    name: str
    side_effect: bool
    arguments: dict[str, Any]
    order: int
    version: int = 0
    cancelled: bool = False
    committed: bool = False
    needs_dispatch: bool = True
    done_version: int = -1  # version whose result has been delivered
    executed: bool = False  # a state-changing call that ran; it is never run again
    executed_with: dict[str, Any] | None = None
    result: Any = None
    error: str | None = None
    timer: asyncio.TimerHandle | None = None
    started_at: float = 0.0

    @property
    def done(self) -> bool:
        """Whether the current version's result has been delivered."""
        return self.done_version == self.version

    @property
    def refs(self) -> list[str]:
        """Ids of the calls its arguments reference."""
        return list(dict.fromkeys(iter_refs(self.arguments)))


class ToolExecutor:
    """Executes one session's calls.

    Args:
        tools: Tool schemas (side effects and latency models).
        backend: The session's backend.
        seed: Seed of the latency and failure draws.
        deliver: Called with ``(call_id, content, error)`` when a current result arrives.
        failure_rate: Extra probability that a call fails (injected faults), on top of the tool's own.
        timeout_s: A call slower than this fails with a timeout at ``timeout_s``; ``None`` waits forever.
        sequential: Whether calls keep program order: every call waits for the state-changing calls issued
            before it, and a state-changing call for every call issued before it.
    """

    def __init__(
        self,
        tools: list[ToolSchema],
        backend: ToolBackend,
        seed: int,
        deliver: Deliver,
        failure_rate: float = 0.0,
        timeout_s: float | None = None,
        sequential: bool = False,
    ) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.backend = backend
        self.seed = seed
        self.deliver = deliver
        self.failure_rate = failure_rate
        self.timeout_s = timeout_s
        self.sequential = sequential
        self.calls: dict[str, CallState] = {}
        self.in_flight = 0
        self.dispatches = 0
        self.wasted_dispatches = 0
        self.wasted_tool_s = 0.0
        self._draws: dict[str, int] = {}

    # Agent actions (validated by the session first) -------------------------------------------------------

    def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> None:
        """Registers a new call and dispatches it when it may run."""
        tool = self.tools[name]
        self.calls[call_id] = CallState(call_id, name, tool.side_effect, arguments, len(self.calls))
        self._dispatch_ready()

    def modify(self, call_id: str, arguments: dict[str, Any]) -> None:
        """Replaces a call's arguments: its in-flight request and its dependents' results become stale."""
        call = self.calls[call_id]
        self._abort(call)
        call.arguments = arguments
        call.version += 1
        call.needs_dispatch = True
        self._invalidate_dependents(call_id)
        self._dispatch_ready()

    def cancel(self, call_id: str) -> None:
        """Drops a call; a result still in flight is discarded."""
        call = self.calls[call_id]
        self._abort(call)
        call.cancelled = True
        if call.done_version >= 0:
            self.wasted_dispatches += 1  # it ran, and its result no longer counts
        self._dispatch_ready()

    def commit(self) -> None:
        """Releases every open state-changing call."""
        for call in self.calls.values():
            if call.side_effect and not call.cancelled:
                call.committed = True
        self._dispatch_ready()

    # Queries ----------------------------------------------------------------------------------------------

    def open_call(self, call_id: str) -> CallState | None:
        """The call if the agent may still modify or cancel it (known, not cancelled, not a committed write)."""
        call = self.calls.get(call_id)
        if call is None or call.cancelled or (call.side_effect and call.committed):
            return None
        return call

    # Internals --------------------------------------------------------------------------------------------

    def _abort(self, call: CallState) -> None:
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
            self.in_flight -= 1
            self.wasted_dispatches += 1
            self.wasted_tool_s += session_seconds(asyncio.get_running_loop().time(), call.started_at)
        elif call.done and not call.side_effect and call.done_version >= 0 and not call.cancelled:
            self.wasted_dispatches += 1  # a finished read that is about to be replaced

    def _invalidate_dependents(self, call_id: str) -> None:
        for other in self.calls.values():
            if call_id in other.refs and not other.cancelled and not other.executed:
                if not other.needs_dispatch or other.timer is not None:
                    self._abort(other)
                    other.version += 1
                    other.needs_dispatch = True
                    self._invalidate_dependents(other.call_id)

    def _may_run(self, call: CallState) -> bool:
        if call.cancelled or not call.needs_dispatch or call.executed:
            return False
        if call.side_effect and not call.committed:
            return False
        for target in call.refs:
            dep = self.calls.get(target)
            if dep is not None and not dep.cancelled and not dep.done:
                return False
        if self.sequential:
            # Program order: nothing overtakes an earlier write, and a write overtakes nothing.
            for other in self.calls.values():
                if other.order < call.order and not other.cancelled and not other.done:
                    if other.side_effect or call.side_effect:
                        return False
        return True

    def _dispatch_ready(self) -> None:
        progress = True
        while progress:
            progress = False
            for call in self.calls.values():  # issue order: calls are registered as they are issued
                if self._may_run(call):
                    self._dispatch(call)
                    progress = True

    def _draw(self, call: CallState, resolved: dict[str, Any]) -> random.Random:
        key = f"{call.name}:{json.dumps(resolved, sort_keys=True, default=str)}"
        count = self._draws.get(key, 0)
        self._draws[key] = count + 1
        return random.Random(f"{self.seed}:{key}:{count}")

    def _dispatch(self, call: CallState) -> None:
        loop = asyncio.get_running_loop()
        call.needs_dispatch = False
        failed = next(
            (
                target
                for target in call.refs
                if target not in self.calls or self.calls[target].cancelled or self.calls[target].error is not None
            ),
            None,
        )
        content, error = None, None
        resolved, latency = call.arguments, 0.0
        if failed is not None:
            error = input_error(f"{failed} failed or was cancelled")
        else:
            try:
                resolved = resolve_refs(call.arguments, lambda target: self.calls[target].result)
            except LookupError as missing:  # a path a model wrote (`c1.devices.0.id`) that the result lacks
                error = input_error(missing.args[0])
        remote = getattr(self.backend, "remote", None)
        if error is None and remote is not None and remote(call.name):
            self._request(call, resolved)
            return
        if error is None:
            model = self.tools[call.name].latency
            rng = self._draw(call, resolved)
            latency = sample_latency(model, rng)
            fails = sample_failure(model, rng) or rng.random() < self.failure_rate
            if self.timeout_s is not None and latency > self.timeout_s:
                latency, error = self.timeout_s, timeout_error(call.name, self.timeout_s)
            elif fails:
                error = unavailable_error(call.name)
            else:
                call.executed_with = resolved
                try:
                    content = self.backend.execute(call.name, resolved)
                except ToolError as failure:
                    error = str(failure)
                except Exception as failure:  # noqa: BLE001 - a broken backend fails this call, not every session
                    error = f"the backend failed: {type(failure).__name__}: {failure}"
                if call.side_effect:
                    call.executed = True
        self.dispatches += 1
        self.in_flight += 1
        call.started_at = loop.time()
        call.timer = loop.call_later(latency, self._complete, call, call.version, content, error)

    def _request(self, call: CallState, resolved: dict[str, Any]) -> None:
        # A remote tool (RemoteTools): the call goes out now and its timer is only the timeout; answer() completes it.
        call.executed_with = resolved
        if call.side_effect:
            call.executed = True
        self.dispatches += 1
        self.in_flight += 1
        loop = asyncio.get_running_loop()
        call.started_at = loop.time()
        limit = self.timeout_s if self.timeout_s is not None else 3600.0
        call.timer = loop.call_later(limit, self._complete, call, call.version, None, timeout_error(call.name, limit))
        self.backend.request(call.call_id, call.version, call.name, resolved)

    def answer(self, call_id: str, version: int, content: Any, error: str | None) -> bool:
        """Completes a remote tool's call with the answer its runner sent.

        Args:
            call_id: The call.
            version: The version the request carried (a request superseded by a modify, or cancelled, is stale).
            content: The result, when it succeeded.
            error: The error, when it failed.

        Returns:
            Whether the answer was taken: ``False`` for an unknown call, a stale version, or a call not waiting.
        """
        call = self.calls.get(call_id)
        if call is None or call.cancelled or call.version != version or call.timer is None:
            return False
        call.timer.cancel()
        self._complete(call, version, content, error)
        return True

    def _complete(self, call: CallState, version: int, content: Any, error: str | None) -> None:
        call.timer = None
        self.in_flight -= 1
        call.done_version, call.result, call.error = version, content, error
        self.deliver(call.call_id, content, error)
        self._dispatch_ready()
