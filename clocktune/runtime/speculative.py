"""Speculative decoding of actions: the cost model and its toggle, the draft length, verification, and its metrics.

A local model writes an action token by token (``model_policy``); each step reads every weight once, so at batch 1
the step is memory-bound and a forward of a few tokens costs little more than one. A drafter
(``clocktune.runtime.drafters``) proposes γ tokens after the last one chosen; the target reads them in one forward
over the session's cache in the engine (a :class:`~clocktune.runtime.engine.Forward` of γ + 1 rows, packed with the
other sessions' work), and ``token_picking.TokenPicker`` walks the rows: at each position the target's own rule picks
the token (the argmax, the grammar's choice, or a draw with the position's own noise: ``token_picking.SamplingNoise``), the draft
token is kept while it agrees, and the first disagreement is replaced by the target's token. What is emitted is
therefore exactly what plain decoding emits, greedy or sampled, whatever the drafter proposes and whatever the batch;
only the speed depends on it.

**Cost model.** With acceptance α (each draft token agrees with probability α, given the ones before it did), a
draft of γ tokens yields ``(1 - α^(γ+1)) / (1 - α)`` tokens per verification. Its cost, in target decode steps, is
``γ c + v(γ+1)``: ``c`` a draft token's cost, ``v(k)`` a forward of ``k`` tokens over the cache. The expected
speedup is their ratio (:func:`expected_speedup`); the issue's ``(1 - α^(γ+1)) / ((1 - α)(γ c + 1))`` is the case
``v = 1`` (verification free), which on a 2-core CPU it is not (a 4-token forward costs about 2 steps:
STACK-NOTES.md), so ``v`` is measured too (``clocktune profile``). In the engine ``v`` depends on the batch: a
decode step of ``B`` sessions is a forward of ``B`` tokens, its verification one of ``B (γ + 1)``, priced by the
device's measured :class:`Roofline`; verification is nearly free while the batch is below the roofline's knee and
costs ``γ + 1`` steps far above it (EfficientRollout, arXiv 2606.18967). :class:`DraftLength` climbs a ladder of
draft lengths with the session's recent acceptance and speculates only while the expected speedup at the engine's
active batch exceeds 1 by a margin, probing now and then while off so that α keeps being measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np  # pyarrow's dependency, so always there; torch is not imported: profiles read this module

__all__ = [
    "DEFAULT_VERIFY_RATIO",
    "DraftLength",
    "LADDER",
    "PROBE_PATIENCE",
    "Roofline",
    "SpeculationCosts",
    "SpeculationStats",
    "break_even_acceptance",
    "draft_pays",
    "expected_speedup",
    "expected_tokens",
    "rung_thresholds",
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
    return expected_tokens(alpha, gamma) / (gamma * cost_ratio + verify_ratio)


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens a verified draft of ``gamma`` yields on average: its accepted prefix and the target's own token after
    it, ``(1 - α^(γ+1)) / (1 - α)``."""
    alpha = min(max(alpha, 0.0), 1.0)
    return gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class Roofline:
    """A packed forward's time from its tokens and rows: ``overhead_s + max(memory_s, token_s · tokens) + row_s · rows``.

    EfficientRollout's roofline, per forward: below the knee (``memory_s / token_s`` tokens) a forward costs what
    reading every weight once costs, whatever it computes; above it, compute grows with the tokens; each row (a
    session) adds its own attention over its own cache and the calls around it; ``overhead_s`` is what every forward
    costs besides (on a CPU, where small forwards are not memory-bound, most of the fixed cost lands there and the knee
    near one token: the model is then linear in the tokens). Fitted by :meth:`fit` from forwards timed over a sweep of
    batch sizes and tokens per row (``clocktune profile``), on the device at hand.

    A forward of a single token (a decode step alone) is timed apart, as ``single_s``: its linear layers are
    matrix-vector products, which on a CPU cost far less than the matrix products of any forward of two tokens or more
    (63 ms against 105 ms for two tokens on the 2-core EPYC, 2026-12-07). The linear model cannot hold that step, and
    fitted through it, it priced a 1-token draft's verification alone at 1.04 decode steps where it cost 1.67.

    Args:
        memory_s: Seconds of a forward below the knee.
        token_s: Seconds per token above it.
        row_s: Seconds per row (session) of the forward.
        overhead_s: Seconds every forward costs besides.
        single_s: Seconds of a forward of one token, as timed (``None``: as the model says).
    """

    memory_s: float
    token_s: float
    row_s: float
    overhead_s: float = 0.0
    single_s: float | None = None

    def seconds(self, tokens: int, rows: int) -> float:
        """The predicted time of a forward of ``tokens`` tokens over ``rows`` sessions."""
        if tokens == 1 and self.single_s is not None:
            return self.single_s
        return self.overhead_s + max(self.memory_s, self.token_s * tokens) + self.row_s * rows

    def ratio(self, tokens_per_row: int, batch: int) -> float:
        """A forward of ``batch`` rows of ``tokens_per_row`` tokens over one of ``batch`` single tokens (a decode step
        of the batch): ``v(k)`` at batch ``batch``."""
        return self.seconds(batch * tokens_per_row, batch) / self.seconds(batch, batch)

    @property
    def knee(self) -> float:
        """Tokens in a forward where compute starts to cost more than reading the weights."""
        return self.memory_s / self.token_s if self.token_s > 0 else math.inf

    @classmethod
    def fit(cls, samples: list[tuple[int, int, float]]) -> Roofline:
        """The roofline closest to timed forwards, in relative error.

        For a fixed knee the model is linear (``overhead_s + memory_s · max(1, tokens / knee) + row_s · rows``), so
        each candidate knee is solved by non-negative least squares and the best kept.

        Args:
            samples: ``(tokens, rows, seconds)`` of timed forwards. Those of one token set ``single_s`` (their median)
                and are left out of the fit when at least three others remain.

        Returns:
            The fitted roofline.
        """
        singles = [sample[2] for sample in samples if sample[0] == 1]
        single_s = None
        if singles and len(samples) - len(singles) >= 3:
            single_s = float(np.median(singles))
            samples = [sample for sample in samples if sample[0] != 1]
        tokens = np.array([sample[0] for sample in samples], dtype=np.float64)
        rows = np.array([sample[1] for sample in samples], dtype=np.float64)
        seconds = np.array([sample[2] for sample in samples], dtype=np.float64)
        weight = 1.0 / seconds  # relative error: the small forwards count as much as the large
        best: tuple[float, Roofline] | None = None
        for knee in np.geomspace(1.0, max(tokens.max(), 2.0) * 4.0, 200):
            columns = np.stack([np.ones_like(tokens), np.maximum(1.0, tokens / knee), rows], axis=1)
            coefficients = _non_negative_least_squares(columns * weight[:, None], seconds * weight)
            residual = float(np.sum((columns @ coefficients * weight - seconds * weight) ** 2))
            if best is None or residual < best[0]:
                overhead_s, memory_s, row_s = (float(value) for value in coefficients)
                best = (residual, cls(memory_s, float(memory_s / knee), row_s, overhead_s, single_s))
        return best[1]


