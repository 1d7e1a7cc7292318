"""What speculation costs on the device at hand, and the drafter those costs choose.

Three measurements feed the cost model of ``speculative``: the engine's packed forward timed over a sweep of batch
sizes and tokens per session, fitted as a :class:`~clocktune.runtime.speculative.Roofline` (what a verification costs
at the batch the engine is running); a decode step and ``k``-token forwards at batch 1 (``v(k)``, the table older
profiles hold); and a draft token of each drafter over a decode step (``c``). ``clocktune profile`` writes them into
the device profile's ``speculation`` section; ``--draft auto`` picks the drafter they say pays most.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from clocktune.runtime.drafters import CANDIDATES, Drafter, DraftRequest, make_drafter
from clocktune.runtime.engine import Engine, Forward, drive
from clocktune.runtime.incremental import measure_verify_ratios
from clocktune.runtime.speculative import (
    Roofline,
    SpeculationCosts,
    acceptance_prior,
    draft_pays,
    expected_speedup,
)

__all__ = [
    "ROOFLINE_BATCHES",
    "ROOFLINE_TOKENS",
    "describe_roofline",
    "measure_draft_ratio",
    "measure_roofline",
    "measure_speculation_costs",
    "resolve_drafter",
]

# The sweep of `clocktune profile`: sessions per forward, and tokens per session (1: a decode step; k: a draft of
# k - 1 tokens verified).
ROOFLINE_BATCHES = (1, 2, 4, 8, 16, 32)
ROOFLINE_TOKENS = (1, 2, 3, 5, 7)


def _timed(action: Callable[[], Any], device: torch.device) -> float:
    # Wall seconds of one call, the device's queue drained before and after.
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    action()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def _random_ids(model: Any, count: int, generator: torch.Generator) -> list[int]:
    vocab = model.get_input_embeddings().num_embeddings
    return torch.randint(vocab, (count,), generator=generator).tolist()


def measure_roofline(
    model: Any,
    context_tokens: int = 512,
    batches: Sequence[int] = ROOFLINE_BATCHES,
    tokens_per_row: Sequence[int] = ROOFLINE_TOKENS,
    repeats: int = 3,
    seed: int = 0,
) -> tuple[Roofline, list[tuple[int, int, float]]]:
    """Times the engine's packed forward of ``B`` sessions feeding ``k`` tokens each, over caches of
    ``context_tokens``, for every ``B`` and ``k``, and fits the roofline.

    The sizes are interleaved in each round, so that a busy spell of a shared machine spreads over all of them; each
    forward is cropped off again. Medians of ``repeats`` rounds after one untimed round.

    Args:
        model: A causal LM in eval mode, on the device to measure.
        context_tokens: Context in each session's cache.
        batches: Sessions per forward.
        tokens_per_row: Tokens each session feeds (and rows of logits it keeps).
        repeats: Timed rounds.
        seed: Seed of the random ids.

    Returns:
        ``(roofline, samples)``: the fit and the medians it was fitted to, as ``(tokens, rows, seconds)``.
    """
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    engine = Engine(model, batch_size=max(batches))
    context = tuple(_random_ids(model, context_tokens, generator))
    sessions = [engine.open(context) for _ in range(max(batches))]  # the context computed once, then copied
    until = [math.inf] * (context_tokens + max(tokens_per_row))
    timings: dict[tuple[int, int], list[float]] = {(b, k): [] for b in batches for k in tokens_per_row}
    for round_ in range(repeats + 1):
        for batch, tokens in timings:
            requests = [
                (session, Forward(_random_ids(model, tokens, generator), [0.0] * tokens, until, tokens))
                for session in sessions[:batch]
            ]
            seconds = _timed(lambda requests=requests: engine.forward(requests), device)
            for session in sessions[:batch]:
                session.crop(context_tokens)
            if round_:  # the first round warms up
                timings[(batch, tokens)].append(seconds)
    for session in sessions:
        session.close()
    samples = [(b * k, b, statistics.median(times)) for (b, k), times in timings.items()]
    return Roofline.fit(samples), samples


def describe_roofline(costs: SpeculationCosts) -> str:
    """One line on the engine's measured roofline and what verifying a 4-token draft costs at batch 1, 16 and 64."""
    roof = costs.roofline
    if roof is None:
        return "engine roofline: not measured"
    single = "" if roof.single_s is None else f"a forward of one token {roof.single_s * 1e3:.2f} ms; from two, "
    return (
        f"engine roofline: {single}{roof.overhead_s * 1e3:.2f} ms a forward, plus {roof.memory_s * 1e3:.2f} ms up to "
        f"{roof.knee:.0f} tokens and {roof.token_s * 1e3:.3f} ms a token past them, {roof.row_s * 1e3:.3f} ms a "
        f"session; a 4-token draft's "
        f"verification costs {costs.verify(5):.2f} steps at batch 1, {costs.verify(5, 16):.2f} at 16, "
        f"{costs.verify(5, 64):.2f} at 64"
    )


