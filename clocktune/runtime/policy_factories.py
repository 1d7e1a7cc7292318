"""Building policies by name: scripted strategies, a local Hugging Face checkpoint, or an OpenAI endpoint."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clocktune.runtime.openai_policy import DEFAULT_REQUEST_TIMEOUT_S, DEFAULT_SESSION_BUDGET_S
from clocktune.runtime.policy import PolicyFactory, PolicySpec
from clocktune.runtime.scripted import SCRIPTED_POLICIES, ScriptedPolicy
from clocktune.timeline.events import Timeline

if TYPE_CHECKING:  # torch and numpy load only with a checkpoint
    from clocktune.runtime.speculative import SpeculationCosts

# ``--model`` values that mean "follow the recorded plan" rather than a checkpoint.
SCRIPTED_MODELS = ("scripted", "oracle")
# ``--model openai:MODEL[@BASE_URL]``: an OpenAI-compatible endpoint (key from ``OPENAI_API_KEY``).
OPENAI_PREFIX = "openai:"


@dataclass(frozen=True)
class EndpointLimits:
    """How far an OpenAI-compatible endpoint policy trusts and waits for its server.

    Args:
        request_timeout_s: Wall-clock bound on each request, a trickling reply included.
        session_budget_s: Seconds of endpoint time one session may spend in all; then it gives up.
        allow_insecure_http: Send the API key over plain ``http`` to a host that is not loopback.
    """

    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    session_budget_s: float = DEFAULT_SESSION_BUDGET_S
    allow_insecure_http: bool = False


def is_checkpoint(model: str) -> bool:
    """Whether a ``--model`` value names a checkpoint folder (not a scripted policy or an endpoint)."""
    return model not in SCRIPTED_MODELS and not model.startswith(OPENAI_PREFIX)


def is_adapter(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a LoRA adapter (``adapter_config.json``) rather than a full model."""
    return Path(folder, "adapter_config.json").exists()


def model_load_kwargs(model_args: Any) -> dict[str, Any]:
    """The loading settings a recipe's ``ModelConfig`` names (``dtype``, ``attn_implementation``).

    Args:
        model_args: TRL's ``ModelConfig`` (or anything with those attributes).

    Returns:
        Keyword arguments for :func:`load_policy_model`.
    """
    return {"dtype": model_args.dtype, "attn_implementation": model_args.attn_implementation}