def _non_negative_least_squares(matrix: np.ndarray, target: np.ndarray) -> np.ndarray:
    # A handful of unknowns: least squares on every subset of the columns (the rest at 0), the best non-negative one.
    count = matrix.shape[1]
    best: tuple[float, np.ndarray] | None = None
    for subset in range(1, 2**count):
        chosen = [column for column in range(count) if subset >> column & 1]
        solution = np.zeros(count)
        solution[chosen] = np.linalg.lstsq(matrix[:, chosen], target, rcond=None)[0]
        if (solution < 0).any():
            continue
        residual = float(np.sum((matrix @ solution - target) ** 2))
        if best is None or residual < best[0]:
            best = (residual, solution)
    return best[1] if best is not None else np.zeros(count)


@dataclass(frozen=True)
class SpeculationCosts:
    """Measured costs of speculation on a device, the ``speculation`` section of a profile (``clocktune profile``).

    Args:
        step_s: One target decode step, seconds.
        verify_ratio: A forward of ``k`` tokens (``k`` rows of logits) over one decode step, by ``k``, at batch 1.
        draft_ratio: One draft token of each drafter over one decode step, by drafter name.
        acceptance: Acceptance measured per drafter on held-out sessions (``clocktune profile --data``), if any.
        decode_tokens_per_s: Action tokens/s with each drafter on those sessions (``none``: plain decoding).
        roofline: The engine's packed forward timed over batch sizes and tokens per row, fitted (``None``: not
            measured; batches are then priced from ``verify_ratio`` as if a batch were one long row).
    """

    step_s: float
    verify_ratio: dict[int, float]
    draft_ratio: dict[str, float] = field(default_factory=dict)
    acceptance: dict[str, float] = field(default_factory=dict)
    decode_tokens_per_s: dict[str, float] = field(default_factory=dict)
    roofline: Roofline | None = None

    def verify(self, tokens: int, batch: int = 1) -> float:
        """``v(tokens)`` at ``batch`` sessions: a forward of ``tokens`` tokens per session over a decode step of the
        batch, from the roofline when measured, else from ``verify_ratio`` (extrapolated linearly past the largest
        ``k`` measured, at least 1).

        Args:
            tokens: Tokens per session in the verification forward.
            batch: Sessions in the forward.

        Returns:
            Its cost in decode steps of the batch.
        """
        if self.roofline is not None:
            return self.roofline.ratio(tokens, batch)
        if batch == 1:
            return self._table(tokens)
        return self._table(batch * tokens) / self._table(batch)

    def _table(self, tokens: int) -> float:
        ratios = self.verify_ratio or DEFAULT_VERIFY_RATIO
        if tokens in ratios:
            return ratios[tokens]
        known = sorted(ratios)
        top = known[-1]
        slope = (ratios[top] - ratios[known[0]]) / max(top - known[0], 1)
        return max(ratios[top] + slope * (tokens - top), 1.0)


