"""Drafters of speculative decoding: what proposes the next tokens of an action for the target to verify.

All are *self*-drafters (EfficientRollout, arXiv 2606.18967): nothing is trained apart, so a drafter follows the
policy as it evolves. One small interface (:class:`Drafter`: ``session()`` per policy session, whose
``propose(request)`` returns a :class:`Draft`):

- ``prompt_lookup`` (:class:`PromptLookupDrafter`): the tokens that followed the latest earlier occurrence of the
  context's last n-gram. Actions copy what the context holds (a call's arguments repeat the user's words, an answer
  a tool's result), and the lookup costs microseconds, not a forward.
- ``layer_skip[:N]`` (:class:`LayerSkipDrafter`): the target's first N decoder layers, its final norm and its head
  (the same modules: weights and a LoRA shared, so nothing to re-derive when they change). It needs no cache of its
  own: the session's cache in the engine already holds exactly the keys and values of those N layers for the
  context (same weights, same inputs), so the drafter's forwards (``Forward(layers=N)``) append its draft to the
  first N layers past the session's confirmed tokens, and the session is cropped back after.
- ``int8`` / ``int4`` (:class:`QuantizedDrafter`): a copy of the whole model with torchao weight-only quantization
  (the LoRA merged into the copy) in an engine of its own, each session's cache there kept in step with the
  target's context lazily (longest common prefix; ``Forward(over=...)``). Re-derived when the target's weights
  change (an on-policy update; tensors' version counters say so), its rebuild time kept (``rebuild_s``).
  Which and why: torchao is PyTorch's own quantization library, runs on CPU and CUDA, and quantizes in place; int8
  weight-only is its CPU path (``int4`` weight-only needs CUDA kernels). On the 2-core CPU it is *slower* than the
  float32 target (88 ms against 45 ms a token, STACK-NOTES.md: no fast int8 GEMV kernel there), so it is available
  but the cost model never picks it there; on a GPU, where decode is bandwidth-bound, the smaller weights pay.

A drafter's work is written as the engine's model work (``engine.ModelWork``): it yields the forwards it needs and
the engine batches them with other sessions' (a layer-skip drafter's shallow forwards with each other, a quantized
drafter's with each other in its engine). Sampled drafts use the action's noise (``token_picking.SamplingNoise``), the
target's own, so they agree with the target's draws as often as the two distributions allow.

The grammar's forced tokens (keys, the call id: text only one way to go on) are a free draft the policy puts in
front of any drafter's (``token_picking.TokenPicker.forced``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from clocktune.runtime.engine import Engine, EngineSession, Forward, decoder_layers
from clocktune.runtime.token_picking import SamplingNoise
from clocktune.runtime.weight_changes import weights_stamp

__all__ = [
    "DRAFTERS",
    "Draft",
    "DraftRequest",
    "DraftWork",
    "Drafter",
    "LayerSkipDrafter",
    "PromptLookupDrafter",
    "QuantizedDrafter",
    "make_drafter",
]

# ``--draft`` values (``layer_skip:N`` picks N layers; ``auto`` is resolved by ``policy_factories``).
DRAFTERS = ("none", "prompt_lookup", "layer_skip", "int8", "int4", "auto")
# What ``auto`` chooses among (and ``clocktune profile`` measures): the quantized drafter only where torchao is.
CANDIDATES = ("prompt_lookup", "layer_skip", "int8")
# Share of the target's layers a layer-skip drafter keeps by default: 12 of SmolLM2's 30 cost 0.49 of a step.
LAYER_SKIP_SHARE = 0.4


@dataclass
class DraftRequest:
    """What a drafter sees: the context, the target's session, and how long a draft to write.

    Args:
        ids: The whole context: the ids in the target's cache, then those not fed yet (the last token chosen, and
            the grammar's forced tokens); the draft continues it.
        cached: How many of ``ids`` the target's cache holds.
        session: The target's session in the engine (a layer-skip drafter writes past ``cached`` in its first
            layers and crops it back); ``None`` for a drafter that needs none.
        times: Time of each context token up to the action's prompt (the renderer's ``time``).
        t: The action's time (its prompt, its tokens and drafts are all fed at it).
        visible_until: Until when each token may be attended, with room for the draft.
        gamma: Tokens to draft (a drafter may return fewer, or none).
        end_id: The end-of-message token (drafting stops after it).
        system: Length of the system prompt at the start of ``ids`` (a prefix shared by sessions).
        temperature: 0 to draft greedily; else each draft token is the drafter's draw with the action's noise.
        noise: The action's sampling noise (the target's).
        written: Tokens of the action before the draft's first token (its position in the action, for the noise).
        corpus: Ids a lookup may also copy from, though not in the context (:func:`call_skeletons`).
    """

    ids: list[int]
    cached: int
    session: EngineSession | None
    times: Sequence[float]
    t: float
    visible_until: list[float]
    gamma: int
    end_id: int
    system: int = 0
    temperature: float = 0.0
    noise: SamplingNoise | None = None
    written: int = 0
    corpus: Sequence[int] = ()

    def times_of(self, start: int, stop: int) -> list[float]:
        """Times of ``ids[start:stop]`` (the renderer's, then the action's time)."""
        known = list(self.times[start : min(stop, len(self.times))])
        return known + [self.t] * (stop - start - len(known))


@dataclass
class Draft:
    """Proposed tokens.

    Args:
        tokens: The draft.
        forced: How many leading tokens the grammar forced (not the drafter's: its acceptance leaves them out).
    """

    tokens: list[int]
    forced: int = 0


# A draft's model work: yields the forwards the drafter needs, receives their logits, returns the draft.
DraftWork = Generator[Forward, torch.Tensor, Draft]


class DraftSession(Protocol):
    """One policy session's drafting (a drafter's own cache lives here)."""

    def propose(self, request: DraftRequest) -> DraftWork: ...

    def close(self) -> None: ...


class Drafter(Protocol):
    """A drafter shared by the sessions of one model: ``name`` labels its metrics, ``session()`` starts one."""

    name: str

    def session(self) -> DraftSession: ...


def _without_forwards(draft: Draft) -> DraftWork:
    # A draft that needs no forward, as draft work (the engine is not asked for anything).
    return draft
    yield  # unreachable: makes this function a generator


def _pick(logits: torch.Tensor, request: DraftRequest, index: int) -> int:
    # The drafter's own choice: its argmax, or its draw with the target's noise at the token's position.
    if request.temperature <= 0 or request.noise is None:
        return int(logits.argmax())
    return request.noise.sample(logits, request.written + index, request.temperature)


def _draft_work(request_for: Callable[[list[int]], Forward], fresh: list[int], request: DraftRequest) -> DraftWork:
    # The autoregressive loop of a model drafter: ``request_for(ids)`` is the forward that feeds ids over the drafter's
    # cache (its logits: the next token's); the draft stops at ``gamma`` tokens or the end token.
    tokens: list[int] = []
    while len(tokens) < request.gamma:
        logits = (yield request_for(fresh))[0]
        token = _pick(logits, request, len(tokens))
        tokens.append(token)
        if token == request.end_id:
            break
        fresh = [token]
    return Draft(tokens)


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

    def propose(self, request: DraftRequest) -> DraftWork:
        """:meth:`lookup` as draft work (it needs no forward)."""
        return _without_forwards(self.lookup(request))

    def lookup(self, request: DraftRequest) -> Draft:
        """The continuation of the latest earlier occurrence of the context's last n-gram.

        Args:
            request: The context and draft length.

        Returns:
            Up to ``gamma`` tokens (none without a match); deterministic, whatever the temperature.
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
        decoder_layers(model)  # a model whose layer list cannot be found fails here, not mid-session
        self.name = f"layer_skip:{self.layers}"
        self.model = model

    def session(self) -> LayerSkipDrafter:
        """Stateless: its cache is the target's."""
        return self

    def close(self) -> None:
        """Nothing to release."""

    def propose(self, request: DraftRequest) -> DraftWork:
        """Drafts ``gamma`` tokens through the first layers over the target's session (``Forward(layers=...)``),
        then crops the session back to ``cached``: the verification feeds the draft through every layer.

        Args:
            request: The context, the target's session and the draft length.

        Returns:
            The draft, as draft work.
        """

        def forward(ids: list[int]) -> Forward:
            return Forward(ids, [request.t] * len(ids), request.visible_until, 1, layers=self.layers)

        draft = yield from _draft_work(forward, request.ids[request.cached :], request)
        request.session.crop(request.cached)
        return draft


