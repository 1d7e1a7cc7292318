"""Drafters of speculative decoding: what proposes the next tokens of an action for the target to verify.

All are *self*-drafters (EfficientRollout, arXiv 2606.18967): nothing is trained apart, so a drafter follows the
policy as it evolves. One small interface (:class:`Drafter`: ``session()`` per policy session, whose
``propose(request)`` returns a :class:`Draft`):

- ``prompt_lookup`` (:class:`PromptLookupDrafter`): the tokens that followed the latest earlier occurrence of the
  context's last n-gram. Actions copy what the context holds (a call's arguments repeat the user's words, an answer
  a tool's result), and the lookup costs microseconds, not a forward.
- ``layer_skip[:N]`` (:class:`LayerSkipDrafter`): the target's first N decoder layers, its final norm and its head
  (the same modules: weights and a LoRA shared, so nothing to re-derive when they change). It needs no cache of its
  own: the target's cache already holds exactly the keys and values of those N layers for the context (same weights,
  same inputs), so the drafter appends its draft to the first N layers of that cache and crops them back after.
- ``int8`` / ``int4`` (:class:`QuantizedDrafter`): a copy of the whole model with torchao weight-only quantization
  (the LoRA merged into the copy), its own cache kept in step with the target's context lazily (longest common
  prefix). Re-derived when the target's weights change (an on-policy update; tensors' version counters say so).
  Which and why: torchao is PyTorch's own quantization library, runs on CPU and CUDA, and quantizes in place; int8
  weight-only is its CPU path (``int4`` weight-only needs CUDA kernels). On the 2-core CPU it is *slower* than the
  float32 target (88 ms against 45 ms a token, STACK-NOTES.md: no fast int8 GEMV kernel there), so it is available
  but the cost model never picks it there; on a GPU, where decode is bandwidth-bound, the smaller weights pay.

The grammar's forced tokens (keys, the call id: text only one way to go on) are a free draft the policy puts in
front of any drafter's (``speculative.TokenPicker.forced``).
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from clocktune.runtime.incremental import crop_cache, feed_rows, measure_verify_ratios
from clocktune.runtime.speculative import SpeculationCosts, acceptance_prior, draft_pays, expected_speedup

__all__ = [
    "DRAFTERS",
    "Draft",
    "DraftRequest",
    "Drafter",
    "LayerSkipDrafter",
    "PromptLookupDrafter",
    "QuantizedDrafter",
    "make_drafter",
    "measure_draft_ratio",
    "measure_speculation_costs",
    "resolve_drafter",
]

# ``--draft`` values (``layer_skip:N`` picks N layers; ``auto`` is resolved by ``policy_factories``).
DRAFTERS = ("none", "prompt_lookup", "layer_skip", "int8", "int4", "auto")
# What ``auto`` chooses among (and ``clocktune profile`` measures): the quantized drafter only where torchao is.
CANDIDATES = ("prompt_lookup", "layer_skip", "int8")
# Share of the target's layers a layer-skip drafter keeps by default: 12 of SmolLM2's 30 cost 0.49 of a step.
LAYER_SKIP_SHARE = 0.4


@dataclass
class DraftRequest:
    """What a drafter sees: the context, the target's cache, and how long a draft to write.

    Args:
        ids: The whole context: the ids in the target's cache, then those not fed yet (the last token chosen, and
            the grammar's forced tokens); the draft continues it.
        cached: How many of ``ids`` the target's cache holds.
        cache: The target's KV cache (a layer-skip drafter grows its first layers and crops them back).
        times: Time of each context token up to the action's prompt (the renderer's ``time``).
        t: The action's time (its prompt, its tokens and drafts are all fed at it).
        visible_until: Until when each token may be attended, with room for the draft.
        gamma: Tokens to draft (a drafter may return fewer, or none).
        end_id: The end-of-message token (drafting stops after it).
        system: Length of the system prompt at the start of ``ids`` (a prefix shared by sessions).
        temperature: 0 to draft greedily; else drafts are drawn from ``softmax(logits / T)`` with their
            distributions returned (rejection sampling needs them).
        rng: Random stream for sampled drafts.
        corpus: Ids a lookup may also copy from, though not in the context (:func:`call_skeletons`).
    """

    ids: list[int]
    cached: int
    cache: Any
    times: Sequence[float]
    t: float
    visible_until: list[float]
    gamma: int
    end_id: int
    system: int = 0
    temperature: float = 0.0
    rng: np.random.Generator | None = None
    corpus: Sequence[int] = ()

    def times_of(self, start: int, stop: int) -> list[float]:
        """Times of ``ids[start:stop]`` (the renderer's, then the action's time)."""
        known = list(self.times[start : min(stop, len(self.times))])
        return known + [self.t] * (stop - start - len(known))


@dataclass
class Draft:
    """Proposed tokens, and for sampled ones the distribution each was drawn from.

    Args:
        tokens: The draft.
        probs: Per token, the drafter's distribution (``None`` for a deterministic proposal); ``None``: all are.
        forced: How many leading tokens the grammar forced (not the drafter's: its acceptance leaves them out).
    """

    tokens: list[int]
    probs: list[np.ndarray | None] | None = None
    forced: int = 0

    def prob(self, index: int) -> np.ndarray | None:
        """The distribution of token ``index`` (``None`` when proposed deterministically)."""
        return None if self.probs is None or index >= len(self.probs) else self.probs[index]


class DraftSession(Protocol):
    """One policy session's drafting (a drafter's own cache lives here)."""

    def propose(self, request: DraftRequest) -> Draft: ...

    def close(self) -> None: ...


class Drafter(Protocol):
    """A drafter shared by the sessions of one model: ``name`` labels its metrics, ``session()`` starts one."""

    name: str

    def session(self) -> DraftSession: ...


def _pick(logits: torch.Tensor, request: DraftRequest) -> tuple[int, np.ndarray | None]:
    # The drafter's own choice: its argmax, or a draw from softmax(logits / T) with the distribution kept.
    if request.temperature <= 0 or request.rng is None:
        return int(logits.argmax()), None
    values = logits.detach().float().cpu().numpy().astype(np.float64) / request.temperature
    weights = np.exp(values - values.max())
    probs = weights / weights.sum()
    cumulative = np.cumsum(probs)
    token = int(min(np.searchsorted(cumulative, request.rng.random(), side="right"), len(probs) - 1))
    return token, probs


def _draft_with(forward: Callable[[list[int]], torch.Tensor], fresh: list[int], request: DraftRequest) -> Draft:
    # The autoregressive loop of a model drafter: ``forward(ids)`` feeds ids over the drafter's cache and returns the
    # next-token logits; the draft stops at ``gamma`` tokens or the end token.
    tokens: list[int] = []
    probs: list[np.ndarray | None] = []
    while len(tokens) < request.gamma:
        token, prob = _pick(forward(fresh), request)
        tokens.append(token)
        probs.append(prob)
        if token == request.end_id:
            break
        fresh = [token]
    return Draft(tokens, probs if request.temperature > 0 else None)


class PromptLookupDrafter:
    """Drafts by n-gram lookup in the context ids: what followed the latest earlier match of the last n tokens.

    Args:
        max_ngram: Longest n-gram matched (longer first: a longer match predicts better).
        min_ngram: Shortest.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"prompt lookup matches 1 <= min_ngram <= max_ngram tokens, got {min_ngram}, {max_ngram}")
        self.name = "prompt_lookup" if min_ngram == 1 else f"prompt_lookup:{min_ngram}"
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def session(self) -> PromptLookupDrafter:
        """Stateless: the drafter itself."""
        return self

    def close(self) -> None:
        """Nothing to release."""

    def propose(self, request: DraftRequest) -> Draft:
        """The continuation of the latest earlier occurrence of the context's last n-gram.

        Args:
            request: The context and draft length.

        Returns:
            Up to ``gamma`` tokens (none without a match); deterministic, so sampled verification sees point masses.
        """
        # The corpus first and apart (-1 is no token: no match spans the seam), so that at equal length the
        # context's latest match wins.
        ids = np.asarray([*request.corpus, -1, *request.ids] if request.corpus else request.ids, dtype=np.int64)
        size = len(ids)
        for n in range(min(self.max_ngram, size - 1), self.min_ngram - 1, -1):
            tail = ids[size - n :]
            # Starts j < size - n whose n tokens equal the tail (the tail's own position excluded).
            match = ids[: size - n] == tail[0]
            for k in range(1, n):
                match &= ids[k : size - n + k] == tail[k]
            hits = np.flatnonzero(match)
            if hits.size:
                start = int(hits[-1]) + n
                tokens = ids[start : start + request.gamma].tolist()
                if -1 in tokens:  # a corpus match: its continuation ends at the seam
                    tokens = tokens[: tokens.index(-1)]
                if request.end_id in tokens:
                    tokens = tokens[: tokens.index(request.end_id) + 1]
                if tokens:
                    return Draft(tokens)
        return Draft([])