# A probe due while speculation is off waits for a step where it is not expected to lose (one that feeds forced
# tokens, at a small batch) up to this many times ``probe_every`` steps; then it is made anyway, so that a session
# without such steps still measures α.
PROBE_PATIENCE = 4

# Draft lengths of the ladder: one rung at a time, up while acceptance says the next pays more, down when less.
LADDER = (1, 2, 3, 4, 6)


@dataclass
class DraftLength:
    """Per-session draft length: a ladder climbed with the session's recent acceptance, and the toggle of the cost
    model at the engine's active batch (EfficientRollout's system-aware speculation).

    Each verified draft updates the session's acceptance α (recent drafts weigh most: ``memory`` positions). Before
    each draft the length moves at most one rung, to the neighbour whose expected speedup at this α is higher: the
    thresholds of the ladder are the α where neighbouring rungs' speedups cross, which the measured costs decide
    (:func:`rung_thresholds`). Then the toggle: speculate only while the rung's expected speedup, priced at the
    batch the engine is running (``verify(k, batch)``), exceeds ``1 + margin``; while off, one shortest draft every
    ``probe_every`` steps keeps α measured.

    A probe is priced after the step's forced tokens (the grammar's only continuation, fed with the step before them
    whether or not a drafter runs): a step of ``f`` of them already costs ``v(f + 1)``, so one more token costs
    ``v(f + 2) / v(f + 1)`` of it, where after a decode step alone it costs ``v(2)``. On this CPU a lone token's
    forward costs 0.6 of a forward of two, so at batch 1 a probe after a decode step alone costs 0.7 of a step and
    one after forced tokens about a tenth. A due probe therefore waits (up to ``PROBE_PATIENCE`` times
    ``probe_every`` steps) for a step where it is not expected to lose. The toggle itself is not priced so: the
    roofline is fitted within ~10% here, which is the whole of a draft's gain after forced tokens (drafting on them
    at batch 1 fed 6% more tokens in 7% fewer forwards and was slower, docs/benchmarks-history.md).

    Args:
        cost_ratio: A draft token's cost over one decode step.
        verify: ``v(k, batch)``, a forward of ``k`` tokens a session over a decode step, at ``batch`` sessions.
        prior_alpha: Acceptance assumed before this session's drafts are measured (earlier sessions' or a prior).
        prior_weight: Draft positions that prior counts for.
        rungs: The draft lengths of the ladder, increasing.
        margin: Speculate only while the expected speedup exceeds ``1 + margin``.
        probe_every: While off, one draft after this many plain steps, so that α keeps being measured.
        memory: Draft positions the acceptance remembers (each older position counts ``1 - 1/memory`` less).
    """

    cost_ratio: float
    verify: Callable[..., float]
    prior_alpha: float = 0.5
    prior_weight: float = 8.0
    rungs: tuple[int, ...] = LADDER
    margin: float = 0.1
    probe_every: int = 32
    memory: float = 64.0
    accepted: float = 0.0
    trials: float = 0.0
    idle: int = 0
    rung: int = -1  # index into rungs; -1 until the first choice starts at the best rung for the prior
    on: bool = False  # the toggle's last choice (a probe while off leaves it False)

    @property
    def max_gamma(self) -> int:
        """The longest draft."""
        return self.rungs[-1]

    @property
    def alpha(self) -> float:
        """The session's acceptance estimate (successes over positions tried, recent ones weighing most, with the
        prior's weight)."""
        return (self.accepted + self.prior_alpha * self.prior_weight) / (self.trials + self.prior_weight)

    def speedup(self, gamma: int, batch: int = 1, forced: int = 0) -> float:
        """The expected speedup of drafts of ``gamma`` tokens at the current α and ``batch`` sessions, in a step that
        feeds ``forced`` grammar tokens before them (a plain step feeds those too: ``forced + 1`` tokens for
        ``v(forced + 1)``)."""
        if forced <= 0 or gamma <= 0:
            return expected_speedup(self.alpha, gamma, self.cost_ratio, self.verify(gamma + 1, batch))
        plain = (forced + 1) / self.verify(forced + 1, batch)
        drafted = forced + expected_tokens(self.alpha, gamma)
        return drafted / (gamma * self.cost_ratio + self.verify(forced + gamma + 1, batch)) / plain

    def best(self, batch: int = 1) -> tuple[int, float]:
        """The rung with the highest expected speedup at the current α, and that speedup."""
        speedup, gamma = max((self.speedup(gamma, batch), gamma) for gamma in self.rungs)
        return gamma, speedup

    def choose(self, batch: int = 1, forced: int = 0) -> int:
        """The next draft's length at ``batch`` sessions, in a step that feeds ``forced`` grammar tokens first; 0
        means a plain step (speculation does not pay now). The ladder and the toggle price a draft after a decode
        step alone; a probe due while off waits for a step whose forced tokens make it cheapest."""
        if self.rung < 0:
            self.rung = self.rungs.index(self.best(batch)[0])
        here = self.speedup(self.rungs[self.rung], batch)
        if self.rung + 1 < len(self.rungs) and self.speedup(self.rungs[self.rung + 1], batch) > here:
            self.rung += 1
        elif self.rung > 0 and self.speedup(self.rungs[self.rung - 1], batch) > here:
            self.rung -= 1
        gamma = self.rungs[self.rung]
        self.on = self.speedup(gamma, batch) >= 1.0 + self.margin
        if self.on:
            self.idle = 0
            return gamma
        self.idle += 1
        waited_long = self.idle >= PROBE_PATIENCE * self.probe_every
        # Priced only once due: this runs at every step while speculation is off.
        if self.idle >= self.probe_every and (waited_long or self.speedup(self.rungs[0], batch, forced) >= 1.0):
            self.idle = 0
            return self.rungs[0]  # the cheapest draft: keeps α measured, so that speculation can come back on
        return 0

    def record(self, drafted: int, accepted: int) -> None:
        """Takes one verified draft into account.

        Args:
            drafted: Its length.
            accepted: Its tokens the target agreed with (a prefix).
        """
        tried = accepted + (1 if accepted < drafted else 0)  # positions tried: up to the first rejection
        keep = (1.0 - 1.0 / self.memory) ** tried
        self.accepted = self.accepted * keep + accepted
        self.trials = self.trials * keep + tried


