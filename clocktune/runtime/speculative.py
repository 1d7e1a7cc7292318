"""Speculative decoding of actions: the cost model and its toggle, the draft length, verification, and its metrics.

A local model writes an action token by token (``model_policy``); each step reads every weight once, so at batch 1
the step is memory-bound and a forward of a few tokens costs little more than one. A drafter
(``clocktune.runtime.drafters``) proposes γ tokens after the last one chosen; the target reads them in one forward
over its KV cache (``incremental.feed_rows``: the streaming mask extended by γ + 1 rows), and :class:`TokenPicker`
walks the rows: at each position the target's own rule picks the token (the argmax, the grammar's choice, or a
sample), the draft token is kept while it agrees, and the first disagreement is replaced by the target's token.
What is emitted is therefore what plain decoding emits (greedy: token for token; sampling: in distribution, by
rejection sampling), whatever the drafter proposes; only the speed depends on it.

**Cost model.** With acceptance α (each draft token agrees with probability α, given the ones before it did), a
draft of γ tokens yields ``(1 - α^(γ+1)) / (1 - α)`` tokens per verification. Its cost, in target decode steps, is
``γ c + v(γ+1)``: ``c`` a draft token's cost, ``v(k)`` a forward of ``k`` tokens over the cache. The expected
speedup is their ratio (:func:`expected_speedup`); the issue's ``(1 - α^(γ+1)) / ((1 - α)(γ c + 1))`` is the case
``v = 1`` (verification free), which on a 2-core CPU it is not (a 4-token forward costs about 2 steps:
STACK-NOTES.md), so ``v`` is measured too (``clocktune profile``) and enters the model. :class:`DraftLength` picks
per session the γ that maximises it at the session's measured α and speculates only while that exceeds 1 by a
margin, probing now and then while off so that α keeps being measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np  # pyarrow's dependency, so always there; torch is not imported: profiles read this module

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_VERIFY_RATIO",
    "DraftLength",
    "SpeculationCosts",
    "SpeculationStats",
    "TokenPicker",
    "break_even_acceptance",
    "draft_pays",
    "expected_speedup",
    "sample_verified",
]

# A forward of k tokens over the cache in decode steps, measured once on the 2-core CPU (STACK-NOTES.md, smoothed):
# the fallback when no measurement is at hand.
DEFAULT_VERIFY_RATIO = {1: 1.0, 2: 1.2, 3: 1.5, 4: 1.8, 5: 2.0, 6: 2.2, 7: 2.4, 8: 2.6, 9: 2.8}
# Acceptance assumed for a drafter before anything is measured (the prior of DraftLength's estimate).
DRAFT_PRIORS = {"prompt_lookup": 0.5, "layer_skip": 0.4, "int8": 0.85, "int4": 0.75}


def expected_speedup(alpha: float, gamma: int, cost_ratio: float, verify_ratio: float = 1.0) -> float:
    """Tokens per unit of target time with drafts of ``gamma`` tokens, against plain decoding (1 per step).

    Args:
        alpha: Acceptance: the probability that a draft token agrees, given the tokens before it did.
        gamma: Draft length (0: plain decoding).
        cost_ratio: A draft token's cost over one target decode step (``c``).
        verify_ratio: A forward of ``gamma + 1`` tokens over one decode step (``v``; 1 in the issue's formula).

    Returns:
        ``(1 - α^(γ+1)) / ((1 - α)(γ c + v))``; 1.0 for ``gamma == 0``.
    """
    if gamma <= 0:
        return 1.0
    alpha = min(max(alpha, 0.0), 1.0)
    tokens = gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)
    return tokens / (gamma * cost_ratio + verify_ratio)


@dataclass(frozen=True)
class SpeculationCosts:
    """Measured costs of speculation on a device, the ``speculation`` section of a profile (``clocktune profile``).

    Args:
        step_s: One target decode step, seconds.
        verify_ratio: A forward of ``k`` tokens (``k`` rows of logits) over one decode step, by ``k``.
        draft_ratio: One draft token of each drafter over one decode step, by drafter name.
        acceptance: Acceptance measured per drafter on held-out sessions (``clocktune profile --data``), if any.
        decode_tokens_per_s: Action tokens/s with each drafter on those sessions (``none``: plain decoding).
    """

    step_s: float
    verify_ratio: dict[int, float]
    draft_ratio: dict[str, float] = field(default_factory=dict)
    acceptance: dict[str, float] = field(default_factory=dict)
    decode_tokens_per_s: dict[str, float] = field(default_factory=dict)

    def verify(self, tokens: int) -> float:
        """``v(tokens)``, extrapolated linearly past the largest ``k`` measured (at least 1).

        Args:
            tokens: Tokens in the verification forward.

        Returns:
            Its cost in decode steps.
        """
        ratios = self.verify_ratio or DEFAULT_VERIFY_RATIO
        if tokens in ratios:
            return ratios[tokens]
        known = sorted(ratios)
        top = known[-1]
        slope = (ratios[top] - ratios[known[0]]) / max(top - known[0], 1)
        return max(ratios[top] + slope * (tokens - top), 1.0)


@dataclass
class DraftLength:
    """Per-session draft length from the session's measured acceptance, and the toggle of the cost model.

    Args:
        cost_ratio: A draft token's cost over one decode step.
        verify: ``v(k)``, a ``k``-token forward's cost in decode steps.
        prior_alpha: Acceptance assumed before this session's drafts are measured (earlier sessions' or a prior).
        prior_weight: Draft positions that prior counts for.
        max_gamma: Longest draft.
        margin: Speculate only while the expected speedup exceeds ``1 + margin``.
        probe_every: While off, one draft after this many plain steps, so that α keeps being measured.
    """

    cost_ratio: float
    verify: Callable[[int], float]
    prior_alpha: float = 0.5
    prior_weight: float = 8.0
    max_gamma: int = 6
    margin: float = 0.1
    probe_every: int = 32
    accepted: int = 0
    trials: int = 0
    idle: int = 0

    @property
    def alpha(self) -> float:
        """The session's acceptance estimate (successes over positions tried, with the prior's weight)."""
        return (self.accepted + self.prior_alpha * self.prior_weight) / (self.trials + self.prior_weight)

    def best(self) -> tuple[int, float]:
        """The draft length with the highest expected speedup at the current α, and that speedup."""
        scores = [
            (expected_speedup(self.alpha, gamma, self.cost_ratio, self.verify(gamma + 1)), gamma)
            for gamma in range(1, self.max_gamma + 1)
        ]
        speedup, gamma = max(scores)
        return gamma, speedup

    def choose(self) -> int:
        """The next draft's length; 0 means a plain step (speculation does not pay now)."""
        gamma, speedup = self.best()
        if speedup >= 1.0 + self.margin:
            return gamma
        self.idle += 1
        if self.idle >= self.probe_every:
            self.idle = 0
            return 1  # the cheapest draft: keeps α measured, so that speculation can come back on
        return 0

    def record(self, drafted: int, accepted: int) -> None:
        """Takes one verified draft into account.

        Args:
            drafted: Its length.
            accepted: Its tokens the target agreed with (a prefix).
        """
        self.accepted += accepted
        self.trials += accepted + (1 if accepted < drafted else 0)  # positions tried: up to the first rejection