def call_skeletons(tokenizer: Any, model_format: Any, tools: Sequence[Any]) -> list[int]:
    """Each tool's call as the renderer writes it, with empty values: a lookup corpus of names and keys.

    A session's first call has nothing to copy in the context (the system prompt lists the tools as signatures,
    not as calls), yet its keys and punctuation are fixed by the tool: these skeletons give a prompt-lookup draft
    them.

    Args:
        tokenizer: The extended tokenizer.
        model_format: Its ``ModelFormat``.
        tools: The session's ``ToolSchema`` list.

    Returns:
        The ids of all skeletons, one after another, each ending with the end-of-message token.
    """
    from clocktune.encoding.formats import dumps

    text = ""
    for tool in tools:
        arguments = {key: "" for key in tool.parameters.get("properties", {})}
        call = {"name": tool.name, model_format.args_key: arguments, "id": "c1"}
        text += model_format.call_prefix + dumps(call) + model_format.call_suffix + model_format.end
    return tokenizer.encode(text, add_special_tokens=False) if text else []


def _decoder_layers(model: Any) -> tuple[Any, str]:
    # The module holding the decoder's layer list, and the list's attribute name (model.model.layers for Llama and
    # Qwen2; deeper under a PEFT wrapper).
    count = model.config.num_hidden_layers
    for name, module in model.named_modules():
        if name.endswith("layers") and isinstance(module, torch.nn.ModuleList) and len(module) == count:
            parent, _, attribute = name.rpartition(".")
            return model.get_submodule(parent), attribute
    raise ValueError(f"{type(model).__name__}: no list of {count} decoder layers found")