def rung_thresholds(
    cost_ratio: float, verify: Callable[..., float], rungs: tuple[int, ...] = LADDER, batch: int = 1
) -> list[float | None]:
    """Where the ladder moves: for each pair of neighbouring rungs, the acceptance above which the longer draft is
    expected to pay more (``None`` where it never does), at ``batch`` sessions.

    Args:
        cost_ratio: A draft token's cost over one decode step.
        verify: ``v(k, batch)``.
        rungs: The ladder.
        batch: Sessions in the forward.

    Returns:
        One threshold per neighbouring pair, rounded to 3 decimals.
    """
    thresholds: list[float | None] = []
    for short, long in zip(rungs, rungs[1:], strict=False):

        def longer_pays(alpha: float, short: int = short, long: int = long) -> bool:
            gain = expected_speedup(alpha, long, cost_ratio, verify(long + 1, batch))
            return gain > expected_speedup(alpha, short, cost_ratio, verify(short + 1, batch))

        if not longer_pays(0.999):
            thresholds.append(None)
            continue
        low, high = 0.0, 0.999
        while high - low > 1e-4:
            middle = (low + high) / 2
            low, high = (low, middle) if longer_pays(middle) else (middle, high)
        thresholds.append(round(high, 3))
    return thresholds


@dataclass
class SpeculationStats:
    """Decoding metrics of one drafter over sessions: acceptance, lengths, time per step, throughput.

    A draft here is the drafter's own tokens: the grammar's forced tokens fed in the same step are counted in
    ``forced_tokens`` alone, so that ``alpha`` is the drafter's acceptance, the one the cost model prices.

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
    drafter_drafts: int = 0  # drafts with the drafter's own tokens (not only the grammar's forced ones)
    drafter_tokens: int = 0  # ... and their drafter tokens
    forced_tokens: int = 0  # grammar-forced tokens fed with the step before them (with a drafter or without)
    switched_on_batch: int = 0  # the largest active batch at which the toggle had speculation on
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
        """Adds the counts of ``other``, another run's stats of the same drafter, to these."""
        counts = ("actions", "tokens", "decode_s", "target_forwards", "target_s", "drafts", "drafted", "accepted")
        for name in (*counts, "draft_s", "plain_steps", "drafter_drafts", "drafter_tokens", "forced_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.switched_on_batch = max(self.switched_on_batch, other.switched_on_batch)
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
            ``drafter_ms_per_token``, ``target_ms_per_forward``, ``tokens_per_s`` (action tokens over decode time),
            ``speculative_share`` (steps verifying a drafter's tokens over all steps after the prompt),
            ``mean_draft_length`` (the drafter's tokens per such step), ``switched_on_batch`` (the largest active
            batch at which speculation was on; 0: never) and the counts.
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
            "forced_tokens": self.forced_tokens,
            "speculative_share": ratio(self.drafter_drafts, self.target_forwards),
            "mean_draft_length": ratio(self.drafter_tokens, self.drafter_drafts),
            "switched_on_batch": self.switched_on_batch,
        }


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
