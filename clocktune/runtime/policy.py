"""What a policy is: the interface every agent of the runtime implements, and what it returns at each action.

Scripted experts, a local model, an OpenAI-compatible endpoint and test doubles all implement :class:`Policy`;
sessions, evaluation and the journal depend on this module only, never on one another's policy modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from clocktune.actions import Action
from clocktune.timeline.events import Event, Timeline

__all__ = ["Decision", "Policy", "PolicyFactory", "PolicySpec"]


@dataclass
class Decision:
    """What a policy produced at one action boundary.

    Args:
        action: The parsed action, or ``None`` when the output was not a valid action.
        tokens: Tokens generated (charged as decode time on the virtual clock).
        error: Why the output did not parse (becomes a notice).
        first_words_at: ``time.monotonic()`` when the action's first ``FIRST_WORDS_TOKENS`` tokens were written,
            for a policy that decodes token by token; on the wall clock an answer's first words are out then, not
            when the whole action is handed over.
    """

    action: Action | None
    tokens: int
    error: str | None = None
    first_words_at: float | None = None


class Policy(Protocol):
    """Decides the agent's actions. ``observe`` receives every event the session logs, in order (the agent's
    own accepted actions and notices included) and returns how many new context tokens it read; ``act`` returns
    the next action at time ``t``; ``close`` releases what it holds once its session is over (a model's KV
    cache); ``name`` labels its results and its session logs. On the wall clock ``act`` runs on the thread that
    started the run (``wall_clock``), one session's at a time, unless ``io_bound``: then in a worker thread, so that
    sessions overlap their waits (an endpoint's replies)."""

    name: str
    io_bound: bool

    def observe(self, events: list[Event]) -> int: ...

    def act(self, t: float) -> Decision: ...

    def close(self) -> None: ...


# policy_factory(timeline) -> a fresh policy for one session.
PolicyFactory = Callable[[Timeline], Policy]


@dataclass(frozen=True)
class PolicySpec:
    """A policy as an evaluation names it.

    Args:
        name: The name its results, session logs and plots carry.
        factory: Builds the policy of one session.
        key: What decides its sessions (e.g. ``scripted:sync``, ``model:runs/demo/checkpoint:speculative``): an
            evaluation plays two specs with the same key once, since they would play the same sessions.
    """

    name: str
    factory: PolicyFactory
    key: str