class LayerSkipDrafter:
    """Drafts with the target's first ``layers`` decoder layers, its final norm and head, over the target's cache.

    Args:
        model: The target (plain or PEFT): the drafter shares its modules.
        layers: Decoder layers kept (default: 40% of them, at least 1).
    """

    def __init__(self, model: Any, layers: int | None = None) -> None:
        total = model.config.num_hidden_layers
        self.layers = layers or max(1, round(total * LAYER_SKIP_SHARE))
        if not 1 <= self.layers < total:
            raise ValueError(f"a layer-skip drafter keeps 1 to {total - 1} of {total} layers, got {self.layers}")
        self.name = f"layer_skip:{self.layers}"
        self.model = model
        self._parent, self._attribute = _decoder_layers(model)

    def session(self) -> LayerSkipDrafter:
        """Stateless: its cache is the target's."""
        return self

    def close(self) -> None:
        """Nothing to release."""

    @contextlib.contextmanager
    def shallow(self) -> Iterator[None]:
        """The target with only its first ``layers`` layers while inside (the forward iterates the list it holds)."""
        full = getattr(self._parent, self._attribute)
        setattr(self._parent, self._attribute, torch.nn.ModuleList(list(full)[: self.layers]))
        try:
            yield
        finally:
            setattr(self._parent, self._attribute, full)

    def propose(self, request: DraftRequest) -> Draft:
        """Drafts ``gamma`` tokens through the shallow model over the first layers of the target's cache.

        Args:
            request: The context, the target's cache and the draft length.

        Returns:
            The draft (with each token's distribution when sampling).
        """
        cache, cached = request.cache, request.cached

        def forward(ids: list[int]) -> torch.Tensor:
            return feed_rows(self.model, cache, ids, [request.t] * len(ids), request.visible_until, 1)[0]

        with self.shallow():
            draft = _draft_with(forward, request.ids[cached:], request)
        crop_cache(cache, cached)  # only the first layers grew; the target's verification feeds the draft itself
        return draft


def weights_stamp(model: Any) -> tuple[int, ...]:
    """What changes when a model's weights do: each parameter's storage and in-place version counter.

    Args:
        model: A torch module.

    Returns:
        A tuple that differs after an optimizer step, a merge or a reload.
    """
    return tuple(value for p in model.parameters() for value in (p.data_ptr(), p._version))


