"""Device profiles for the virtual clock: by name, from a YAML file, or measured on the device at hand.

The built-in profiles (``clocktune.clock.PROFILES``) are rough figures. :func:`measure_device_profile` times a
model the way :class:`~clocktune.runtime.model_policy.ModelPolicy` runs it (batch size 1, a KV cache, the
streaming mask) and returns the profile that charges the virtual clock what this device really takes, so that
``clocktune eval --profile measured.yaml`` replays sessions at the pace of the hardware they will be served on.

A measured file may also hold a ``speculation`` section (:class:`~clocktune.runtime.speculative.SpeculationCosts`):
the costs of speculative decoding on that device (a decode step, a ``k``-token verification over a step, each
drafter's token over a step) and, when measured on sessions, each drafter's acceptance and action tokens/s. The
cost model of speculative decoding reads it (:func:`load_speculation_costs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import GetCoreSchemaHandler, TypeAdapter
from pydantic_core import CoreSchema

from clocktune.clock import PROFILES, DeviceProfile
from clocktune.runtime.speculative import SpeculationCosts
from clocktune.timeline.io import atomic_write_lines
from clocktune.yaml_config import every_field_required, load_validated_yaml

if TYPE_CHECKING:
    from clocktune.timeline.events import Timeline
    from clocktune.tools import BackendFactory


@dataclass
class _ProfileFile(DeviceProfile):
    """A profile file: every field of :class:`DeviceProfile` required, and an optional ``speculation`` section."""

    speculation: SpeculationCosts | None = None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        schema = every_field_required(handler(source), handler)
        for item in handler.resolve_ref_schema(schema)["schema"]["fields"]:
            if item["name"] == "speculation":  # files written before speculation was measured have none
                item["schema"] = {"type": "default", "schema": item["schema"], "default": None}
        return schema


_ADAPTER = TypeAdapter(_ProfileFile)


def load_device_profile(name_or_path: str) -> DeviceProfile:
    """A built-in profile by name, or a profile from a YAML file (every field of :class:`DeviceProfile`).

    A file must give every field: a missing one is an error, never a built-in profile's figure.

    Args:
        name_or_path: A key of ``clocktune.clock.PROFILES`` or a YAML file such as ``clocktune profile`` writes.

    Returns:
        The profile.

    Raises:
        ValueError: For a name that is neither a profile nor a file, or a file with missing or bad fields (each
            named ``file:field``).
    """
    if name_or_path in PROFILES:
        return PROFILES[name_or_path]
    loaded = _load_file(name_or_path)
    return DeviceProfile(
        loaded.name, loaded.prefill_tokens_per_s, loaded.decode_tokens_per_s, loaded.action_overhead_s
    )


def _load_file(name_or_path: str) -> _ProfileFile:
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"profile {name_or_path!r}: not one of {', '.join(sorted(PROFILES))}, and not a file")
    return load_validated_yaml(path, _ADAPTER, "device profile")


def load_speculation_costs(name_or_path: str) -> SpeculationCosts | None:
    """The ``speculation`` section of a measured profile file.

    Args:
        name_or_path: As :func:`load_device_profile` takes it.

    Returns:
        The measured costs; ``None`` for a built-in profile or a file without the section.

    Raises:
        ValueError: As :func:`load_device_profile`.
    """
    if name_or_path in PROFILES:
        return None
    return _load_file(name_or_path).speculation


def save_device_profile(profile: DeviceProfile, path: str | Path, speculation: SpeculationCosts | None = None) -> None:
    """Writes a profile as YAML, atomically, in the form :func:`load_device_profile` reads.

    Args:
        profile: The profile.
        path: Destination file; its folder is created.
        speculation: Measured costs of speculative decoding, written as the ``speculation`` section.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fields = asdict(profile)
    if speculation is not None:
        fields["speculation"] = asdict(speculation)
    atomic_write_lines(path, [yaml.safe_dump(fields, sort_keys=False)])


def measure_device_profile(model: Any, name: str, **sizes: int) -> DeviceProfile:
    """Times ``model`` on its device the way a policy runs it and returns the matching profile.

    Args:
        model: A causal LM in eval mode, on the device to measure.
        name: The profile's name.
        **sizes: Token counts and repeats of :func:`~clocktune.runtime.incremental.measure_rates`.

    Returns:
        The measured profile.
    """
    from clocktune.runtime.incremental import measure_rates

    return DeviceProfile(name, **asdict(measure_rates(model, **sizes)))