class QuantizedDrafter:
    """Drafts with a torchao weight-only quantized copy of the target (int8; int4 on CUDA) in an engine of its own.

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
        self.engine: Engine | None = None
        self.stamp: tuple[int, ...] = ()
        self.rebuild_s: list[float] = []  # seconds of each (re)build, the first included
        self.derive()

    def derive(self) -> None:
        """(Re)builds the quantized copy and its engine from the target's current weights."""
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

        started = time.perf_counter()
        draft = copy.deepcopy(self.model)
        if hasattr(draft, "merge_and_unload"):  # PEFT: the adapter goes into the weights that get quantized
            draft = draft.merge_and_unload()
        quantize_(draft, Int8WeightOnlyConfig() if self.bits == 8 else Int4WeightOnlyConfig())
        self.draft_model = draft.eval()
        self.engine = Engine(self.draft_model)
        self.stamp = weights_stamp(self.model)
        self.rebuild_s.append(time.perf_counter() - started)

    def session(self) -> _QuantizedSession:
        """A session with its own cache, after re-deriving the copy if the target's weights changed."""
        if weights_stamp(self.model) != self.stamp:
            self.derive()
        return _QuantizedSession(self)


class _QuantizedSession:
    """A quantized drafter's cache over one session, in the drafter's engine, kept in step with the target's
    context."""

    def __init__(self, drafter: QuantizedDrafter) -> None:
        self.drafter = drafter
        self.kv: EngineSession | None = None
        self.ids: list[int] = []  # ids in self.kv

    def close(self) -> None:
        """Drops the cache."""
        if self.kv is not None:
            self.kv.close()
        self.kv, self.ids = None, []

    def _sync(self, request: DraftRequest) -> list[int]:
        # Crop the own cache to its longest common prefix with the context; return what it still has to read.
        ids = request.ids
        if self.kv is None:
            system = tuple(ids[: request.system])
            self.kv = self.drafter.engine.open(system)  # the system prompt computed once per drafter engine
            self.ids = list(system)
        common = 0
        limit = min(len(self.ids), len(ids) - 1)  # at least the last token is read again, for its logits
        while common < limit and self.ids[common] == ids[common]:
            common += 1
        self.kv.crop(common)
        self.ids = self.ids[:common]
        return ids[common:]

    def propose(self, request: DraftRequest) -> DraftWork:
        """Drafts ``gamma`` tokens with the quantized copy, over this session's cache in the drafter's engine.

        Args:
            request: The context and the draft length.

        Returns:
            The draft, as draft work.
        """
        fresh = self._sync(request)

        def forward(ids: list[int]) -> Forward:
            start = len(self.ids)
            self.ids += ids
            return Forward(ids, request.times_of(start, start + len(ids)), request.visible_until, 1, over=self.kv)

        return (yield from _draft_work(forward, fresh, request))


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