@dataclass
class SpeculationStats:
    """Decoding metrics of one drafter over sessions: acceptance, lengths, time per step, throughput.

    Args:
        drafter: The drafter's name (``none`` for plain decoding).
    """

    drafter: str = "none"
    actions: int = 0
    tokens: int = 0
    decode_s: float = 0.0  # from the action's first token to its end (the prompt forward excluded)
    target_forwards: int = 0  # after the prompt: single steps and verifications
    target_s: float = 0.0
    drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    plain_steps: int = 0
    reached: list[int] = field(default_factory=list)  # drafts that got to position i (0-based)
    agreed: list[int] = field(default_factory=list)  # ... and were accepted there

    @property
    def alpha(self) -> float | None:
        """Acceptance as the cost model takes it: draft tokens accepted over positions tried (up to a rejection)."""
        tried = sum(self.reached)
        return self.accepted / tried if tried else None

    def record_draft(self, drafted: int, accepted: int) -> None:
        """Counts one verified draft.

        Args:
            drafted: Its length.
            accepted: Tokens accepted (a prefix).
        """
        self.drafts += 1
        self.drafted += drafted
        self.accepted += accepted
        while len(self.reached) < drafted:
            self.reached.append(0)
            self.agreed.append(0)
        for position in range(min(accepted + 1, drafted)):
            self.reached[position] += 1
            self.agreed[position] += position < accepted

    def merge(self, other: SpeculationStats) -> None:
        """Adds another run's counts to these.

        Args:
            other: Stats of the same drafter.
        """
        for name in ("actions", "tokens", "decode_s", "target_forwards", "target_s", "drafts", "drafted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("accepted", "draft_s", "plain_steps"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for index in range(len(other.reached)):
            if index == len(self.reached):
                self.reached.append(0)
                self.agreed.append(0)
            self.reached[index] += other.reached[index]
            self.agreed[index] += other.agreed[index]

    def summary(self) -> dict[str, Any]:
        """The metrics, as ``eval``'s summary and the profile hold them.

        Returns:
            ``acceptance_rate`` (draft tokens accepted over drafted), ``alpha`` (accepted over positions tried, up
            to the first rejection: the cost model's α), ``mean_accepted_length`` (tokens accepted per
            draft), ``acceptance_by_position`` (accepted over reached, per draft position), ``tokens_per_forward``,
            ``drafter_ms_per_token``, ``target_ms_per_forward``, ``tokens_per_s`` (action tokens over decode time)
            and the counts.
        """

        def ratio(top: float, bottom: float, scale: float = 1.0, digits: int = 4) -> float | None:
            return round(scale * top / bottom, digits) if bottom else None

        return {
            "drafter": self.drafter,
            "actions": self.actions,
            "tokens": self.tokens,
            "drafts": self.drafts,
            "acceptance_rate": ratio(self.accepted, self.drafted),
            "alpha": ratio(self.accepted, sum(self.reached)),
            "mean_accepted_length": ratio(self.accepted, self.drafts),
            "acceptance_by_position": [ratio(a, r) for a, r in zip(self.agreed, self.reached, strict=True)],
            "tokens_per_forward": ratio(self.tokens - self.actions, self.target_forwards),
            "drafter_ms_per_token": ratio(self.draft_s, self.drafted, 1000.0, 3),
            "target_ms_per_forward": ratio(self.target_s, self.target_forwards, 1000.0, 3),
            "tokens_per_s": ratio(self.tokens, self.decode_s, 1.0, 2),
            "plain_steps": self.plain_steps,
        }


def _probabilities(logits: torch.Tensor, temperature: float, allowed: np.ndarray | None) -> np.ndarray:
    # NumPy on the calling thread (as GrammarMatcher.allowed explains): softmax(logits / T) over the allowed tokens.
    values = logits.detach().float().cpu().numpy().astype(np.float64) / temperature
    if allowed is not None:
        values = np.where(allowed, values, -np.inf)
    values -= values.max()
    weights = np.exp(values)
    return weights / weights.sum()


def _sample(probabilities: np.ndarray, rng: np.random.Generator) -> int:
    # Inverse-CDF draw: one uniform per token, so a seeded run is reproducible.
    cumulative = np.cumsum(probabilities)
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(cumulative) - 1))


