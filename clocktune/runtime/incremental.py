"""Batch-1 incremental decoding over a KV cache under the streaming mask, and how fast it runs.

What a policy does with a local model (``model_policy``): feed new tokens at their times over the cache, each
attending to the earlier tokens still visible then (docs/design.md §4), and read the next token's logits. Timing the
same calls gives the rates a device profile charges (``device_profiles``). Only torch and transformers are
imported, so the GPU check can time a model without the rest of clocktune's dependencies.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


def streaming_mask(
    start: int, times: list[float], visible_until: list[float], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """The additive 4D mask of tokens ``start..start+n-1`` fed at ``times`` over a cache of ``start`` tokens.

    Args:
        start: Tokens already in the cache.
        times: Time of each new token.
        visible_until: Until when each token, cached or new, may be attended (at least ``start + n`` of them).
        dtype: The model's dtype (hidden entries get its most negative value).
        device: The model's device.

    Returns:
        A ``(1, 1, n, start + n)`` mask: each new token sees the earlier tokens still visible at its time, and
        itself. This is the training rule of :func:`clocktune.masks.build_float_mask` (no sink, no window) for one
        row's last ``n`` queries, built from the new tokens' times alone; tests/test_runtime.py checks that a
        policy's logits match a full forward under that mask.
    """
    n = len(times)
    total = start + n
    until = torch.tensor(visible_until[:total], dtype=torch.float64)
    fed_at = torch.tensor(times, dtype=torch.float64)
    k = torch.arange(total)
    q = torch.arange(start, total)
    allowed = (k[None, :] <= q[:, None]) & (until[None, :] > fed_at[:, None])
    allowed |= k[None, :] == q[:, None]
    mask = torch.zeros(n, total, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def feed(model: Any, cache: Any, ids: list[int], times: list[float], visible_until: list[float]) -> torch.Tensor:
    """Feeds ``ids`` to ``model`` over its KV ``cache`` under the streaming mask, as a policy does at batch size 1.

    Args:
        model, cache, ids, times, visible_until: As :func:`feed_rows` takes them.

    Returns:
        The next token's logits after the last id.
    """
    return feed_rows(model, cache, ids, times, visible_until, 1)[0]


def feed_rows(
    model: Any, cache: Any, ids: list[int], times: list[float], visible_until: list[float], rows: int
) -> torch.Tensor:
    """:func:`feed` keeping the logits of the last ``rows`` positions: a speculative draft's verification.

    A draft of γ tokens after the last chosen token is verified by feeding those γ + 1 tokens in one forward: the
    mask gets γ + 1 rows, each new token seeing the visible context and the tokens before it (all fed at the
    action's time), and row ``i`` gives the target's logits after the ``i``-th of them.

    Args:
        model: A causal LM.
        cache: Its ``DynamicCache`` (grown by ``len(ids)``).
        ids: New token ids.
        times: Time of each new token.
        visible_until: Until when each token, cached or new, may be attended.
        rows: Positions whose logits to return, the last ones (at most ``len(ids)``).

    Returns:
        A ``(rows, vocabulary)`` tensor of next-token logits.
    """
    parameter = next(model.parameters())
    start = cache.get_seq_length()
    positions = torch.arange(start, start + len(ids), device=parameter.device)[None]
    output = model(
        input_ids=torch.tensor([ids], device=parameter.device),
        attention_mask=streaming_mask(start, times, visible_until, parameter.dtype, parameter.device),
        position_ids=positions,
        cache=cache,
        use_cache=True,
        logits_to_keep=rows,  # only what is read: the vocabulary projection of a prefill is most of its cost
    )
    return output.logits[0, -rows:]


def crop_cache(cache: Any, length: int) -> None:
    """Drops every layer of a ``DynamicCache`` back to its first ``length`` tokens.

    Per layer, because a layer-skip drafter (``clocktune.runtime.drafters``) grows only the first layers of the
    cache it shares with its target, and transformers' ``crop`` removes the same count from every layer.

    Args:
        cache: The cache.
        length: Tokens to keep (layers already at most that long are left as they are).
    """
    for layer in cache.layers:
        extra = layer.get_seq_length() - length
        if extra > 0:
            layer.crop(-extra)


@dataclass(frozen=True)
class Rates:
    """How fast a model reads and writes at batch size 1, the fields of a device profile.

    Args:
        prefill_tokens_per_s: Tokens read per second when many arrive at once.
        decode_tokens_per_s: Tokens written per second, one forward each.
        action_overhead_s: What an action's prompt forward costs beyond one decode step.
    """

    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    action_overhead_s: float


def _seconds(action: Callable[[], Any], device: torch.device) -> float:
    started = time.perf_counter()
    action()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # kernels run asynchronously: wait for them before reading the clock
    return time.perf_counter() - started


def measure_rates(
    model: Any,
    context_tokens: int = 1024,
    prefill_tokens: int = 256,
    prompt_tokens: int = 16,
    decode_tokens: int = 32,
    repeats: int = 5,
    seed: int = 0,
) -> Rates:
    """Times ``model`` on its device the way a policy runs it (:func:`feed`).

    The model reads random token ids (speed does not depend on which): first ``context_tokens`` of context,
    untimed, then, ``repeats`` times each and cropped back after each, ``prefill_tokens`` at once (the events
    read between actions) and ``prompt_tokens`` at once (an action's header, clock and state line, whose logits
    give the action's first token); then ``decode_tokens`` single tokens. Medians throughout.

    An action of ``n`` tokens costs one prompt forward and ``n - 1`` single-token forwards, which a profile
    charges as ``action_overhead_s + n / decode_tokens_per_s``: so the overhead is the prompt forward less one
    decode step (never below zero).

    Args:
        model: A causal LM in eval mode, on the device to measure.
        context_tokens: Context in the cache while timing (a session's system prompt and first events).
        prefill_tokens: Tokens per timed prefill.
        prompt_tokens: Tokens of an action's prompt.
        decode_tokens: Single-token forwards timed.
        repeats: Timed prefills and prompt forwards (after one untimed of each, to warm up).
        seed: Seed of the random ids.

    Returns:
        The rates.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    vocab = model.get_input_embeddings().num_embeddings

    def ids(count: int) -> list[int]:
        return torch.randint(vocab, (count,), generator=generator).tolist()

    until = [math.inf] * (context_tokens + max(prefill_tokens, prompt_tokens) + decode_tokens)
    cache = DynamicCache()

    def forward(tokens: list[int]) -> None:
        feed(model, cache, tokens, [0.0] * len(tokens), until)

    def timed_chunk(count: int) -> float:
        times = []
        for _ in range(repeats + 1):
            chunk = ids(count)
            times.append(_seconds(lambda chunk=chunk: forward(chunk), device))
            cache.crop(context_tokens - cache.get_seq_length())  # negative: drops the tokens just fed
        return statistics.median(times[1:])

    with torch.no_grad():
        forward(ids(context_tokens))
        prefill_s = timed_chunk(prefill_tokens)
        prompt_s = timed_chunk(prompt_tokens)
        forward(ids(1))  # warm-up of the single-token path
        decode_s = statistics.median(_seconds(lambda: forward(ids(1)), device) for _ in range(decode_tokens))
    return Rates(
        prefill_tokens_per_s=round(prefill_tokens / prefill_s, 1),
        decode_tokens_per_s=round(1.0 / decode_s, 2),
        action_overhead_s=round(max(prompt_s - decode_s, 0.0), 4),
    )


def measure_verify_ratios(
    model: Any, context_tokens: int = 1024, max_tokens: int = 8, repeats: int = 5, seed: int = 0
) -> tuple[float, dict[int, float]]:
    """Times one decode step and forwards of ``k`` tokens keeping ``k`` rows of logits (a draft's verification).

    Random ids over a cache of ``context_tokens``, cropped back after each forward, medians of ``repeats`` (after
    one untimed each), the sizes interleaved so that a busy spell of a shared machine spreads over all of them.

    Args:
        model: A causal LM in eval mode, on the device to measure.
        context_tokens: Context in the cache while timing.
        max_tokens: Largest ``k``.
        repeats: Timed forwards per size.
        seed: Seed of the random ids.

    Returns:
        ``(step_s, ratios)``: the decode step's seconds and ``v(k)``, a ``k``-token forward over one step
        (``v(1) = 1``), for ``k = 1..max_tokens``.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    vocab = model.get_input_embeddings().num_embeddings
    until = [math.inf] * (context_tokens + max_tokens)
    cache = DynamicCache()
    samples: dict[int, list[float]] = {k: [] for k in range(1, max_tokens + 1)}
    with torch.no_grad():
        context = torch.randint(vocab, (context_tokens,), generator=generator).tolist()
        feed(model, cache, context, [0.0] * context_tokens, until)
        for round_ in range(repeats + 1):
            for k in samples:
                ids = torch.randint(vocab, (k,), generator=generator).tolist()
                seconds = _seconds(
                    lambda ids=ids: feed_rows(model, cache, ids, [0.0] * len(ids), until, len(ids)), device
                )
                crop_cache(cache, context_tokens)
                if round_:  # the first round warms up
                    samples[k].append(seconds)
    step = statistics.median(samples[1])
    return step, {k: round(statistics.median(times) / step, 3) for k, times in samples.items()}