def measure_speculation(
    model: Any,
    tokenizer: Any,
    drafters: list[str],
    context_tokens: int = 1024,
    timelines: list[Timeline] | None = None,
    backends: BackendFactory | None = None,
    progress: Callable[[str], None] | None = print,
    constrained: bool = True,
) -> SpeculationCosts:
    """A profile's speculation section: the cost model's inputs timed on random ids, then (given held-out
    timelines) each drafter's acceptance and action tokens/s on live sessions of the model.

    Args:
        model: The target, in eval mode on the device measured.
        tokenizer: Its tokenizer (for sessions).
        drafters: Drafter names (a quantized one is left out where torchao is not installed).
        context_tokens: Context in the cache while timing.
        timelines: Held-out timelines to play under each drafter (``None``: costs only).
        backends: Their tool backends (``data_gen.backends.make_backend``).
        progress: Prints what was measured (``None``: silent).
        constrained: The sessions decode under the grammar of valid actions (as the evaluation to be charged will).

    Returns:
        The measured section.
    """
    from clocktune.runtime.speculation_costs import describe_roofline, measure_speculation_costs
    from clocktune.runtime.speculative import expected_speedup

    say = progress or (lambda line: None)
    costs = measure_speculation_costs(model, drafters, context_tokens=context_tokens)
    verify = ", ".join(f"v({k}) {ratio:.2f}" for k, ratio in costs.verify_ratio.items())
    say(f"speculation: decode step {costs.step_s * 1000:.1f} ms; a k-token forward over a step: {verify}")
    say(describe_roofline(costs))
    if timelines and backends is not None:
        from clocktune.runtime.speculation_runs import play_drafters

        measured = [d for d in drafters if any(k.partition(":")[0] == d.partition(":")[0] for k in costs.draft_ratio)]
        runs = play_drafters(
            model, tokenizer, timelines, backends, measured, costs, progress=progress, constrained=constrained
        )
        acceptance = {run.drafter: round(run.stats.alpha, 4) for run in runs.values() if run.stats.alpha is not None}
        rates = {run.drafter: round(run.tokens_per_s, 2) for run in runs.values()}
        costs = replace(costs, acceptance=acceptance, decode_tokens_per_s=rates)
    for drafter, ratio in costs.draft_ratio.items():
        alpha = costs.acceptance.get(drafter)
        line = f"  {drafter}: a draft token costs {ratio:.3f} of a step"
        if alpha is not None:
            gain, gamma = max(
                (expected_speedup(alpha, gamma, ratio, costs.verify(gamma + 1)), gamma) for gamma in range(1, 7)
            )
            line += f"; acceptance {alpha:.3f}, expected {gain:.2f}x at draft length {gamma}"
            plain, rate = costs.decode_tokens_per_s.get("none"), costs.decode_tokens_per_s.get(drafter)
            if plain and rate:
                line += f"; {rate} action tokens/s against {plain} ({rate / plain:.2f}x)"
        say(line)
    return costs


def charge_drafter(profile: DeviceProfile, costs: SpeculationCosts, draft: str) -> DeviceProfile:
    """The profile with the decode rate that speculative decoding with ``draft`` reached on sessions.

    The virtual clock then charges what the device does with that drafter: the plain decode rate times the
    speedup of action tokens/s measured on live sessions (:func:`measure_speculation` with timelines).

    Args:
        profile: The measured profile (plain decoding).
        costs: Its speculation section, measured on sessions.
        draft: A drafter name (``layer_skip`` matches ``layer_skip:12``).

    Returns:
        The profile with ``decode_tokens_per_s`` scaled.

    Raises:
        ValueError: When ``draft`` was not measured on sessions.
    """
    rates = costs.decode_tokens_per_s
    name = next((key for key in rates if key == draft or key.partition(":")[0] == draft), None)
    if name is None or not rates.get("none"):
        raise ValueError(f"--draft {draft}: measure it on sessions first (--data, with it among --drafters)")
    return replace(profile, decode_tokens_per_s=round(profile.decode_tokens_per_s * rates[name] / rates["none"], 2))
