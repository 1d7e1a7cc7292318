"""Constrained decoding of actions: a grammar of the actions valid now, and the glue that masks a model's logits.

A local model decodes each action token by token (``model_policy``). Under the grammar built here it can only
write an action that ``clocktune.actions.parse_action`` reads back *and* that the session accepts
(``clocktune.runtime.session.Session._check``):

==================  ============================================================================================
wait                always
commit, answer      only once the user has finished speaking (the final chunk arrived, and no final answer since)
say, answer words   one or more characters with no ``<|`` in them (no spelt-out control token), then the end token
cancel              only of a call that is open: issued, not cancelled, not a committed state-changing call
modify              only of an open call: ``{"id": <that id>, <args key>: <arguments of that call's tool>}``
tool call           one of the timeline's tools by name, its arguments, and the next fresh id in the training data's
                    convention (``c1``, ``c2``, ... : the first ``c<n>`` not used yet, ``n`` counted from the calls so
                    far)
arguments           the tool's JSON Schema (property names and order, types, enums, required keys, bounds) with
                    ``additionalProperties: false`` on the arguments object; each top-level value may instead be
                    ``{"$ref": "<id>"}`` or ``{"$ref": "<id>.<path>"}`` for a call that exists and is not cancelled
                    (a modify never references its own call)
==================  ============================================================================================

Every piece is written as the renderer writes it (``clocktune.encoding.formats``): the format's call prefix and
suffix (``<|call|>`` for ChatML, ``<tool_call>\\n ... \\n</tool_call>`` for Qwen2.5, nothing for Llama 3.2), the
args key (``arguments``, Llama's ``parameters``), the key order ``name, arguments, id``, and ``json.dumps``' spacing
(``", "`` and ``": "``), then the format's end-of-message token.

Library: llguidance 1.9.1, chosen on measurements (``scripts/bench_constrained_decoding.py --libraries-only``,
BENCHMARKS.md "Constrained decoding"; this 2-core CPU, the embedded SmolLM2 tokenizer: 49,152 tokens + 726 added).
Per token both candidates cost next to nothing against a 45 ms decode step: llguidance's full mask plus advancing
0.08 ms median over the teacher's actions, its check of the model's argmax (the path a trained model takes) 0.005
ms; xgrammar 0.2.9's mask on the same argument JSON 0.006 ms (llguidance 0.04 ms there). Compiling a grammar per
call state costs both about 8 ms for a tool set (llguidance 6.5 ms for the whole action grammar, cached per state).
What decided: llguidance's Lark grammars name special tokens by id next to inline JSON Schemas, so one grammar holds
a whole action (markers, call JSON, end token) and one matcher runs it; its JSON compiler has a lenient mode that
ignores keywords it does not support instead of failing on a tool schema; its wheel is abi3 (any CPython >= 3.9),
3 MB and without dependencies, where xgrammar's is per Python version and pulls in triton on Linux. outlines was
not measured.

What is cached: the llguidance tokenizer per Hugging Face tokenizer (built once, ~0.6 s for 49k tokens), the Lark
text of each tool's arguments per tool set, and compiled matchers per grammar text (a state that recurs, such as
"no calls yet, user speaking", is compiled once per process and copied). Each action starts from a copy of its
state's matcher and advances it one token at a time.

Greedy choice under the grammar: the model's unconstrained argmax is checked first and kept when the grammar allows
it (any token whose bytes keep the text a prefix of a valid action; the constraint only removes tokens); only
otherwise is the full mask computed and applied (disallowed logits to ``-inf``) before the argmax. llguidance's mask
is a subset of those tokens: where the grammar forces the text (a key, the call id) it keeps only the canonical
tokens, which is what training showed.

An action that outruns ``max_new_tokens`` is brought to a valid end rather than cut off
(:meth:`GrammarMatcher.choose_closing`, ``ModelPolicy(wrap_up_tokens=...)``). A model under the grammar therefore
never earns a notice for a bad action: a degenerate one that never waits acts until the session's turn limit.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from clocktune.encoding.formats import ANSWER, CANCEL, COMMIT, MODIFY, SAY, WAIT, ModelFormat, dumps
from clocktune.encoding.tokenizer import load_encoding
from clocktune.timeline.events import Event, ToolSchema

__all__ = ["ActionGrammar", "CallBook", "GrammarMatcher", "action_grammar", "arguments_schema", "start_matcher"]

# Free words of a say/answer: anything without "<|", the start of every control token the parser rejects inside an
# action (``clocktune.actions._CONTROL``). A run of "<" may end the words or be followed by anything but "|" or "<".
WORDS_REGEX = r"/([^<]|<+[^<|])+<*|<+/"
# Path of a $ref after the call id: dot-separated keys or list indices, as ``clocktune.timeline.refs`` resolves them.
REF_PATH = r"(\.[A-Za-z0-9_-]+)*"
# llguidance's JSON compiler: the separators ``json.dumps`` writes, no other whitespace; unsupported keywords are
# ignored (the grammar is then looser than the schema, never stricter, so a valid action stays possible).
X_GUIDANCE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}
# Compiled matchers kept per process (a grammar is a few kB; states recur across sessions of the same tools).
MATCHER_CACHE_SIZE = 512


def _lark_string(text: str) -> str:
    # Lark string literals take the escapes JSON writes (\" \\ \n); non-ASCII stays as is.
    return json.dumps(text, ensure_ascii=False)


@dataclass
class CallBook:
    """The calls of a session as the policy saw them, and whether the user has finished: what makes an action valid.

    It follows the events the session logs (the agent's accepted actions among them) exactly as the session's
    executor and checks do, so the grammar allows what ``Session._check`` accepts.

    Args:
        side_effect: Whether each tool changes state, by name.
    """

    side_effect: dict[str, bool]
    names: dict[str, str] = field(default_factory=dict)  # call id -> tool name, in issue order
    cancelled: set[str] = field(default_factory=set)
    committed: set[str] = field(default_factory=set)
    heard_final: bool = False

    def update(self, event: Event) -> None:
        """Takes one logged event into account.

        Args:
            event: The next event of the session log.
        """
        kind = event.kind
        if kind == "user_chunk" and event.final:
            self.heard_final = True
        elif kind == "say" and event.final:
            self.heard_final = False  # the turn is over: the next one starts unheard
        elif kind == "tool_call":
            self.names[event.call_id] = event.name
        elif kind == "tool_cancel":
            self.cancelled.add(event.call_id)
        elif kind == "commit":
            # As ToolExecutor.commit: every state-changing call not cancelled is released (and no longer open).
            self.committed.update(
                call_id
                for call_id, name in self.names.items()
                if self.side_effect.get(name, False) and call_id not in self.cancelled
            )

    def open_ids(self) -> list[str]:
        """Ids the agent may modify or cancel (``ToolExecutor.open_call``)."""
        return [c for c in self.names if c not in self.cancelled and c not in self.committed]

    def live_ids(self) -> list[str]:
        """Ids a ``$ref`` may point to: every call issued and not cancelled."""
        return [c for c in self.names if c not in self.cancelled]

    def fresh_id(self) -> str:
        """The id of the next new call: ``c<n>`` for the first ``n`` past the calls so far that is not used yet."""
        n = len(self.names) + 1
        while f"c{n}" in self.names:
            n += 1
        return f"c{n}"


def _ref_schema(ids: list[str]) -> dict[str, Any]:
    alternatives = "|".join(ids)  # call ids match clocktune.actions.CALL_ID: no regex metacharacter needs escaping
    pattern = f"^({alternatives}){REF_PATH}$"
    return {
        "type": "object",
        "properties": {"$ref": {"type": "string", "pattern": pattern}},
        "required": ["$ref"],
        "additionalProperties": False,
    }


def arguments_schema(parameters: dict[str, Any], ref_ids: list[str]) -> dict[str, Any]:
    """The JSON Schema the grammar holds a call's arguments to.

    Args:
        parameters: The tool's JSON Schema of its arguments object.
        ref_ids: Calls a top-level argument may reference with ``{"$ref": ...}`` (none: no references).

    Returns:
        A copy of ``parameters`` with ``additionalProperties: false`` when it lists properties (the session rejects
        unknown keys of such tools), each top-level property also accepting a reference, and llguidance's
        formatting options.
    """
    schema = json.loads(json.dumps(parameters))  # a deep copy that is plain JSON
    schema.setdefault("type", "object")
    properties = schema.get("properties")
    if isinstance(properties, dict):
        schema["additionalProperties"] = False
        if ref_ids:
            reference = _ref_schema(ref_ids)
            schema["properties"] = {name: {"anyOf": [sub, reference]} for name, sub in properties.items()}
    schema["x-guidance"] = X_GUIDANCE
    return schema


class ActionGrammar:
    """The grammar of one model format over one tool set, written in llguidance's Lark for each call state.

    Args:
        model_format: The format whose action bodies the grammar writes.
        tools: The session's tool schemas.
        special_ids: Id of each special token the grammar names (markers, end token, call prefix and suffix
            pieces that are special tokens of the tokenizer).
    """

    def __init__(self, model_format: ModelFormat, tools: list[ToolSchema], special_ids: dict[str, int]) -> None:
        self.model_format = model_format
        self.tools = list(tools)
        self.special_ids = special_ids
        self._tools = {tool.name: tool for tool in tools}
        self._args: dict[tuple[str, tuple[str, ...]], str] = {}  # (tool, ref ids) -> its %json text
        self._texts: dict[str, str] = {}

    def _text(self, text: str) -> str:
        # Lark for a fixed text: special tokens by id (they cannot be spelt in bytes), the rest as string literals.
        known = self._texts.get(text)
        if known is None:
            known = self._texts[text] = self._split(text)
        return known

    def _split(self, text: str) -> str:
        parts: list[str] = []
        rest = text
        while rest:
            hits = [(rest.find(token), token) for token in self.special_ids if token in rest]
            if not hits:
                parts.append(_lark_string(rest))
                break
            at, token = min(hits, key=lambda hit: (hit[0], -len(hit[1])))
            if at:
                parts.append(_lark_string(rest[:at]))
            parts.append(f"<[{self.special_ids[token]}]>")
            rest = rest[at + len(token) :]
        return " ".join(parts)

    def _arguments(self, name: str, ref_ids: list[str]) -> str:
        key = (name, tuple(ref_ids))
        text = self._args.get(key)
        if text is None:
            schema = arguments_schema(self._tools[name].parameters, ref_ids)
            text = self._args[key] = "%json " + json.dumps(schema, ensure_ascii=False)
        return text

    def lark(self, calls: CallBook) -> str:
        """The Lark grammar of the actions valid in a call state.

        Args:
            calls: The session's calls and turn state.

        Returns:
            The grammar text (for ``llguidance.LLMatcher``); equal states give equal texts.
        """
        fmt = self.model_format
        rules: dict[str, str] = {}
        body = [self._text(WAIT), f"{self._text(SAY)} WORDS"]
        if calls.heard_final:
            body += [self._text(COMMIT), f"{self._text(ANSWER)} WORDS"]
        open_ids = calls.open_ids()
        live_ids = calls.live_ids()
        if open_ids:
            body += [f"{self._text(CANCEL)} OPEN_ID", f"{self._text(MODIFY)} modify"]
            rules["OPEN_ID"] = " | ".join(_lark_string(call_id) for call_id in open_ids)
            alternatives = []
            for index, call_id in enumerate(open_ids):
                head = "{" + f'"id": {dumps(call_id)}, "{fmt.args_key}": '
                others = [other for other in live_ids if other != call_id]
                rules[f"modify_args_{index}"] = self._arguments(calls.names[call_id], others)
                alternatives.append(f'{self._text(head)} modify_args_{index} "}}"')
            rules["modify"] = " | ".join(alternatives)
        if self.tools:
            body.append("call")
            tail = f', "id": {dumps(calls.fresh_id())}}}'
            alternatives = []
            for index, tool in enumerate(self.tools):
                head = "{" + f'"name": {dumps(tool.name)}, "{fmt.args_key}": '
                rules[f"call_args_{index}"] = self._arguments(tool.name, live_ids)
                alternatives.append(f"{self._text(fmt.call_prefix + head)} call_args_{index} {self._text(tail)}")
            suffix = f" {self._text(fmt.call_suffix)}" if fmt.call_suffix else ""
            rules["call"] = "(" + " | ".join(alternatives) + ")" + suffix
        # The end-of-message token is llguidance's end of sequence (``_TokenizerGlue``): allowed once ``body`` is
        # whole, and in free words after every character.
        lines = [
            "%llguidance {}",
            "start: body",
            "body: " + " | ".join(body),
            f"WORDS: {WORDS_REGEX}",
        ]
        lines += [f"{name}: {rule}" for name, rule in rules.items()]
        return "\n".join(lines) + "\n"


class _TokenizerGlue:
    """llguidance's view of one Hugging Face tokenizer, and the compiled matchers of its grammars."""

    def __init__(self, tokenizer: Any) -> None:
        import llguidance
        import llguidance.hf

        self.llguidance = llguidance
        self.stamp = len(tokenizer)
        end = load_encoding(tokenizer).model_format.end
        (self.end_id,) = tokenizer.encode(end, add_special_tokens=False)
        # The format's end token as the end of sequence: a grammar names it implicitly, and llguidance's token
        # checks treat only the end of sequence as ending the text.
        self.ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer, eos_token=self.end_id)
        self.vocab_size = self.ll_tokenizer.vocab_size
        # Special tokens llguidance keeps out of its byte-level matching: the grammar must name them by id.
        self.special_ids = {
            added.content: token_id
            for token_id, added in tokenizer.added_tokens_decoder.items()
            if token_id < self.vocab_size and self.ll_tokenizer.is_special_token(token_id)
        }
        self.matchers: OrderedDict[str, Any] = OrderedDict()
        self.grammars: dict[tuple[str, str], ActionGrammar] = {}
        self._closers: dict[str, np.ndarray] | None = None
        self._bytes: list[bytes] | None = None

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token writes (empty for special tokens, which never open or close a JSON string)."""
        if self._bytes is None:
            decode, special = self.ll_tokenizer.decode_bytes, self.ll_tokenizer.is_special_token
            self._bytes = [b"" if special(i) else decode([i]) for i in range(self.vocab_size)]
        return self._bytes[token] if token < self.vocab_size else b""

    def closers(self) -> dict[str, np.ndarray]:
        """Masks of the tokens that close what is open, for wrapping up (built once, one pass over the vocabulary).

        ``brackets``: only ``]`` and ``}``; ``comma``: those and ``,``; ``quote``: a ``"`` then only those.
        """
        if self._closers is None:
            closing = set(b",]}")
            tiers = {name: np.zeros(self.vocab_size, dtype=bool) for name in ("brackets", "comma", "quote")}
            for token in range(self.vocab_size):
                text = self.token_bytes(token)
                if text:
                    tiers["brackets"][token] = set(text) <= set(b"]}")
                    tiers["comma"][token] = set(text) <= closing
                    tiers["quote"][token] = text[:1] == b'"' and set(text[1:]) <= closing
            self._closers = tiers
        return self._closers

    def matcher(self, lark: str) -> Any:
        # A fresh copy of the compiled matcher of a grammar text (compiled on first use).
        compiled = self.matchers.get(lark)
        if compiled is None:
            compiled = self.llguidance.LLMatcher(self.ll_tokenizer, lark, log_level=1)
            if compiled.is_error():
                raise ValueError(f"action grammar does not compile: {compiled.get_error()}")
            self.matchers[lark] = compiled
            if len(self.matchers) > MATCHER_CACHE_SIZE:
                self.matchers.popitem(last=False)
        else:
            self.matchers.move_to_end(lark)
        return compiled.deep_copy()


_GLUE: weakref.WeakKeyDictionary[Any, _TokenizerGlue] = weakref.WeakKeyDictionary()


def _masked_argmax(logits: torch.Tensor, allowed: np.ndarray) -> int:
    # The argmax over the allowed tokens only, in NumPy (see GrammarMatcher.allowed for why not torch).
    values = logits.detach().float().cpu().numpy()
    return int(np.where(allowed, values, -np.inf).argmax())


def _glue(tokenizer: Any) -> _TokenizerGlue:
    glue = _GLUE.get(tokenizer)
    if glue is None or glue.stamp != len(tokenizer):  # re-extended: other token ids
        glue = _GLUE[tokenizer] = _TokenizerGlue(tokenizer)
    return glue


class GrammarMatcher:
    """One action's constrained decoding: the matcher of its call state, advanced token by token.

    Args:
        glue: The tokenizer's llguidance glue.
        lark: The grammar of the actions valid now.
    """

    def __init__(self, glue: _TokenizerGlue, lark: str) -> None:
        self._glue = glue
        self.matcher = glue.matcher(lark)
        self.vocab_size = glue.vocab_size
        self.end_id = glue.end_id
        self._in_string = False
        self._escaped = False

    def allows(self, token: int) -> bool:
        """Whether the grammar allows ``token`` next (without computing the whole mask)."""
        if token == self.end_id:
            return self.matcher.is_accepting()  # validate_tokens never counts the end of sequence
        return token < self.vocab_size and self.matcher.validate_tokens([token]) == 1

    def allowed(self, size: int) -> np.ndarray:
        """The tokens the grammar allows next, as ``size`` booleans (``False`` past the grammar's vocabulary).

        NumPy, not torch: on a busy 2-core machine a torch op over 50k entries goes to the intra-op thread pool and
        waits milliseconds for a core (7.7 ms measured for ``torch.zeros(49878, dtype=torch.bool)``); NumPy runs
        it on the calling thread in microseconds.
        """
        bits = np.unpackbits(np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.zeros(size, dtype=bool)
        count = min(size, self.vocab_size)
        allowed[:count] = bits[:count]
        return allowed

    def mask(self, size: int) -> torch.Tensor:
        """:meth:`allowed` as a boolean tensor."""
        return torch.from_numpy(self.allowed(size))

    def choose(self, logits: torch.Tensor) -> int:
        """The greedy token under the grammar.

        Args:
            logits: Next-token logits of the model (1D).

        Returns:
            The unconstrained argmax when the grammar allows it, else the argmax of the logits with every token the
            mask disallows at ``-inf``.

        Raises:
            RuntimeError: When the grammar allows no token at all (a grammar that cannot go on).
        """
        token = int(logits.argmax())
        if self.allows(token):
            return token
        allowed = self.allowed(logits.shape[-1])
        if not allowed.any():
            raise RuntimeError(f"the action grammar allows no next token ({self.matcher.get_error() or 'dead end'})")
        return _masked_argmax(logits, allowed)

    def choose_closing(self, logits: torch.Tensor) -> int:
        """The token that best brings the action to an end, once its token budget is spent.

        Free words end at once (the end token is allowed anywhere in them). Text the grammar forces (keys, the
        call id) is written in its canonical tokens. In JSON, inside a string the best allowed token that closes it
        wins; outside one, the best that only closes brackets, then one that also writes a comma (forced keys then
        follow), then one that opens a string (the shortest value); failing those, the model's best token under the
        mask (an enum or a pattern that must go on). An untrained model stuck in a long string or number is so
        brought to a valid action within a few tokens instead of being cut off into a malformed one.

        Args:
            logits: Next-token logits of the model (1D).

        Returns:
            The token.
        """
        if self.matcher.is_accepting():
            return self.end_id
        forced = self.matcher.compute_ff_tokens()
        if forced:
            return forced[0]
        allowed = self.allowed(logits.shape[-1])
        closers = self._glue.closers()
        for name in ["quote"] if self._in_string else ["brackets", "comma", "quote"]:
            candidates = allowed.copy()
            count = min(candidates.shape[0], self.vocab_size)
            candidates[:count] &= closers[name][:count]
            candidates[count:] = False
            if candidates.any():
                return _masked_argmax(logits, candidates)
        return _masked_argmax(logits, allowed)

    def advance(self, token: int) -> None:
        """Consumes the chosen token.

        Raises:
            RuntimeError: When the grammar rejects it (only a token not chosen by :meth:`choose` can be).
        """
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the action grammar rejected token {token}: {self.matcher.get_error()}")
        # Whether the text so far ends inside a JSON string (only the wrap-up needs it; markers hold no quotes).
        for byte in self._glue.token_bytes(token):
            if self._escaped:
                self._escaped = False
            elif byte == 0x5C and self._in_string:  # backslash
                self._escaped = True
            elif byte == 0x22:  # quote
                self._in_string = not self._in_string

    def is_accepting(self) -> bool:
        """Whether the text so far is a whole action."""
        return self.matcher.is_accepting()


def action_grammar(tokenizer: Any, model_format: ModelFormat, tools: list[ToolSchema]) -> ActionGrammar:
    """The (cached) grammar of a format over a tool set for an extended tokenizer.

    Args:
        tokenizer: A tokenizer extended by ``clocktune.encoding.extend_tokenizer``.
        model_format: Its model format.
        tools: The session's tool schemas.

    Returns:
        The grammar; its matchers come from :func:`start_matcher`.

    Raises:
        ImportError: When llguidance is not installed (``pip install llguidance``, or decode unconstrained).
    """
    glue = _glue(tokenizer)
    key = (model_format.name, dumps([[tool.name, tool.parameters] for tool in tools]))
    grammar = glue.grammars.get(key)
    if grammar is None:
        grammar = glue.grammars[key] = ActionGrammar(model_format, tools, glue.special_ids)
    return grammar


def start_matcher(tokenizer: Any, grammar: ActionGrammar, calls: CallBook) -> GrammarMatcher:
    """A matcher at the start of an action in a call state.

    Args:
        tokenizer: The tokenizer the grammar was made for.
        grammar: From :func:`action_grammar`.
        calls: The session's calls and turn state.

    Returns:
        The matcher, at the action's first token.
    """
    return GrammarMatcher(_glue(tokenizer), grammar.lark(calls))
