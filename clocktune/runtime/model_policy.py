"""A local Hugging Face causal LM as the policy: the shared renderer feeds it incrementally over a KV cache.

Every event the session logs is appended to a :class:`~clocktune.render.Renderer` and its ids are fed to the
model, so the model's context is exactly ``render(session_log)`` (docs/design.md §3). To act, the policy feeds the
renderer's prompt (assistant header, clock and state line) and decodes greedily up to the format's end-of-message
token. The prompt and the generated tokens stay in the cache only as far as the renderer's canonical ids for the
accepted action repeat them (same ids, same time, the same tokens visible before them); from the first difference
the canonical ids are fed, so a model that split the same text into other tokens still sees what training showed it.
Keeping them saves feeding every action twice (a third of the tokens of the demo's evaluation).

Attention over the cache follows the streaming mask (docs/design.md §4): each fed token attends to the earlier tokens
still visible at its time, and to itself, through an additive 4D mask; hidden partials and superseded results
stop being attended the moment they are hidden.

By default (``constrained=True``) actions are decoded under a grammar of the actions valid now
(``clocktune.runtime.action_grammar``): the format's markers, the timeline's tools and their argument schemas, the
open call ids, a fresh id for a new call, ``$ref`` only to calls that exist, so that a malformed or impossible action
cannot be produced. It is on because it has never cost the demo's model a task and sometimes gained some (10 of 50
against 8 of 50 live, BENCHMARKS.md "Constrained decoding"): a model that writes an argument its tool does not have
loses the call, under the grammar it writes a valid one. ``constrained=False`` is the plain argmax.

Under the grammar, text that can go on only one way (a call's keys, its id, the brackets) is not decoded a token a
forward: the grammar's forced tokens (llguidance's fast-forward tokens) are fed with the token before them, in one
forward, whether or not a drafter is on, as SGLang's jump-forward decoding does. They are half the action tokens of
the demo's checkpoint on its held-out dialogues (384 of 744 picks on 10 of them, in runs of 3.2), and the action is
the same: they are verified as any draft is, the target's rule still picking every token from its own row, and a
forced token is the grammar's only continuation there (on the 50 held-out dialogues every one was accepted: 1,813
forced tokens, 1,813 forwards fewer). Virtual time is charged per token decoded, not per forward, so a session's log
does not change either.

With a drafter (``clocktune.runtime.drafters``: prompt lookup, the first layers of the same model, a quantized
copy), decoding is speculative (``clocktune.runtime.speculative``): a draft of γ tokens is verified in one forward
whose mask has γ + 1 rows, rejected tokens are cropped from the cache, and the target's rule picks every token
emitted, so the action is the one plain decoding writes (greedy: token for token, under the grammar or not). The
draft length climbs a ladder with the session's measured acceptance, and drafting stops where the cost model says it
does not pay at the engine's active batch (EfficientRollout's system-aware speculation): drafts and verifications are
forwards of the engine like any other, packed with the other sessions' work. Sampling draws each token with its
position's own noise (``token_picking.SamplingNoise``), so a sampled action, too, is the same whether drafted or not and
at whatever batch.

``call_bias`` moves the policy's operating point between speed and accuracy: it is added to the call marker's logit
at an action's first token while the user is still speaking. A model fine-tuned on the speculative teacher calls later
than its teacher (each utterance shows it one call among many waits): the demo's recipe made a speculative call in 14
of 50 held-out sessions where its teacher did in 28 (docs/benchmarks-history.md, "Speculation bias").

Every session over the same tools starts with the same system prompt (hundreds of tokens of tool schemas): the
engine computes it once and each session starts from a copy, as serving engines' prefix caches do.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from clocktune.actions import ActionParseError, parse_action, speech_so_far
from clocktune.clock import FIRST_WORDS_TOKENS
from clocktune.render import Renderer, Rendering
from clocktune.runtime.action_grammar import CallBook, action_grammar, start_matcher
from clocktune.runtime.drafters import Draft, Drafter, DraftRequest, DraftWork, call_skeletons
from clocktune.runtime.engine import Engine, EngineSession, Forward, ModelWork
from clocktune.runtime.policy import Decision
from clocktune.runtime.speculative import LADDER, DraftLength, SpeculationCosts, SpeculationStats, acceptance_prior
from clocktune.runtime.token_picking import SamplingNoise, TokenPicker
from clocktune.timeline.events import AGENT_KINDS, Event, Timeline

# Most grammar-forced tokens fed with one decode step (with a drafter, the ladder's longest draft if that is longer;
# the drafter's tokens follow them). It bounds the visibility list a step needs; forced runs average 3.2 tokens on the
# demo's checkpoint, and a longer one goes in over two steps. A drafter once capped them at its longest draft (6),
# so that speculation fed long forced runs in more forwards than plain decoding did.
FORCED_DRAFT = 8


@contextlib.contextmanager
def one_token_a_forward(on: bool = True) -> Iterator[None]:
    """Inside the block (when ``on``), plain decoding feeds forced tokens one a forward, as before jump-forward
    (``FORCED_DRAFT`` 0): the baseline the benchmarks measure jump-forward against in the same run.

    Args:
        on: ``False`` leaves decoding as it is (an arm that keeps jump-forward).
    """
    global FORCED_DRAFT
    previous = FORCED_DRAFT
    FORCED_DRAFT = 0 if on else previous
    try:
        yield
    finally:
        FORCED_DRAFT = previous


class ModelPolicy:
    """Greedy (or sampled) decoding of a causal LM over the session's rendered context, speculative with a drafter.

    Args:
        model: A causal LM whose embeddings match the extended ``tokenizer`` (plain or PEFT).
        tokenizer: Tokenizer extended with the clock tokens and format markers.
        timeline: The session's timeline (its tools go in the system prompt).
        name: Name recorded in results.
        max_new_tokens: Longest action the model may write.
        engine: The model engine that runs this policy's forwards, shared by the policies of one model so that
            their forwards share batches and the system prompt is computed once (a batch-1 engine of its own when
            ``None``).
        constrained: Decode under the grammar of the actions valid now (llguidance); ``False``: plain argmax.
        wrap_up_tokens: With the grammar, tokens allowed past ``max_new_tokens`` to bring an unfinished action to
            a valid end (the best closing token each step) rather than cut it off unparsable.
        drafter: Drafts tokens for speculative decoding (``None``: plain decoding).
        costs: Measured costs of speculation on this device (the profile's section), for the cost model; ``None``
            assumes verification costs what ``speculative.DEFAULT_VERIFY_RATIO`` says and a free drafter.
        decoding: Decoding metrics shared by the policies of one model (a fresh one when ``None``).
        temperature: 0 decodes greedily; above, tokens are sampled from ``softmax(logits / T)`` (under the grammar
            when constrained), each with its position's own noise, so that speculation never changes the draw.
        continuation_temperature: The temperature past an action's first token, which names its kind (wait, call,
            modify, commit, say...). ``None``: ``temperature`` throughout; 0 with ``temperature > 0`` samples which
            action to take, and when, and writes its content greedily (GRPO's ``rollout_continuation_temperature``).
        seed: Seed of the sampling noise (with the timeline's seed and the action's index).
        max_draft: Longest draft (the ladder's rungs up to it).
        margin: Speculate only while the expected speedup exceeds ``1 + margin``.
        call_bias: Added to the logit of the format's call marker at an action's first token while the turn's final
            chunk is unheard (``CallBook.heard_final`` false: while the user speaks, and after an answer until the
            next utterance ends; 0: none). Positive values call sooner: faster answers, and wrong guesses where the
            words do not yet say enough (docs/benchmarks-history.md, "Speculation bias").
    """

    io_bound = False  # compute-bound: on the wall clock it runs on the thread that started the run

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        timeline: Timeline,
        name: str = "model",
        max_new_tokens: int = 128,
        engine: Engine | None = None,
        constrained: bool = True,
        wrap_up_tokens: int = 48,
        drafter: Drafter | None = None,
        costs: SpeculationCosts | None = None,
        decoding: SpeculationStats | None = None,
        temperature: float = 0.0,
        continuation_temperature: float | None = None,
        seed: int = 0,
        max_draft: int = 6,
        margin: float = 0.1,
        call_bias: float = 0.0,
    ) -> None:
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.renderer = Renderer(tokenizer, timeline.tools)
        self.system_ids = tuple(self.renderer.rendering.input_ids)  # the rendering holds only the system prompt yet
        fmt = self.renderer.encoding.model_format
        self.model_format = fmt
        end_ids = tokenizer.encode(fmt.end, add_special_tokens=False)
        if len(end_ids) != 1:
            raise ValueError(f"the end-of-message text {fmt.end!r} must be one token, got {end_ids}")
        self.end_id = end_ids[0]
        self.max_new_tokens = max_new_tokens
        self.call_bias = call_bias
        self.call_marker_id: int | None = None
        if call_bias:
            if not fmt.call_prefix.strip():
                raise ValueError(f"call_bias needs a call marker; format {fmt.name!r} writes calls as bare JSON")
            self.call_marker_id = tokenizer.encode(fmt.call_prefix, add_special_tokens=False)[0]
        self.engine = engine if engine is not None else Engine(model)
        self.kv: EngineSession | None = None  # the session's KV cache in the engine, from the first act
        self.fed_ids: list[int] = []  # ids kept in the cache, in order: equals render(session log) once flushed
        # The last action's prompt and tokens, left in the cache after it (``_Held``) until the rendering confirms them.
        self.held: _Held | None = None
        self.last_prompt_logits: torch.Tensor | None = None  # next-token logits at the last decision point
        self.last_action_ids: list[int] = []  # the tokens the last action wrote (identity checks compare them)
        self.constrained = constrained
        self.wrap_up_tokens = wrap_up_tokens
        self.calls = CallBook({tool.name: tool.side_effect for tool in timeline.tools})
        self.grammar = action_grammar(tokenizer, fmt, timeline.tools) if constrained else None
        # Where decoding time goes, for benchmarks: single-token forwards and the grammar's share.
        self.stats = {"actions": 0, "tokens": 0, "step_forwards": 0, "step_s": 0.0, "grammar_s": 0.0}
        self.temperature = temperature
        self.continuation_temperature = temperature if continuation_temperature is None else continuation_temperature
        if seed < 0:
            # The noise's stream refuses a negative key, and a session takes a policy's error for a notice: every
            # sampled action would fail, and the session give up, with no error anywhere.
            raise ValueError(f"seed is {seed}: sampling seeds are non-negative")
        self.seed = seed
        self.timeline_seed = timeline.seed
        self.actions_decoded = 0  # the index of the next action, which keys its sampling noise
        # Called with (words, final) as a `say` is decoded, token by token (a live session streams them); None: off.
        self.on_speech: Callable[[str, bool], None] | None = None
        self.drafter = drafter
        self.decoding = decoding if decoding is not None else SpeculationStats(drafter.name if drafter else "none")
        self.draft_session = drafter.session() if drafter is not None else None
        self.draft_length: DraftLength | None = None
        if drafter is not None:
            # The session starts from what earlier sessions measured (or the profile, or a prior), then adapts.
            cost_ratio = costs.draft_ratio.get(drafter.name, 0.0) if costs is not None else 0.0
            verify = costs.verify if costs is not None else SpeculationCosts(0.0, {}).verify
            prior = acceptance_prior(drafter.name, decoding, costs)
            rungs = tuple(gamma for gamma in LADDER if gamma < max_draft) + (max_draft,)
            self.draft_length = DraftLength(cost_ratio, verify, prior, rungs=rungs, margin=margin)
        # Names and keys of the session's calls for a lookup drafter to copy (nothing in the context has them yet).
        self.draft_corpus = call_skeletons(tokenizer, fmt, timeline.tools) if drafter is not None else []

    def close(self) -> None:
        """Drops the session's KV cache and hands the freed heap back to the system.

        glibc keeps the memory freed with finished sessions' caches (buffers of many sizes: each session's grows by
        half again as it lengthens) instead of reusing it: over a 100-dialogue evaluation of two models on CPU,
        resident memory grew by about 50 MB per session to 11.5 GB (measured when the cache grew by one
        concatenation per token). ``malloc_trim`` returns it.
        """
        if self.kv is not None:
            self.kv.close()
            self.kv = None
        self.last_prompt_logits = None
        self.held = None
        if self.draft_session is not None:
            self.draft_session.close()
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None)
            if hasattr(libc, "malloc_trim"):  # glibc's; musl has none
                libc.malloc_trim(0)

    def observe(self, events: list[Event]) -> int:
        """Appends events to the rendered context (fed lazily, at the next ``act``).

        Args:
            events: New session events.

        Returns:
            Context tokens added for events the policy did not write (the prefill to charge).
        """
        added = 0
        for event in events:
            self.calls.update(event)
            ids = self.renderer.append(event)
            if event.kind not in AGENT_KINDS:
                added += len(ids)
        return added

    def _cache(self) -> EngineSession:
        # The session's cache in the engine, opened on first use holding the system prompt.
        if self.kv is None:
            self.kv = self.engine.open(self.system_ids)
            self.fed_ids = list(self.system_ids)
        return self.kv

    def engine_session(self) -> EngineSession:
        """The session's cache in the engine, opened (holding the system prompt) on first use."""
        return self._cache()

    @property
    def batchable(self) -> bool:
        """Whether the engine may run this policy's forwards together with other sessions' (always: drafts and
        verifications are engine forwards too)."""
        return True

    def act(self, t: float) -> Decision:
        """Generates the next action at time ``t`` (greedily unless sampling; under the grammar when constrained),
        running its forwards alone (batch 1); :meth:`act_work` is the same work for the engine to batch.

        With a drafter, each step verifies a draft in one forward; what is emitted is what plain decoding emits.

        Args:
            t: The session time of the action.

        Returns:
            The parsed action and the tokens generated, or the parse error.
        """
        return self.engine.run(self._cache(), self.act_work(t))

    def act_work(self, t: float) -> ModelWork:
        """The next action's model work: yields each forward it needs (:class:`~clocktune.runtime.engine.Forward`),
        receives its logits, and returns the :class:`Decision`.

        Args:
            t: The session time of the action.
        """
        self._cache()
        rendering = self.renderer.rendering
        self.fed_ids += rendering.input_ids[len(self.fed_ids) : len(self.fed_ids) + self._confirmed_by(rendering)]
        self.kv.crop(len(self.fed_ids))
        kept = len(self.fed_ids)
        pending = rendering.input_ids[kept:]
        prompt = self.renderer.prompt_for_action(t)
        limit = self.max_new_tokens + (self.wrap_up_tokens if self.grammar is not None else 0)
        times = rendering.time[kept:] + [t] * len(prompt)
        # Room in the visibility list for a step's forced and drafted tokens.
        max_draft = self._max_forced() + (self.draft_length.max_gamma if self.draft_length is not None else 0)
        until = rendering.visible_until + [math.inf] * (len(prompt) + limit + max_draft + 1)
        # No `torch.no_grad()` around the yields: grad mode is per thread, and a generator suspended inside it would
        # switch gradients off for whatever runs meanwhile (a training step beside a live evaluation). The forwards
        # run under no_grad where they are made (the engine, the cache store, the drafter).
        logits = (yield Forward(pending + prompt, times, until))[0]
        self.fed_ids += pending
        self.last_prompt_logits = logits
        if self.call_marker_id is not None and not self.calls.heard_final:
            logits = logits.clone()
            logits[self.call_marker_id] += self.call_bias
        context = self.fed_ids + prompt  # what the cache holds before the action's first token
        stats, decoding = self.stats, self.decoding
        decode_started = started = time.perf_counter()
        matcher = None if self.grammar is None else start_matcher(self.tokenizer, self.grammar, self.calls)
        noise = None
        if max(self.temperature, self.continuation_temperature) > 0:
            noise = SamplingNoise((self.seed, self.timeline_seed, self.actions_decoded))
        self.actions_decoded += 1
        picker = TokenPicker(matcher, self.max_new_tokens, self.temperature, noise, self.continuation_temperature)
        generated: list[int] = []
        first_words_at = None
        rows, draft = logits[None], Draft([])
        while True:
            # Walk the target's rows: row i is the next-token logits after draft[:i]; keep agreeing draft tokens.
            finished, accepted = False, 0
            for row in range(rows.shape[0]):
                proposed = draft.tokens[row] if row < len(draft.tokens) else None
                token = picker.pick(rows[row], len(generated))
                picker.advance(token)
                generated.append(token)
                if len(generated) == FIRST_WORDS_TOKENS:
                    first_words_at = time.monotonic()  # an answer could be spoken from here on
                if self.on_speech is not None:
                    self._stream_speech(generated)
                if token == self.end_id or len(generated) >= limit:
                    finished = True
                    break
                if token != proposed:
                    break
                accepted += 1
            if matcher is not None:
                stats["grammar_s"] += time.perf_counter() - started
            # Only the drafter's own tokens count towards its acceptance: the grammar's forced tokens before them
            # are accepted all but always; counted in, they raised the shared α (a new session's prior, the
            # profile's acceptance) above the drafter's own, and the toggle drafted at batches where it did not pay.
            # A draft cut inside its forced part never reached the drafter's tokens.
            own = len(draft.tokens) - draft.forced
            if own > 0 and self.draft_length is not None and accepted >= draft.forced:
                decoding.record_draft(own, accepted - draft.forced)
                self.draft_length.record(own, accepted - draft.forced)
            if finished:
                break
            # The cache holds the context and every emitted token but the last (plus rejected drafts: dropped).
            cached = len(context) + len(generated) - 1
            self.kv.crop(cached)
            draft = yield from self._draft(context, generated, cached, t, until, limit, picker)
            self.kv.crop(cached)  # a layer-skip draft grew the first layers past it
            fed = [generated[-1], *draft.tokens]
            started = time.perf_counter()
            rows = yield Forward(fed, [t] * len(fed), until, len(fed))
            elapsed = time.perf_counter() - started
            stats["step_forwards"] += 1
            stats["step_s"] += elapsed
            decoding.target_forwards += 1
            decoding.target_s += elapsed
            decoding.plain_steps += not draft.tokens
            started = time.perf_counter()
        self.last_action_ids = generated
        stats["actions"] += 1
        stats["tokens"] += len(generated)
        decoding.actions += 1
        decoding.tokens += len(generated)
        decoding.decode_s += time.perf_counter() - decode_started
        # The prompt and the action's tokens stay in the cache: the next action keeps those the rendering repeats.
        self.held = _Held(prompt + generated[:-1], t, until)
        text = self.tokenizer.decode(generated, skip_special_tokens=False)
        first_words_at = first_words_at or time.monotonic()  # a shorter action is out when it is done
        try:
            return Decision(parse_action(text, self.model_format), len(generated), first_words_at=first_words_at)
        except ActionParseError as error:
            return Decision(None, len(generated), str(error))

    def _stream_speech(self, generated: list[int]) -> None:
        spoken = speech_so_far(self.tokenizer.decode(generated, skip_special_tokens=False), self.model_format)
        if spoken is not None and spoken[0].strip():
            self.on_speech(*spoken)

    def _confirmed_by(self, rendering: Rendering) -> int:
        """How many of the held tokens (the last action's prompt and tokens, still in the cache) the rendering
        repeats, so that their keys and values are what feeding its ids would compute.

        A held token is kept when the rendering has the same id at its position, fed at the action's time, and every
        token before it is visible at that time as it was when it was fed. A parsed action renders to the ids the model
        wrote unless it split its text differently, so an action's tokens are usually kept rather than fed again (a
        third of all tokens fed in the demo's evaluation). A ``tool_modify`` hides its call's results from its own
        time: the tokens after the first such result are fed again, unable to see it, as training sees them.
        """
        held, self.held = self.held, None
        kept = len(self.fed_ids)
        if held is None:
            return 0
        ids, times, until = rendering.input_ids, rendering.time, rendering.visible_until
        count = 0
        limit = min(len(held.ids), len(ids) - kept)
        while count < limit and ids[kept + count] == held.ids[count] and times[kept + count] == held.t:
            count += 1
        for position in range(kept + count):
            if (until[position] > held.t) != (held.visible_until[position] > held.t):
                # Tokens up to this one do not attend to it (each attends to itself whatever its visibility).
                return max(0, min(count, position - kept + 1))
        return count

    def _max_forced(self) -> int:
        # Forced tokens one step may feed: FORCED_DRAFT, or a drafter's longest draft where that is longer.
        return max(FORCED_DRAFT, self.draft_length.max_gamma) if self.draft_length is not None else FORCED_DRAFT

    def _draft(
        self,
        context: list[int],
        generated: list[int],
        cached: int,
        t: float,
        until: list[float],
        limit: int,
        picker: TokenPicker,
    ) -> DraftWork:
        # The next draft: the grammar's forced tokens (free and all but certain, so drafted even while the drafter
        # is off, and without any drafter), then the drafter's continuation when the cost model says it pays at the
        # engine's active batch.
        budget = limit - len(generated)
        forced = picker.forced(min(self._max_forced(), budget))
        self.decoding.forced_tokens += len(forced)
        if self.draft_length is None:
            return Draft(forced, forced=len(forced))
        started = time.perf_counter()
        batch = self.engine.active
        gamma = min(self.draft_length.choose(batch, len(forced)), budget - len(forced))
        if self.draft_length.on:
            self.decoding.switched_on_batch = max(self.decoding.switched_on_batch, batch)
        tokens = list(forced)
        if gamma > 0 and self.end_id not in tokens:
            request = DraftRequest(
                ids=context + generated + forced,
                cached=cached,
                session=self.kv,
                times=self.renderer.rendering.time,
                t=t,
                visible_until=until,
                gamma=gamma,
                end_id=self.end_id,
                system=len(self.system_ids),
                temperature=self.continuation_temperature,  # a draft follows the action's first token
                noise=picker.noise,
                written=len(generated) + len(forced),
                corpus=self.draft_corpus,
            )
            proposal = yield from self.draft_session.propose(request)
            tokens += proposal.tokens
            if proposal.tokens:
                self.decoding.drafter_drafts += 1
                self.decoding.drafter_tokens += len(proposal.tokens)
        self.decoding.draft_s += time.perf_counter() - started
        return Draft(tokens, forced=len(forced))


@dataclass
class _Held:
    """An action's prompt and tokens left in the session's cache: fed at ``t`` with ``visible_until`` as then."""

    ids: list[int]
    t: float
    visible_until: list[float]
