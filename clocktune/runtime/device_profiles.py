"""Device profiles for the virtual clock: by name, from a YAML file, or measured on the device at hand.

The built-in profiles (``clocktune.clock.PROFILES``) are rough figures. :func:`measure_device_profile` times a
model the way :class:`~clocktune.runtime.model_policy.ModelPolicy` runs it (batch size 1, a KV cache, the
streaming mask) and returns the profile that charges the virtual clock what this device really takes, so that
``clocktune eval --profile measured.yaml`` replays sessions at the pace of the hardware they will be served on.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from clocktune.clock import PROFILES, DeviceProfile
from clocktune.timeline.io import atomic_write_lines

_ADAPTER = TypeAdapter(DeviceProfile)


def load_device_profile(name_or_path: str) -> DeviceProfile:
    """A built-in profile by name, or a profile from a YAML file (the fields of :class:`DeviceProfile`).

    Args:
        name_or_path: A key of ``clocktune.clock.PROFILES`` or a YAML file such as ``clocktune profile`` writes.

    Returns:
        The profile.

    Raises:
        ValueError: For a name that is neither a profile nor a file, or a file with bad fields (each named).
    """
    if name_or_path in PROFILES:
        return PROFILES[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"profile {name_or_path!r}: not one of {', '.join(sorted(PROFILES))}, and not a file")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    try:
        return _ADAPTER.validate_python(raw)
    except ValidationError as error:
        lines = [
            f"{path}:{'.'.join(str(part) for part in detail['loc']) or '-'}: {detail['msg']}"
            for detail in error.errors(include_url=False)
        ]
        raise ValueError("invalid device profile:\n" + "\n".join(lines)) from None


def save_device_profile(profile: DeviceProfile, path: str | Path) -> None:
    """Writes a profile as YAML, atomically, in the form :func:`load_device_profile` reads.

    Args:
        profile: The profile.
        path: Destination file.
    """
    atomic_write_lines(path, [yaml.safe_dump(asdict(profile), sort_keys=False)])


def _seconds(action: Any, device: Any) -> float:
    import torch

    started = time.perf_counter()
    action()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # kernels run asynchronously: wait for them before reading the clock
    return time.perf_counter() - started


def measure_device_profile(
    model: Any,
    name: str,
    context_tokens: int = 1024,
    prefill_tokens: int = 256,
    prompt_tokens: int = 16,
    decode_tokens: int = 32,
    repeats: int = 5,
    seed: int = 0,
) -> DeviceProfile:
    """Times ``model`` on its device the way a policy runs it and returns the matching profile.

    The model reads random token ids (speed does not depend on which): first ``context_tokens`` of context,
    untimed, then, ``repeats`` times each and cropped back after each, ``prefill_tokens`` at once (the events
    read between actions) and ``prompt_tokens`` at once (an action's header, clock and state line, whose logits
    give the action's first token); then ``decode_tokens`` single tokens. Medians throughout.

    An action of ``n`` tokens costs one prompt forward and ``n - 1`` single-token forwards, which the profile
    charges as ``action_overhead_s + n / decode_tokens_per_s``: so the overhead is the prompt forward less one
    decode step (never below zero).

    Args:
        model: A causal LM in eval mode, on the device to measure.
        name: The profile's name.
        context_tokens: Context in the cache while timing (a session's system prompt and first events).
        prefill_tokens: Tokens per timed prefill.
        prompt_tokens: Tokens of an action's prompt.
        decode_tokens: Single-token forwards timed.
        repeats: Timed prefills and prompt forwards (after one untimed of each, to warm up).
        seed: Seed of the random ids.

    Returns:
        The measured profile.
    """
    import torch
    from transformers import DynamicCache

    from clocktune.runtime.model_policy import feed

    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    vocab = model.get_input_embeddings().num_embeddings

    def ids(count: int) -> list[int]:
        return torch.randint(vocab, (count,), generator=generator).tolist()

    total = context_tokens + max(prefill_tokens, prompt_tokens) + decode_tokens
    until = [math.inf] * total
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
    return DeviceProfile(
        name=name,
        prefill_tokens_per_s=round(prefill_tokens / prefill_s, 1),
        decode_tokens_per_s=round(1.0 / decode_s, 2),
        action_overhead_s=round(max(prompt_s - decode_s, 0.0), 4),
    )