class QuantizedDrafter:
    """Drafts with a torchao weight-only quantized copy of the target (int8; int4 on CUDA), with its own cache.

    Args:
        model: The target (plain or PEFT; a LoRA is merged into the copy).
        bits: 8 or 4.
    """

    def __init__(self, model: Any, bits: int = 8) -> None:
        if bits not in (8, 4):
            raise ValueError(f"quantized drafters are int8 or int4, got int{bits}")
        self.name = f"int{bits}"
        self.bits = bits
        self.model = model
        self.draft_model: Any = None
        self.stamp: tuple[int, ...] = ()
        self.system_caches: dict[tuple[int, ...], Any] = {}
        self.derive()

    def derive(self) -> None:
        """(Re)builds the quantized copy from the target's current weights."""
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

        draft = copy.deepcopy(self.model)
        if hasattr(draft, "merge_and_unload"):  # PEFT: the adapter goes into the weights that get quantized
            draft = draft.merge_and_unload()
        quantize_(draft, Int8WeightOnlyConfig() if self.bits == 8 else Int4WeightOnlyConfig())
        self.draft_model = draft.eval()
        self.system_caches = {}
        self.stamp = weights_stamp(self.model)

    def session(self) -> _QuantizedSession:
        """A session with its own cache, after re-deriving the copy if the target's weights changed."""
        if weights_stamp(self.model) != self.stamp:
            self.derive()
        return _QuantizedSession(self)


class _QuantizedSession:
    """A quantized drafter's cache over one session, kept in step with the target's context."""

    def __init__(self, drafter: QuantizedDrafter) -> None:
        self.drafter = drafter
        self.cache: Any = None
        self.ids: list[int] = []  # ids in self.cache

    def close(self) -> None:
        """Drops the cache."""
        self.cache, self.ids = None, []

    def _sync(self, request: DraftRequest) -> list[int]:
        # Crop the own cache to its longest common prefix with the context; return what it still has to read.
        from transformers import DynamicCache

        model, ids = self.drafter.draft_model, request.ids
        if self.cache is None:
            system = tuple(ids[: request.system])
            cached = self.drafter.system_caches.get(system) if system else None
            if cached is None:
                self.cache = DynamicCache()
                if system:
                    feed_rows(
                        model, self.cache, list(system), request.times_of(0, len(system)), request.visible_until, 1
                    )
                    self.drafter.system_caches[system] = copy.deepcopy(self.cache)
            else:
                self.cache = copy.deepcopy(cached)
            self.ids = list(system)
        common = 0
        limit = min(len(self.ids), len(ids) - 1)  # at least the last token is read again, for its logits
        while common < limit and self.ids[common] == ids[common]:
            common += 1
        crop_cache(self.cache, common)
        self.ids = self.ids[:common]
        return ids[common:]

    def propose(self, request: DraftRequest) -> Draft:
        """Drafts ``gamma`` tokens with the quantized copy.

        Args:
            request: The context and the draft length.

        Returns:
            The draft (with each token's distribution when sampling).
        """
        model = self.drafter.draft_model

        def forward(ids: list[int]) -> torch.Tensor:
            start = len(self.ids)
            times = request.times_of(start, start + len(ids))
            logits = feed_rows(model, self.cache, ids, times, request.visible_until, 1)[0]
            self.ids += ids
            return logits

        return _draft_with(forward, self._sync(request), request)


def make_drafter(name: str, model: Any) -> Drafter | None:
    """The drafter a ``--draft`` value names.

    Args:
        name: ``none``, ``prompt_lookup`` or ``prompt_lookup:N`` (matches of at least N tokens), ``layer_skip`` or
            ``layer_skip:N``, ``int8``, ``int4`` (``auto`` is
            resolved by the caller, from measured costs).
        model: The target model.

    Returns:
        The drafter; ``None`` for ``none``.

    Raises:
        ValueError: For an unknown name.
        ImportError: For a quantized drafter without torchao (``pip install torchao``).
    """
    base, _, argument = name.partition(":")
    if base == "none":
        return None
    if base == "prompt_lookup":
        return PromptLookupDrafter(min_ngram=int(argument)) if argument else PromptLookupDrafter()
    if base == "layer_skip":
        return LayerSkipDrafter(model, int(argument) if argument else None)
    if base in ("int8", "int4"):
        return QuantizedDrafter(model, int(base[3:]))
    raise ValueError(f"unknown drafter {name!r}; one of {', '.join(DRAFTERS)} (layer_skip:N for N layers)")


