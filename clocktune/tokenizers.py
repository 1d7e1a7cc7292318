"""Which tokenizer a command-line name means, and the clocktune encoding it gets.

``load_tokenizer`` turns a name (a folder, a Hub id, or ``embedded``) into a tokenizer; ``prepare_tokenizer``
extends it with clock tokens, or checks the encoding it already carries against the one asked for. Both are the
policy of the commands that render and inspect timelines (``clocktune render``, ``clocktune inspect``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_CODEC", "load_tokenizer", "prepare_tokenizer"]

# The codec a tokenizer is extended with when none is asked for.
DEFAULT_CODEC = "abs_bins"


def load_tokenizer(name: str) -> Any:
    """Loads a tokenizer by path or Hub id; ``embedded`` is the embedded SmolLM2 (converted on first use).

    Args:
        name: A folder, a Hub id, or ``"embedded"``.

    Returns:
        The ``AutoTokenizer``.

    Raises:
        FileNotFoundError: When a path (starting with ``/``, ``.`` or ``~``) does not exist.
        OSError: When transformers cannot load it.
    """
    # Imported here so that importing the command line does not import transformers (and torch).
    from transformers import AutoTokenizer

    from clocktune.models import EMBEDDED, resolve_model_path

    if name == EMBEDDED:
        name = resolve_model_path(name)
    elif name.startswith(("/", ".", "~")) and not Path(name).expanduser().exists():
        # Otherwise transformers reports it as a malformed Hub id.
        raise FileNotFoundError(f"{name}: no such tokenizer folder")
    return AutoTokenizer.from_pretrained(Path(name).expanduser() if name.startswith("~") else name)


def prepare_tokenizer(tokenizer: Any, model_format: str | None, time_codec: str | None) -> Any:
    """Extends a tokenizer for clocktune, or checks the encoding it already carries.

    Args:
        tokenizer: A tokenizer, extended or not; extended in place when it carries no clocktune encoding.
        model_format: The wanted model format (needed to extend); ``None`` accepts what the tokenizer carries.
        time_codec: The wanted codec name; ``None`` means the tokenizer's own, or ``abs_bins`` when extending.

    Returns:
        The tokenizer's ``clocktune.encoding.Encoding``.

    Raises:
        ValueError: When the carried encoding differs from the one asked for, or there is none and no
            ``model_format`` to extend with.
    """
    from clocktune.encoding import extend_tokenizer, get_format, load_encoding

    template = tokenizer.chat_template
    # A clocktune template that load_encoding rejects (e.g. a newer version) must fail, not be overwritten.
    if isinstance(template, str) and "clocktune-encoding" in template:
        encoding = load_encoding(tokenizer)
        carried = f"model format {encoding.model_format.name!r} and time codec {encoding.codec.name!r}"
        if model_format is not None and get_format(model_format).name != encoding.model_format.name:
            raise ValueError(f"tokenizer is already extended for {carried}, not model format {model_format!r}")
        if time_codec is not None and time_codec != encoding.codec.name:
            raise ValueError(f"tokenizer is already extended for {carried}, not time codec {time_codec!r}")
        return encoding
    if model_format is None:
        raise ValueError("the tokenizer carries no clocktune encoding: pass --model-format to extend it")
    extend_tokenizer(tokenizer, time_codec or DEFAULT_CODEC, model_format)
    return load_encoding(tokenizer)