def measure_draft_ratio(
    drafter: Drafter, model: Any, context_tokens: int = 512, gamma: int = 4, repeats: int = 5
) -> float:
    """A draft token's cost over one target decode step, both through the engine, on random ids over a session of
    ``context_tokens``.

    Args:
        drafter: The drafter.
        model: Its target, in eval mode.
        context_tokens: Context in the session's cache.
        gamma: Tokens per timed draft.
        repeats: Timed drafts and target steps (medians; one untimed of each first).

    Returns:
        The ratio ``c`` of the cost model.
    """
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(0)
    ids = _random_ids(model, context_tokens + 1, generator)
    until = [math.inf] * (context_tokens + gamma + 8)
    times = [0.0] * context_tokens
    engine = Engine(model)
    session = engine.open(tuple(ids[:context_tokens]))
    steps, drafts = [], []
    for _ in range(repeats + 1):
        steps.append(_timed(lambda: session.forward(Forward(ids[context_tokens:], [0.0], until)), device))
        session.crop(context_tokens)
    draft_session = drafter.session()
    for _ in range(repeats + 1):
        request = DraftRequest(
            ids, context_tokens, session, times, 0.0, until, gamma, end_id=-1, system=context_tokens
        )
        started = time.perf_counter()
        draft = drive(draft_session.propose(request), session.forward)
        drafts.append((time.perf_counter() - started) / max(len(draft.tokens), 1))
        session.crop(context_tokens)
    draft_session.close()
    session.close()
    return statistics.median(drafts[1:]) / statistics.median(steps[1:])


def measure_speculation_costs(
    model: Any,
    drafters: Sequence[str] = CANDIDATES,
    context_tokens: int = 1024,
    repeats: int = 5,
    batches: Sequence[int] = ROOFLINE_BATCHES,
) -> SpeculationCosts:
    """Measures the cost model's inputs on this device: a decode step, ``v(k)``, each drafter's ``c`` and the
    engine's roofline over ``batches``.

    Args:
        model: The target, in eval mode on its device.
        drafters: Drafter names to time (a quantized one is skipped where torchao is not installed).
        context_tokens: Context in the cache while timing.
        repeats: Timed forwards per size (medians).
        batches: Batch sizes of the roofline's sweep (none: no roofline).

    Returns:
        The costs (without acceptance: that needs sessions, ``speculation_runs``).
    """
    with torch.no_grad():
        step_s, ratios = measure_verify_ratios(model, context_tokens, max_tokens=9, repeats=repeats)
        roofline = None
        if batches:
            roofline, _ = measure_roofline(model, min(context_tokens, 512), batches, repeats=max(1, repeats // 2))
        draft_ratio = {}
        for name in drafters:
            try:
                drafter = make_drafter(name, model)
            except ImportError:
                continue  # torchao is an optional dependency
            if drafter is not None:
                ratio = measure_draft_ratio(drafter, model, context_tokens, repeats=repeats)
                draft_ratio[drafter.name] = round(ratio, 4)
    return SpeculationCosts(round(step_s, 5), ratios, draft_ratio, roofline=roofline)


def resolve_drafter(
    name: str, model: Any, costs: SpeculationCosts | None = None, margin: float = 0.1, max_gamma: int = 6
) -> tuple[Drafter | None, SpeculationCosts | None]:
    """The drafter a ``--draft`` value names, with the costs its cost model needs (measured here when missing).

    ``auto`` takes the candidate with the highest expected speedup at batch 1 at its expected acceptance (measured on
    sessions when the profile has it, else a prior), and none when no candidate beats plain decoding by ``margin``:
    on the 2-core CPU the int8 drafter costs more than a target step (``c > 1``), so it never pays there. Whether a
    session drafts at a larger batch the toggle decides at each step.

    Args:
        name: A :data:`~clocktune.runtime.drafters.DRAFTERS` value.
        model: The target.
        costs: The device profile's speculation section, if any.
        margin: Required expected gain over plain decoding, for ``auto``.
        max_gamma: Longest draft considered.

    Returns:
        ``(drafter, costs)``; ``(None, costs)`` for plain decoding.
    """
    if name == "none":
        return None, costs
    quick = {"context_tokens": 512, "repeats": 3, "batches": (1, 4, 16)}
    if name != "auto":
        drafter = make_drafter(name, model)
        if costs is None or drafter.name not in costs.draft_ratio:
            measured = measure_speculation_costs(model, [name], **quick)
            if costs is not None:
                measured = SpeculationCosts(
                    costs.step_s,
                    costs.verify_ratio,
                    {**costs.draft_ratio, **measured.draft_ratio},
                    costs.acceptance,
                    costs.decode_tokens_per_s,
                    costs.roofline or measured.roofline,
                )
            costs = measured
        return drafter, costs
    if costs is None or not costs.draft_ratio:
        costs = measure_speculation_costs(model, CANDIDATES, **quick)
    scores = {}
    for drafter_name, ratio in costs.draft_ratio.items():
        alpha = acceptance_prior(drafter_name, None, costs)
        if draft_pays(alpha, ratio, costs.verify, margin, max_gamma):
            scores[drafter_name] = max(
                expected_speedup(alpha, gamma, ratio, costs.verify(gamma + 1)) for gamma in range(1, max_gamma + 1)
            )
    if not scores:
        return None, costs
    return make_drafter(max(scores, key=scores.__getitem__), model), costs