def measure_draft_ratio(
    drafter: Drafter, model: Any, context_tokens: int = 512, gamma: int = 4, repeats: int = 5
) -> float:
    """A draft token's cost over one target decode step, timed on random ids over a cache of ``context_tokens``.

    Args:
        drafter: The drafter.
        model: Its target, in eval mode.
        context_tokens: Context in the cache while timing.
        gamma: Tokens per timed draft.
        repeats: Timed drafts and target steps (medians; one untimed of each first).

    Returns:
        The ratio ``c`` of the cost model.
    """
    import math

    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(0)
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randint(vocab, (context_tokens + 1,), generator=generator).tolist()
    until = [math.inf] * (context_tokens + gamma + 8)
    times = [0.0] * context_tokens
    cache = DynamicCache()
    with torch.no_grad():
        feed_rows(model, cache, ids[:context_tokens], times, until, 1)
        steps = []
        for _ in range(repeats + 1):
            started = time.perf_counter()
            feed_rows(model, cache, ids[context_tokens:], [0.0], until, 1)
            steps.append(time.perf_counter() - started)
            crop_cache(cache, context_tokens)
        session = drafter.session()
        drafts = []
        for _ in range(repeats + 1):
            request = DraftRequest(ids, context_tokens, cache, times, 0.0, until, gamma, end_id=-1)
            started = time.perf_counter()
            draft = session.propose(request)
            drafts.append((time.perf_counter() - started) / max(len(draft.tokens), 1))
        session.close()
    return statistics.median(drafts[1:]) / statistics.median(steps[1:])


def measure_speculation_costs(
    model: Any, drafters: Sequence[str] = CANDIDATES, context_tokens: int = 1024, repeats: int = 5
) -> SpeculationCosts:
    """Measures the cost model's inputs on this device: a decode step, ``v(k)`` and each drafter's ``c``.

    Args:
        model: The target, in eval mode on its device.
        drafters: Drafter names to time (a quantized one is skipped where torchao is not installed).
        context_tokens: Context in the cache while timing.
        repeats: Timed forwards per size (medians).

    Returns:
        The costs (without acceptance: that needs sessions, ``speculation_runs``).
    """
    step_s, ratios = measure_verify_ratios(model, context_tokens, max_tokens=9, repeats=repeats)
    draft_ratio = {}
    for name in drafters:
        try:
            drafter = make_drafter(name, model)
        except ImportError:
            continue  # torchao is an optional dependency
        if drafter is not None:
            draft_ratio[drafter.name] = round(measure_draft_ratio(drafter, model, context_tokens, repeats=repeats), 4)
    return SpeculationCosts(round(step_s, 5), ratios, draft_ratio)


def resolve_drafter(
    name: str, model: Any, costs: SpeculationCosts | None = None, margin: float = 0.1, max_gamma: int = 6
) -> tuple[Drafter | None, SpeculationCosts | None]:
    """The drafter a ``--draft`` value names, with the costs its cost model needs (measured here when missing).

    ``auto`` takes the candidate with the highest expected speedup at its expected acceptance (measured on
    sessions when the profile has it, else a prior), and none when no candidate beats plain decoding by ``margin``:
    on the 2-core CPU the int8 drafter costs more than a target step (``c > 1``), so it never pays there.

    Args:
        name: A :data:`DRAFTERS` value.
        model: The target.
        costs: The device profile's speculation section, if any.
        margin: Required expected gain over plain decoding, for ``auto``.
        max_gamma: Longest draft considered.

    Returns:
        ``(drafter, costs)``; ``(None, costs)`` for plain decoding.
    """
    if name == "none":
        return None, costs
    if name != "auto":
        drafter = make_drafter(name, model)
        if costs is None or drafter.name not in costs.draft_ratio:
            measured = measure_speculation_costs(model, [name], context_tokens=512, repeats=3)
            if costs is not None:
                measured = SpeculationCosts(
                    costs.step_s,
                    costs.verify_ratio,
                    {**costs.draft_ratio, **measured.draft_ratio},
                    costs.acceptance,
                    costs.decode_tokens_per_s,
                )
            costs = measured
        return drafter, costs
    if costs is None or not costs.draft_ratio:
        costs = measure_speculation_costs(model, CANDIDATES, context_tokens=512, repeats=3)
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
