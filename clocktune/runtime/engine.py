"""The model engine: one model, the KV caches of many sessions, and one forward over the tokens every waiting session
has to feed.

A session's model work is a sequence of forwards: the events it read and an action's prompt at one action boundary
(a prefill of tens of tokens), then one token at a time (decode), each over that session's own context and under its
own streaming visibility (docs/design.md §4). At batch 1 every forward reads all the model's weights to compute a few
rows; with many sessions waiting, the engine packs the new tokens of all of them into one sequence and runs the model
once, as serving engines batch requests (vLLM's and SGLang's continuous batching; transformers' own
``generate_batch`` takes no per-request mask and cannot append to a live request, STACK-NOTES.md).

How the packed forward works, on transformers' own model code:

- The linear layers, norms and rotary embeddings are per token, so the new tokens of all sessions go in as one row
  of ``sum(q_b)`` tokens, each at its own session's position (``position_ids``). Nothing is padded: a decode step
  beside a 100-token prefill costs one token, not a hundred.
- Attention is per session. Each session's keys and values live in its own buffers (:class:`EngineSession`); the
  engine's cache object writes each session's new keys and values there, and the attention function registered as
  :data:`ATTENTION` runs transformers' own ``sdpa_attention_forward`` once per session, over that session's buffer and
  under its streaming mask. A token hidden in one session is hidden there and nowhere else, and a session's logits do
  not depend on which other sessions share its forward (up to float reordering in a matmul of more rows).
- The system prompt (the tools' schemas, hundreds of tokens, the same for every session of a domain) is computed
  once per engine and copied into each new session's buffers.
- On a CPU the linear layers run through oneDNN over weights packed once (:mod:`runtime.onednn_linear`), for the
  engine's forwards only.

A session's model work is written as a generator of :class:`Forward` requests (``ModelPolicy``): the engine sends
each request's logits back into it. :meth:`Engine.run` drives one generator alone (batch 1); :meth:`Engine.submit`
and :meth:`Engine.step` drive many (``runtime.session_driver``), each step running at most ``batch_size`` of the
waiting requests, oldest first. A generator that raises ends alone: its error goes to its own callback and the rest of
the batch goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from clocktune.runtime.incremental import streaming_mask
from clocktune.runtime.onednn_linear import packed_linears

__all__ = [
    "ATTENTION",
    "Engine",
    "EngineSession",
    "Forward",
    "ModelWork",
    "decoder_layers",
    "default_batch_size",
    "drive",
    "first_layers",
    "request_error",
]

# The name under which the per-session attention is registered with transformers' AttentionInterface.
ATTENTION = "clocktune_engine"


# Sessions per forward by default. On a 2-core CPU the demo's 50 held-out dialogues played 1.83x, 2.85x and 3.55x
# faster than batch 1 at batch 4, 16 and 50 (BENCHMARKS.md, "Model engine"), the same logs at each; the caches of
# the sessions in play are held whatever the batch, so a larger batch adds only its activations. 64 on a GPU is not
# measured: a GPU's decode step is memory bound to far larger batches than a CPU's.
CPU_BATCH_SIZE = 50
GPU_BATCH_SIZE = 64


def default_batch_size(model: Any) -> int:
    """The engine's batch for ``model`` on its device: :data:`CPU_BATCH_SIZE` on a CPU, else :data:`GPU_BATCH_SIZE`."""
    return CPU_BATCH_SIZE if next(model.parameters()).device.type == "cpu" else GPU_BATCH_SIZE


def decoder_layers(model: Any) -> tuple[Any, str]:
    """The module holding a decoder's layer list and the list's attribute name (``model.model.layers`` for Llama and
    Qwen2; deeper under a PEFT wrapper).

    Raises:
        ValueError: When no list of ``num_hidden_layers`` modules is found.
    """
    count = model.config.num_hidden_layers
    for name, module in model.named_modules():
        if name.endswith("layers") and isinstance(module, torch.nn.ModuleList) and len(module) == count:
            parent, _, attribute = name.rpartition(".")
            return model.get_submodule(parent), attribute
    raise ValueError(f"{type(model).__name__}: no list of {count} decoder layers found")


