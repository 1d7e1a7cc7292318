"""Device profiles for the virtual clock: by name, from a YAML file, or measured on the device at hand.

The built-in profiles (``clocktune.clock.PROFILES``) are rough figures. :func:`measure_device_profile` times a
model the way :class:`~clocktune.runtime.model_policy.ModelPolicy` runs it (batch size 1, a KV cache, the
streaming mask) and returns the profile that charges the virtual clock what this device really takes, so that
``clocktune eval --profile measured.yaml`` replays sessions at the pace of the hardware they will be served on.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

from clocktune.clock import PROFILES, DeviceProfile
from clocktune.timeline.io import atomic_write_lines
from clocktune.yaml_config import load_validated_yaml

_ADAPTER = TypeAdapter(DeviceProfile)


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
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"profile {name_or_path!r}: not one of {', '.join(sorted(PROFILES))}, and not a file")
    return load_validated_yaml(path, _ADAPTER, "device profile")


def save_device_profile(profile: DeviceProfile, path: str | Path) -> None:
    """Writes a profile as YAML, atomically, in the form :func:`load_device_profile` reads.

    Args:
        profile: The profile.
        path: Destination file; its folder is created.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_lines(path, [yaml.safe_dump(asdict(profile), sort_keys=False)])


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