def sample_verified(
    target: np.ndarray, proposed: int | None, draft: np.ndarray | None, rng: np.random.Generator
) -> int:
    """One position of rejection-sampling verification: a token distributed as ``target`` whatever was proposed.

    The draft token ``d`` (drawn from ``draft``, or proposed deterministically: ``draft`` is ``None``, a point
    mass) is kept with probability ``min(1, p(d) / q(d))``; otherwise the token is drawn from the residual
    ``max(p - q, 0)``, normalised. Over the draw of ``d`` and this choice, the token is distributed as ``p``
    (Leviathan et al. 2023, Chen et al. 2023).

    Args:
        target: The target's next-token distribution ``p`` (over the tokens its rule allows).
        proposed: The draft token, or ``None`` past the draft (then a plain draw from ``p``).
        draft: The distribution ``q`` the draft token was drawn from; ``None`` for a deterministic proposal.
        rng: The random stream.

    Returns:
        The token: ``proposed`` when accepted.
    """
    if proposed is None:
        return _sample(target, rng)
    q = 1.0 if draft is None else float(draft[proposed])
    if q > 0.0 and rng.random() * q < target[proposed]:
        return proposed
    residual = target.copy()
    if draft is None:
        residual[proposed] = 0.0
    else:
        residual = np.maximum(residual - draft, 0.0)
    if residual.sum() <= 0.0:  # p <= q nowhere exceeded: only reachable by rounding; p itself is then exact
        return _sample(target, rng)
    return _sample(residual, rng)


