"""A local Hugging Face causal LM as the policy: the shared renderer feeds it incrementally over a KV cache.

Every event the session logs is appended to a :class:`~clocktune.render.Renderer` and its ids are fed to the
model, so the model's context is exactly ``render(session_log)`` (docs/design.md §3). To act, the policy feeds the
renderer's prompt (assistant header, clock and state line) and decodes greedily up to the format's end-of-message
token; it then drops the prompt and the generated tokens from the cache and, once the session accepts the action,
feeds the renderer's canonical ids for it, so a model that split the same text into other tokens still sees what
training showed it.

Attention over the cache follows the streaming mask (docs/design.md §4): each fed token attends to the earlier tokens
still visible at its time, and to itself, through an additive 4D mask; hidden partials and superseded results
stop being attended the moment they are hidden.

With ``constrained=True`` actions are decoded under a grammar of the actions valid now
(``clocktune.runtime.action_grammar``): the format's markers, the timeline's tools and their argument schemas, the
open call ids, a fresh id for a new call, ``$ref`` only to calls that exist, so that a malformed or impossible action
cannot be produced. It is off by default because it did not pay: the demo's trained model writes no malformed action
(0 notices in 20 live sessions), its mistakes are well-formed wrong choices, and under the grammar it completed the
same 5 of 20 tasks (BENCHMARKS.md "Constrained decoding"). It is for models that do write broken actions.

Every session over the same tools starts with the same system prompt (hundreds of tokens of tool schemas), so the
policies of one model share its prefilled cache and each session starts from a copy, as serving engines' prefix
caches do.
"""

from __future__ import annotations

import copy
import ctypes
import math
import sys
import time
from typing import Any

import torch

from clocktune.actions import ActionParseError, parse_action
from clocktune.clock import FIRST_WORDS_TOKENS
from clocktune.render import Renderer
from clocktune.runtime.action_grammar import CallBook, GrammarMatcher, action_grammar, start_matcher
from clocktune.runtime.incremental import feed
from clocktune.runtime.policy import Decision
from clocktune.timeline.events import AGENT_KINDS, Event, Timeline


class ModelPolicy:
    """Greedy decoding of a causal LM over the session's rendered context.

    Args:
        model: A causal LM whose embeddings match the extended ``tokenizer`` (plain or PEFT).
        tokenizer: Tokenizer extended with the clock tokens and format markers.
        timeline: The session's timeline (its tools go in the system prompt).
        name: Name recorded in results.
        max_new_tokens: Longest action the model may write.
        system_caches: Prefilled caches of system prompts by their ids, shared by the policies of one model (a
            fresh dict when ``None``).
        constrained: Decode under the grammar of the actions valid now (needs llguidance).
        wrap_up_tokens: With the grammar, tokens allowed past ``max_new_tokens`` to bring an unfinished action to
            a valid end (the best closing token each step) rather than cut it off unparsable.
    """

    io_bound = False  # compute-bound: on the wall clock it runs on the thread that started the run

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        timeline: Timeline,
        name: str = "model",
        max_new_tokens: int = 128,
        system_caches: dict[tuple[int, ...], Any] | None = None,
        constrained: bool = False,
        wrap_up_tokens: int = 48,
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
        self.cache: Any = None
        self.system_caches = {} if system_caches is None else system_caches
        self.fed_ids: list[int] = []  # ids kept in the cache, in order: equals render(session log) once flushed
        self.last_prompt_logits: torch.Tensor | None = None  # next-token logits at the last decision point
        self.constrained = constrained
        self.wrap_up_tokens = wrap_up_tokens
        self.calls = CallBook({tool.name: tool.side_effect for tool in timeline.tools})
        self.grammar = action_grammar(tokenizer, fmt, timeline.tools) if constrained else None
        # Where decoding time goes, for benchmarks: single-token forwards and the grammar's share.
        self.stats = {"actions": 0, "tokens": 0, "step_forwards": 0, "step_s": 0.0, "grammar_s": 0.0}

    def close(self) -> None:
        """Drops the session's KV cache and hands the freed heap back to the system.

        glibc keeps the memory freed with finished sessions' caches (tensors of many sizes: the cache grows by one
        concatenation per token) instead of reusing it: over a 100-dialogue evaluation of two models on CPU,
        resident memory grew by about 50 MB per session to 11.5 GB. ``malloc_trim`` returns it.
        """
        self.cache = None
        self.last_prompt_logits = None
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

    def _forward(self, ids: list[int], times: list[float], visible_until: list[float]) -> torch.Tensor:
        from transformers import DynamicCache

        if self.cache is None:
            self.cache = DynamicCache()
        return feed(self.model, self.cache, ids, times, visible_until)

    def _start_from_system_prompt(self) -> None:
        system = self.system_ids
        cached = self.system_caches.get(system)
        if cached is None:
            self._forward(list(system), [0.0] * len(system), [math.inf] * len(system))
            self.system_caches[system] = copy.deepcopy(self.cache)
        else:
            self.cache = copy.deepcopy(cached)
        self.fed_ids = list(system)

    @torch.no_grad()
    def act(self, t: float) -> Decision:
        """Generates the next action at time ``t``, greedily, under the grammar of valid actions when constrained.

        Args:
            t: The session time of the action.

        Returns:
            The parsed action and the tokens generated, or the parse error.
        """
        if self.cache is None:
            self._start_from_system_prompt()
        rendering = self.renderer.rendering
        kept = len(self.fed_ids)
        pending = rendering.input_ids[kept:]
        prompt = self.renderer.prompt_for_action(t)
        limit = self.max_new_tokens + (self.wrap_up_tokens if self.grammar is not None else 0)
        times = rendering.time[kept:] + [t] * len(prompt)
        until = rendering.visible_until + [math.inf] * (len(prompt) + limit)
        logits = self._forward(pending + prompt, times, until)
        self.fed_ids += pending
        self.last_prompt_logits = logits
        stats = self.stats
        started = time.perf_counter()
        matcher = None if self.grammar is None else start_matcher(self.tokenizer, self.grammar, self.calls)
        generated: list[int] = []
        first_words_at = None
        while True:
            if matcher is None:
                token = int(logits.argmax())
            else:
                token = self._choose(matcher, logits, len(generated))
                matcher.advance(token)
                stats["grammar_s"] += time.perf_counter() - started
            generated.append(token)
            if len(generated) == FIRST_WORDS_TOKENS:
                first_words_at = time.monotonic()  # an answer could be spoken from here on
            if token == self.end_id or len(generated) >= limit:
                break
            started = time.perf_counter()
            logits = self._forward([token], [t], until)
            stats["step_forwards"] += 1
            stats["step_s"] += time.perf_counter() - started
            started = time.perf_counter()
        stats["actions"] += 1
        stats["tokens"] += len(generated)
        # Prompt and generated tokens leave the cache: the accepted action comes back as canonical ids.
        self.cache.crop(len(self.fed_ids) - self.cache.get_seq_length())
        text = self.tokenizer.decode(generated, skip_special_tokens=False)
        first_words_at = first_words_at or time.monotonic()  # a shorter action is out when it is done
        try:
            return Decision(parse_action(text, self.model_format), len(generated), first_words_at=first_words_at)
        except ActionParseError as error:
            return Decision(None, len(generated), str(error))

    def _choose(self, matcher: GrammarMatcher, logits: torch.Tensor, written: int) -> int:
        # Greedy under the grammar; once the budget is spent, the token that best closes the action.
        if written < self.max_new_tokens:
            return matcher.choose(logits)
        return matcher.choose_closing(logits)