def load_policy_model(
    path: str | os.PathLike, dtype: Any = None, attn_implementation: str | None = None
) -> tuple[Any, Any]:
    """Loads a trained checkpoint for inference: a full model, or a LoRA adapter merged into its base.

    Args:
        path: A folder written by training (``clocktune train``), or a Hub repo id (downloaded first).
        dtype: The weights' dtype (a ``torch.dtype``, its name, or ``"auto"``); transformers' default when ``None``.
        attn_implementation: ``"sdpa"``, ``"eager"``, ``"flex_attention"``...; transformers' default when ``None``.

    Returns:
        ``(model, tokenizer)``, the model in eval mode.

    Raises:
        FileNotFoundError: When ``path`` is neither a folder nor a repo on the Hub.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(path)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

        try:
            folder = Path(snapshot_download(str(path)))
        except (HfHubHTTPError, LocalEntryNotFoundError, ValueError) as error:
            raise FileNotFoundError(
                f"model {path}: not a folder, and not downloadable from the Hub ({error})"
            ) from error
    tokenizer = AutoTokenizer.from_pretrained(folder)
    settings = {"dtype": dtype, "attn_implementation": attn_implementation}
    settings = {name: value for name, value in settings.items() if value is not None}
    if is_adapter(folder):
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(folder, **settings).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, **settings)
    return model.eval(), tokenizer


def policy_factory(
    strategy: str,
    model: str = "scripted",
    loaded: tuple[Any, Any] | None = None,
    endpoint: EndpointLimits = EndpointLimits(),
    constrained: bool = True,
    draft: str = "none",
    costs: SpeculationCosts | None = None,
    temperature: float = 0.0,
    call_bias: float = 0.0,
    batch_size: int | None = None,
    margin: float = 0.1,
) -> PolicyFactory:
    """A factory of fresh per-session policies.

    Args:
        strategy: For scripted policies, one of :data:`~clocktune.runtime.scripted.SCRIPTED_POLICIES`; for a model,
            the name its results carry (its behaviour comes from the teacher it was trained on).
        model: ``scripted`` (or ``oracle``): follow each timeline's recorded plan; ``openai:MODEL[@BASE_URL]``: an
            OpenAI-compatible chat endpoint (``OPENAI_BASE_URL`` or OpenAI's by default); else a checkpoint folder.
        loaded: An already loaded ``(model, tokenizer)`` to use instead of loading ``model``.
        endpoint: Limits of an endpoint policy (``openai:...``).
        constrained: Decode a checkpoint's actions under the grammar of valid actions
            (:mod:`~clocktune.runtime.action_grammar`); ``False``: the plain argmax.
        draft: A checkpoint's drafter for speculative decoding (:data:`~clocktune.runtime.drafters.DRAFTERS`:
            ``none``, ``prompt_lookup``, ``layer_skip[:N]``, ``int8``, ``int4``, ``auto``); lossless, so only speed
            changes.
        costs: The device profile's measured speculation costs
            (:class:`~clocktune.runtime.speculative.SpeculationCosts`); measured on the model here when ``None``.
        temperature: A checkpoint samples at this temperature (0: greedy).
        call_bias: A checkpoint's bias toward calling while the user speaks
            (:class:`~clocktune.runtime.model_policy.ModelPolicy`; 0: none).
        batch_size: Most sessions in one forward of the checkpoint's engine (``None``: the device's default).
        margin: With a drafter, speculate only while the expected speedup exceeds ``1 + margin`` (a large negative
            value drafts at every step, to time speculation without its toggle).

    Returns:
        ``factory(timeline) -> policy``; a checkpoint's carries ``decoding``, the decoding metrics of its
        sessions (:class:`~clocktune.runtime.speculative.SpeculationStats`), and ``engine``, the
        :class:`~clocktune.runtime.engine.Engine` its sessions share.

    Raises:
        ValueError: For an unknown scripted strategy, or an endpoint URL that would expose the key.
    """
    if loaded is None and model.startswith(OPENAI_PREFIX):
        from clocktune.runtime.openai_policy import openai_policy_factory

        name, _, url = model.removeprefix(OPENAI_PREFIX).partition("@")
        base_url = url or os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        key = os.environ.get("OPENAI_API_KEY")
        return openai_policy_factory(base_url, name, key, name=strategy, **asdict(endpoint))
    if loaded is None and model in SCRIPTED_MODELS:
        if strategy not in SCRIPTED_POLICIES:
            raise ValueError(f"unknown policy {strategy!r}; scripted policies: {', '.join(SCRIPTED_POLICIES)}")

        def scripted(timeline: Timeline) -> ScriptedPolicy:
            return ScriptedPolicy(timeline, strategy)

        return scripted
    from clocktune.runtime.engine import Engine, default_batch_size
    from clocktune.runtime.model_policy import ModelPolicy
    from clocktune.runtime.speculation_costs import resolve_drafter
    from clocktune.runtime.speculative import SpeculationStats

    network, tokenizer = loaded if loaded is not None else load_policy_model(model)
    # The sessions share the engine: its batches (drafts and verifications included) and its system prompts.
    engine = Engine(network, batch_size or default_batch_size(network))
    drafter, costs = resolve_drafter(draft, network, costs)
    # Shared by the sessions: the metrics of the run, and the acceptance a new session starts from.
    decoding = SpeculationStats(drafter.name if drafter is not None else "none")

    def from_model(timeline: Timeline) -> ModelPolicy:
        return ModelPolicy(
            network,
            tokenizer,
            timeline,
            name=strategy,
            engine=engine,
            constrained=constrained,
            drafter=drafter,
            costs=costs,
            decoding=decoding,
            temperature=temperature,
            call_bias=call_bias,
            margin=margin,
        )

    from_model.decoding = decoding  # type: ignore[attr-defined]  # read by `clocktune eval` for its summary
    from_model.engine = engine  # type: ignore[attr-defined]  # its stats, for benchmarks
    return from_model


def policy_spec(
    strategy: str,
    model: str = "scripted",
    loaded: tuple[Any, Any] | None = None,
    endpoint: EndpointLimits = EndpointLimits(),
    constrained: bool = True,
    draft: str = "none",
    costs: SpeculationCosts | None = None,
    call_bias: float = 0.0,
    batch_size: int | None = None,
) -> PolicySpec:
    """A policy as ``clocktune eval`` names it: :func:`policy_factory` with the name and key an evaluation needs.

    Args:
        strategy: See :func:`policy_factory`; also the name the results carry.
        model: See :func:`policy_factory`.
        loaded: See :func:`policy_factory`.
        endpoint: See :func:`policy_factory`.
        constrained: See :func:`policy_factory`.
        draft: See :func:`policy_factory`.
        costs: See :func:`policy_factory`.
        call_bias: See :func:`policy_factory`.
        batch_size: See :func:`policy_factory`.

    Returns:
        The spec; its key is ``scripted:STRATEGY`` for a recorded plan, else ``MODEL:STRATEGY`` (with
        ``:constrained`` appended when constrained, ``:draft=NAME`` with a drafter, ``:call_bias=B`` with a bias).

    Raises:
        ValueError: For an unknown scripted strategy.
    """
    key = f"scripted:{strategy}" if model in SCRIPTED_MODELS else f"{model}:{strategy}"
    if constrained and model not in SCRIPTED_MODELS:
        key += ":constrained"  # other sessions than the same model's unconstrained ones
    if draft != "none" and is_checkpoint(model):
        key += f":draft={draft}"  # the same actions (lossless), but other wall-clock times
    bias = call_bias if is_checkpoint(model) or loaded is not None else 0.0
    if bias:
        key += f":call_bias={bias:g}"
    factory = policy_factory(
        strategy,
        model,
        loaded,
        endpoint,
        constrained,
        draft if is_checkpoint(model) else "none",
        costs,
        call_bias=bias,
        batch_size=batch_size,
    )
    return PolicySpec(strategy, factory, key)


def bound_specs() -> tuple[PolicySpec, PolicySpec]:
    """The scripted oracle and the scripted turn-based loop, whose medians bound what the dialogues allow.

    Returns:
        ``(oracle, sync)``.
    """
    return policy_spec("oracle"), policy_spec("sync")