@contextlib.contextmanager
def first_layers(model: Any, layers: int | None) -> Iterator[None]:
    """The model with only its first ``layers`` decoder layers while inside (its forward iterates the list it holds;
    the same modules, so weights and a LoRA are shared); ``None`` leaves it whole."""
    if layers is None:
        yield
        return
    parent, attribute = decoder_layers(model)
    full = getattr(parent, attribute)
    setattr(parent, attribute, torch.nn.ModuleList(list(full)[:layers]))
    try:
        yield
    finally:
        setattr(parent, attribute, full)


@dataclass
class Forward:
    """One session's next forward: feed ``ids`` at ``times`` over its cache and return the last ``rows`` logits.

    Args:
        ids: New token ids.
        times: When each new token is fed (its session's time).
        visible_until: Until when each token of the session's context, cached or new, may be attended (at least
            ``length + len(ids)`` entries).
        rows: How many of the last positions' logits to return (1 for a decode step; γ + 1 to verify a draft).
        layers: Run only the model's first ``layers`` decoder layers, its final norm and head (a layer-skip
            drafter's forward: only those layers' keys and values are written, past the session's confirmed tokens,
            and the verification overwrites them); ``None``: the whole model.
        over: Run over this cache instead of the working session's own (a drafter's session in its own engine, as
            a quantized drafter keeps); ``None``: the session's.
    """

    ids: list[int]
    times: list[float]
    visible_until: list[float]
    rows: int = 1
    layers: int | None = None
    over: EngineSession | None = None


# A session's model work: yields forwards, receives their logits ``(rows, vocabulary)``, returns its result.
ModelWork = Generator[Forward, torch.Tensor, Any]


def drive(work: ModelWork, forward: Callable[[Forward], torch.Tensor]) -> Any:
    """Runs one session's model work alone: each request it yields goes to ``forward``, whose logits are sent back.

    Args:
        work: The work (``ModelPolicy.act_work``).
        forward: Runs one request over the session's cache (:meth:`EngineSession.forward`, or a cache of its own).

    Returns:
        The work's result.
    """
    try:
        request = next(work)
        while True:
            request = work.send(forward(request))
    except StopIteration as stop:
        return stop.value


def request_error(session: EngineSession, request: Forward) -> str | None:
    """Why ``request`` cannot run over ``session``'s cache, or ``None``: checked per session before a batch is packed,
    so that one session's malformed request fails that session alone."""
    count = len(request.ids)
    if count == 0 or not 1 <= request.rows <= count:
        return f"a forward needs ids and 1..{count} rows of logits, got {count} ids, {request.rows}"
    if len(request.times) != count:
        return f"a forward needs a time per id: {count} ids, {len(request.times)} times"
    if len(request.visible_until) < session.length + count:
        return f"a forward needs visibility for {session.length + count} tokens, got {len(request.visible_until)}"
    return None


class EngineSession:
    """One session's KV cache in the engine: per layer, key and value buffers with room to grow.

    Tokens past :attr:`length` are stale (a rejected draft, an action the rendering did not repeat): they are
    overwritten by the next forward and never attended, since each new token attends only to positions before it.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.length = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def forward(self, request: Forward) -> torch.Tensor:
        """Runs this session's request alone (a packed forward of one, over ``request.over`` when it names another
        cache) and returns its rows of logits."""
        target = request.over if request.over is not None else self
        return target.engine.forward([(target, request)])[0]

    def crop(self, length: int) -> None:
        """Keeps the first ``length`` tokens of the cache."""
        self.length = min(self.length, length)

    def close(self) -> None:
        """Releases the buffers."""
        self.keys, self.values, self.length = [], [], 0

    def _reserve(self, total: int, like: torch.Tensor) -> None:
        # Grown by half again (rounded up to 256 tokens), so that a session of n tokens copies its cache O(log n)
        # times rather than once per token as concatenation does.
        capacity = self.keys[0].shape[2] if self.keys else 0
        if total <= capacity:
            return
        grown = max(total, capacity + capacity // 2)
        grown = -(-grown // 256) * 256
        _, heads, _, dim = like.shape
        for index in range(self.engine.layers):
            for store in (self.keys, self.values):
                buffer = like.new_empty(1, heads, grown, dim)
                if capacity:
                    buffer[:, :, : self.length] = store[index][:, :, : self.length]
                    store[index] = buffer
                else:
                    store.append(buffer)


@dataclass
class _Row:
    """One session's share of a packed forward."""

    session: EngineSession
    start: int  # first of its tokens in the packed sequence
    count: int  # its new tokens
    past: int  # its cached tokens before them
    mask: torch.Tensor  # (1, 1, count, past + count), additive