class TokenPicker:
    """The target's rule at each position of an action: plain decoding and verification share it.

    Greedy (``temperature == 0``): the argmax, or under a grammar ``GrammarMatcher.choose`` and, past the budget,
    ``choose_closing``; a draft token is accepted iff it is that token. Sampling: a draw from ``softmax(logits / T)``
    over the tokens the grammar allows (:func:`sample_verified` for a draft token); past the budget the closing rule
    stays deterministic. The matcher advances only over tokens emitted, so rejected drafts need no rollback.

    Args:
        matcher: The action's ``GrammarMatcher``, or ``None`` unconstrained.
        max_new_tokens: Tokens before the grammar's wrap-up rule takes over.
        temperature: 0 for greedy decoding.
        rng: Random stream of sampling (needed when ``temperature > 0``).
    """

    def __init__(
        self, matcher: Any, max_new_tokens: int, temperature: float = 0.0, rng: np.random.Generator | None = None
    ) -> None:
        if temperature > 0 and rng is None:
            raise ValueError("sampling needs a random stream")
        self.matcher = matcher
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.rng = rng

    def pick(
        self, logits: torch.Tensor, written: int, proposed: int | None = None, draft: np.ndarray | None = None
    ) -> int:
        """The token emitted at a position (does not advance the matcher).

        Args:
            logits: The target's next-token logits there (1D).
            written: Tokens of the action before it.
            proposed: The draft token there, if any.
            draft: The distribution it was drawn from (sampling), ``None`` for a deterministic proposal.

        Returns:
            The token: ``proposed`` iff the target accepts it.
        """
        matcher = self.matcher
        if matcher is not None and written >= self.max_new_tokens:
            return matcher.choose_closing(logits)
        if self.temperature <= 0:
            return int(logits.argmax()) if matcher is None else matcher.choose(logits)
        allowed = None if matcher is None else matcher.allowed(logits.shape[-1])
        return sample_verified(_probabilities(logits, self.temperature, allowed), proposed, draft, self.rng)

    def advance(self, token: int) -> None:
        """Consumes an emitted token (the grammar's state moves on)."""
        if self.matcher is not None:
            self.matcher.advance(token)

    def forced(self, limit: int) -> list[int]:
        """Tokens the grammar forces next (a free draft: the target's rule can pick nothing else), at most ``limit``.

        Args:
            limit: The most to return.

        Returns:
            The forced tokens (none unconstrained).
        """
        if self.matcher is None or limit <= 0 or self.matcher.is_accepting():
            return []
        return list(self.matcher.matcher.compute_ff_tokens()[:limit])


def acceptance_prior(name: str, measured: SpeculationStats | None, costs: SpeculationCosts | None) -> float:
    """The acceptance a new session assumes for a drafter: earlier sessions', else the profile's, else a prior.

    Args:
        name: The drafter's name.
        measured: Stats of earlier sessions of this drafter (shared by a policy factory).
        costs: The device profile's speculation section.

    Returns:
        An acceptance in (0, 1).
    """
    if measured is not None and measured.drafted >= 32 and measured.alpha is not None:
        return min(max(measured.alpha, 0.01), 0.99)
    if costs is not None and name in costs.acceptance:
        return costs.acceptance[name]
    base = name.split(":")[0]
    return DRAFT_PRIORS.get(base, 0.5)


def draft_pays(alpha: float, cost_ratio: float, verify: Callable[[int], float], margin: float, max_gamma: int) -> bool:
    """Whether any draft length is expected to beat plain decoding by ``margin`` (the toggle).

    Args:
        alpha: Acceptance.
        cost_ratio: A draft token's cost over one decode step.
        verify: ``v(k)``.
        margin: Required gain over 1.
        max_gamma: Longest draft considered.

    Returns:
        The toggle's choice.
    """
    best = max(expected_speedup(alpha, g, cost_ratio, verify(g + 1)) for g in range(1, max_gamma + 1))
    return best >= 1.0 + margin and math.isfinite(best)


def break_even_acceptance(
    cost_ratio: float, verify: Callable[[int], float], margin: float = 0.1, max_gamma: int = 6
) -> float | None:
    """The lowest acceptance at which a drafter of this cost pays by ``margin`` (where the toggle turns it on).

    The best expected speedup over draft lengths grows with α, so the threshold is found by bisection.

    Args:
        cost_ratio: A draft token's cost over one decode step (``c``).
        verify: ``v(k)``.
        margin: Required gain over 1.
        max_gamma: Longest draft considered.

    Returns:
        α rounded up to 3 decimals; ``None`` when even α = 1 does not pay (a drafter costlier than the gain it can bring).
    """
    if not draft_pays(1.0, cost_ratio, verify, margin, max_gamma):
        return None
    low, high = 0.0, 1.0
    while high - low > 1e-4:
        middle = (low + high) / 2
        low, high = (low, middle) if draft_pays(middle, cost_ratio, verify, margin, max_gamma) else (middle, high)
    return math.ceil(high * 1000) / 1000