class _PackedCache:
    """The cache transformers' model code sees during a packed forward: it files each session's new keys and values
    in that session's buffers. Attention reads them from there (:func:`_per_session_attention`)."""

    def __init__(self, rows: list[_Row]) -> None:
        self.rows = rows

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple:
        for row in self.rows:
            end = row.past + row.count
            row.session.keys[layer_idx][:, :, row.past : end] = keys[:, :, row.start : row.start + row.count]
            row.session.values[layer_idx][:, :, row.past : end] = values[:, :, row.start : row.start + row.count]
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are given explicitly; nothing reads this for a packed forward


def _per_session_attention(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, **kwargs: Any
) -> tuple[torch.Tensor, None]:
    """Attention of a packed forward: transformers' sdpa per session, over its own buffer and mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows: list[_Row] | None = kwargs.pop("engine_rows", None)
    if rows is None:  # a forward that is not the engine's (training, a drafter): plain sdpa
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    layer = module.layer_idx
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    outputs = []
    for row in rows:
        end = row.past + row.count
        keys, values = row.session.keys[layer][:, :, :end], row.session.values[layer][:, :, :end]
        rows_query = query[:, :, row.start : row.start + row.count]
        if grouped and row.count > 1:
            # Several rows under a mask: transformers would copy the keys and values once per query head
            # (repeat_kv); torch's own grouped-query sdpa reads them in place, with the same result.
            output = torch.nn.functional.scaled_dot_product_attention(
                rows_query, keys, values, attn_mask=row.mask, scale=kwargs.get("scaling"), enable_gqa=True
            ).transpose(1, 2)
        else:
            output, _ = sdpa_attention_forward(module, rows_query, keys, values, row.mask, **kwargs)
        outputs.append(output)  # (1, count, heads, dim)
    return torch.cat(outputs, dim=1), None


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _per_session_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # forwards that are not the engine's build sdpa's masks


@dataclass
class _Waiting:
    session: EngineSession
    work: ModelWork
    request: Forward
    done: Callable[[Any, BaseException | None], None]


@dataclass
class EngineStats:
    """What the engine did: forwards run, sessions' forwards served, tokens fed, and seconds in forwards.

    ``attended`` counts the query-key pairs attention computes in one layer and one head (each new token against its
    session's context and all the new tokens: the mask hides some, sdpa computes them all), ``logit_rows`` the rows
    of logits computed: with ``tokens`` they give a run's arithmetic (``scripts/bench_engine.py``), which batching
    does not share between sessions as it shares the reading of the weights.
    """

    forwards: int = 0
    rows: int = 0
    tokens: int = 0
    attended: int = 0
    logit_rows: int = 0
    seconds: float = 0.0
    batch_sizes: dict[int, int] = field(default_factory=dict)
    shallow_forwards: int = 0  # of them, a layer-skip drafter's


class Engine:
    """Owns a model and the KV caches of its sessions, and runs their forwards, many at once.

    Args:
        model: A causal LM in eval mode whose attention is sdpa-compatible (Llama, Qwen2 and the other
            ``AttentionInterface`` models of transformers).
        batch_size: Most sessions' forwards in one packed forward.
        onednn: Linear layers through oneDNN's packed weights (:mod:`runtime.onednn_linear`): ``None`` where that
            is measured to pay (a CPU, float32, a small model), or on or off.
    """

    def __init__(self, model: Any, batch_size: int = 1, onednn: bool | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        _register_attention()
        self.model = model
        self.linears = packed_linears(model, onednn)
        self.batch_size = batch_size
        self.layers = model.config.num_hidden_layers
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.system_prompts: dict[tuple[int, ...], EngineSession] = {}
        self.waiting: deque[_Waiting] = deque()
        self.stats = EngineStats()
        self.active = 1  # sessions with model work at the last step (1 when driven alone)

    # Sessions -------------------------------------------------------------------------------------------------

    def open(self, system_ids: tuple[int, ...]) -> EngineSession:
        """A new session whose cache holds the system prompt ``system_ids`` (computed once per engine, then copied).

        Args:
            system_ids: The rendered system prompt, fed at time 0 and visible for ever.

        Returns:
            The session, ``length == len(system_ids)``.
        """
        prefix = self.system_prompts.get(system_ids)
        if prefix is None:
            prefix = EngineSession(self)
            count = len(system_ids)
            self.forward([(prefix, Forward(list(system_ids), [0.0] * count, [math.inf] * count))])
            self.system_prompts[system_ids] = prefix
        session = EngineSession(self)
        if prefix.length:
            session._reserve(prefix.length, prefix.keys[0])
            for index in range(self.layers):
                session.keys[index][:, :, : prefix.length] = prefix.keys[index][:, :, : prefix.length]
                session.values[index][:, :, : prefix.length] = prefix.values[index][:, :, : prefix.length]
        session.length = prefix.length
        return session

    # Forwards -------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def forward(self, batch: list[tuple[EngineSession, Forward]]) -> list[torch.Tensor]:
        """Runs the forwards of several sessions as one packed forward.

        Args:
            batch: ``(session, request)`` pairs, one per session.

        Returns:
            Each request's logits, ``(rows, vocabulary)``, in order; every session's cache grown by its ids.
        """
        started = time.perf_counter()
        layers = batch[0][1].layers
        if any(request.layers != layers for _, request in batch):
            raise ValueError("the forwards of one batch run the same layers")
        rows: list[_Row] = []
        ids: list[int] = []
        positions: list[int] = []
        keep: list[int] = []
        for session, request in batch:
            problem = request_error(session, request)
            if problem is not None:
                raise ValueError(problem)
            count = len(request.ids)
            past = session.length
            mask = streaming_mask(past, request.times, request.visible_until, self.dtype, self.device)
            rows.append(_Row(session, len(ids), count, past, mask))
            keep.extend(range(len(ids) + count - request.rows, len(ids) + count))
            ids.extend(request.ids)
            positions.extend(range(past, past + count))
        like = self._kv_like()
        for row in rows:
            row.session._reserve(row.past + row.count, like)
        config = self.model.config
        previous = config._attn_implementation
        config._attn_implementation = ATTENTION  # for this forward only: the model may be training between them
        try:
            linears = self.linears.installed() if self.linears is not None else contextlib.nullcontext()
            with first_layers(self.model, layers), linears:
                output = self._packed(ids, positions, keep, rows)
        finally:
            config._attn_implementation = previous
        logits = output.logits[0]
        results = []
        offset = 0
        for row, (_, request) in zip(rows, batch, strict=True):
            results.append(logits[offset : offset + request.rows])
            offset += request.rows
            row.session.length = row.past + row.count
        stats = self.stats
        stats.forwards += 1
        stats.rows += len(batch)
        stats.tokens += len(ids)
        stats.attended += sum(row.count * (row.past + row.count) for row in rows)
        stats.logit_rows += len(keep)
        stats.seconds += time.perf_counter() - started
        stats.batch_sizes[len(batch)] = stats.batch_sizes.get(len(batch), 0) + 1
        if layers is not None:
            stats.shallow_forwards += 1
        return results

    def _packed(self, ids: list[int], positions: list[int], keep: list[int], rows: list[_Row]) -> Any:
        return self.model(
            input_ids=torch.tensor([ids], device=self.device),
            # A 4D mask is passed through by transformers' mask code untouched; the real masks are per session.
            attention_mask=torch.zeros(1, 1, 1, 1, dtype=self.dtype, device=self.device),
            position_ids=torch.tensor([positions], device=self.device),
            cache=_PackedCache(rows),
            use_cache=True,
            logits_to_keep=torch.tensor(keep, device=self.device),
            engine_rows=rows,
        )

    def _kv_like(self) -> torch.Tensor:
        # The shape of one token's keys in one layer, (1, kv_heads, 1, head_dim), read off the config.
        config = self.model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return torch.empty(1, heads, 1, dim, dtype=self.dtype, device=self.device)

    # Driving generators ---------------------------------------------------------------------------------------

    def run(self, session: EngineSession, work: ModelWork) -> Any:
        """Drives one session's model work alone (batch 1) and returns its result."""
        self.active = 1
        return drive(work, session.forward)

    def submit(self, session: EngineSession, work: ModelWork, done: Callable[[Any, BaseException | None], None]):
        """Queues a session's model work; :meth:`step` runs it with the others' and calls ``done(result, error)``
        when it returns or raises."""
        try:
            request = next(work)
        except StopIteration as stop:
            done(stop.value, None)
            return
        except Exception as error:  # noqa: BLE001 - it ends this session's work alone
            done(None, error)
            return
        self.waiting.append(_Waiting(session, work, request, done))

    def step(self) -> int:
        """Runs one packed forward of the oldest ``batch_size`` waiting requests that run the same model over the same
        engine (the oldest request's: the target, its first layers, or a drafter's engine) and moves each one's work
        on. Requests of the other kinds keep their place for the next step.

        Returns:
            How many sessions' forwards ran (0 when none was waiting).
        """
        batch: list[_Waiting] = []
        kind = None
        skipped: list[_Waiting] = []
        while self.waiting and len(batch) < self.batch_size:
            item = self.waiting.popleft()
            target = item.request.over if item.request.over is not None else item.session
            problem = request_error(target, item.request)
            if problem is not None:
                self._fail(item, ValueError(problem))
                continue
            if kind is None:
                kind = (target.engine, item.request.layers)
            if (target.engine, item.request.layers) == kind:
                batch.append(item)
            else:
                skipped.append(item)
        self.waiting.extendleft(reversed(skipped))
        if not batch:
            return 0
        engine, _ = kind
        try:
            results = engine.forward([(self._target(item), item.request) for item in batch])
        except Exception as error:  # noqa: BLE001 - a failed forward ends its sessions' work, not the engine
            for item in batch:
                self._fail(item, error)
            return len(batch)
        # The active batch (EfficientRollout's): sessions with model work now, what a speculating session prices its
        # verification at (``DraftLength.choose``).
        self.active = min(self.batch_size, len(batch) + len(self.waiting))
        for item, logits in zip(batch, results, strict=True):
            try:
                item.request = item.work.send(logits)
            except StopIteration as stop:
                item.done(stop.value, None)
                continue
            except Exception as error:  # noqa: BLE001 - one session's failure is its own
                item.done(None, error)
                continue
            self.waiting.append(item)
        return len(batch)

    @staticmethod
    def _target(item: _Waiting) -> EngineSession:
        return item.request.over if item.request.over is not None else item.session

    @staticmethod
    def _fail(item: _Waiting, error: BaseException) -> None:
        item.work.close()
        item.done(None, error)

    def cancel(self, session: EngineSession) -> None:
        """Drops a session's waiting work (its user left): its callback gets :class:`asyncio.CancelledError`."""
        for item in [item for item in self.waiting if item.session is session]:
            self.waiting.remove(item)
            self._fail(item, asyncio.CancelledError())
