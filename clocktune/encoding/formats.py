"""Model formats: how each event becomes one chat message in a model's native framing (docs/design.md §3).

Every event is one message ``header(role) + clock + body + end + tail``; the conversation starts with ``bos`` and a
system message that lists the tools. Because every message starts and ends with special tokens, tokenising the
messages one by one gives the same ids as tokenising the whole text, which makes incremental rendering exact.

Message bodies, per event kind (``C`` is the clock text, ``{call}`` the call JSON below):

==============  ===============================================================================================
user_chunk      role ``user``: ``C`` + ``"(revised) "`` when it revises a partial + words + ``" (final)"`` on the
                utterance's last chunk
tool_result     ``C`` + ``{"id": "c1", "content": ...}`` (or ``"error": ...``): qwen2.5 wraps it in
                ``<tool_response>\\n...\\n</tool_response>`` in a ``user`` turn, llama3.2 uses role ``ipython``,
                chatml role ``tool``. The id is in the content because no template links a result to its call.
notice          role ``system``: ``C`` + text
tool_call       role ``assistant``: ``C`` + qwen2.5 ``<tool_call>\\n{call}\\n</tool_call>``, llama3.2 ``{call}``,
                chatml ``<|call|>{call}``; ``{call}`` is ``{"name": ..., "arguments": {...}, "id": "c1"}``
                (llama3.2 names the arguments ``"parameters"``, as its own template does)
tool_modify     ``C`` + ``<|modify|>{"id": "c1", "arguments": {...}}``
tool_cancel     ``C`` + ``<|cancel|>c1``
say             ``C`` + ``<|say|>`` + words (the turn goes on) or ``<|answer|>`` + words (``final``: ends the turn)
wait / commit   ``C`` + ``<|wait|>`` / ``<|commit|>``
==============  ===============================================================================================

JSON is written as ``json.dumps(..., ensure_ascii=False)``, the spacing of the models' own templates.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clocktune.timeline.events import Event, ToolSchema

# Agent-action markers shared by all formats; a format may need more (chatml's call marker).
WAIT, COMMIT, MODIFY, CANCEL, SAY, ANSWER = (
    "<|wait|>",
    "<|commit|>",
    "<|modify|>",
    "<|cancel|>",
    "<|say|>",
    "<|answer|>",
)
MARKERS: tuple[str, ...] = (WAIT, COMMIT, MODIFY, CANCEL, SAY, ANSWER)
CALL = "<|call|>"

REVISED_NOTE = "(revised) "
FINAL_NOTE = " (final)"

# Llama 3.2's template injects today's date; a fixed one keeps tokenisation reproducible.
LLAMA_DATE_STRING = "26 Jul 2024"

INTRO = (
    "You are a real-time voice agent. Events reach you as they happen, one message each, and every message starts "
    "with a clock. User messages are the speech recogniser's updates: "
    '"(revised)" marks a correction of the previous partial update, "(final)" the end of the utterance. '
    "Tool results arrive when the tools finish. Calls may start before the user has finished speaking."
)


def _actions_help(args_key: str) -> str:
    return (
        "After each event, reply with exactly one action:\n"
        "- a tool call, with a new call id\n"
        f'- {MODIFY}{{"id": <call-id>, "{args_key}": <args-json-object>}} to change a pending call\n'
        f"- {CANCEL}<call-id> to drop a pending call\n"
        f"- {SAY}<words> to speak to the user while you keep working\n"
        f"- {ANSWER}<words> for the answer that ends your turn\n"
        f"- {COMMIT} to confirm your plan once the user has finished; tools that change state (side effects) run "
        "only after it\n"
        f"- {WAIT} when there is nothing to do until the next event\n"
        'An argument {"$ref": "<call-id>"} or {"$ref": "<call-id>.<path>"} stands for (part of) that call\'s result.'
    )


def tool_json(tool: ToolSchema) -> dict[str, Any]:
    """Returns a tool schema as the models' templates list it (OpenAI function format) plus ``side_effect``.

    Args:
        tool: The tool schema.

    Returns:
        ``{"type": "function", "function": {name, description, parameters, side_effect}}``.
    """
    function = {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "side_effect": tool.side_effect,
    }
    return {"type": "function", "function": function}


def dumps(value: Any) -> str:
    """Serialises JSON as every format writes it (the models' templates use ``tojson`` with these defaults).

    Args:
        value: A JSON-ready value.

    Returns:
        The JSON text, non-ASCII characters kept.
    """
    return json.dumps(value, ensure_ascii=False)


def _qwen_system(tools: list[ToolSchema]) -> str:
    lines = "\n".join(dumps(tool_json(tool)) for tool in tools)
    return (
        f"{INTRO}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name, arguments and a new call id within "
        "<tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>, "id": <call-id>}\n</tool_call>\n\n'
        f"{_actions_help('arguments')}"
    )


def _llama_system(tools: list[ToolSchema]) -> str:
    # Llama 3.2's own system prompt for JSON tool calls (tools in the system message), with a call id added and
    # without its "Do not use variables." since $ref arguments are variables.
    schemas = "".join(json.dumps(tool_json(tool), ensure_ascii=False, indent=4) + "\n\n" for tool in tools)
    return (
        f"Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: {LLAMA_DATE_STRING}\n\n"
        "You have access to the following functions. To call a function, please respond with JSON for a function "
        'call.Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
        'value, "id": new call id}.\n\n'
        f"{schemas}{INTRO}\n\n{_actions_help('parameters')}"
    )


def _type_text(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "|".join(dumps(value) for value in schema["enum"])
    return schema.get("type", "any")


def tool_signature(tool: ToolSchema) -> str:
    """One line per tool, about a quarter of the tokens of its JSON schema: ``name(arg: type, opt?: type)``.

    Small models without a tool template of their own (SmolLM2) read these as well as JSON schemas, and the
    system prompt is most of a short dialogue's tokens.

    Args:
        tool: The tool schema.

    Returns:
        The signature, its description, and ``[changes state]`` for tools that run only after a commit.
    """
    properties = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    arguments = ", ".join(
        f"{name}{'' if name in required else '?'}: {_type_text(schema)}" for name, schema in properties.items()
    )
    state = " [changes state]" if tool.side_effect else ""
    return f"{tool.name}({arguments}){state}: {tool.description}"


def _chatml_system(tools: list[ToolSchema]) -> str:
    lines = "\n".join(tool_signature(tool) for tool in tools)
    return (
        f"{INTRO}\n\nYou can call these tools:\n<tools>\n{lines}\n</tools>\n"
        f'Call a tool with {CALL}{{"name": <function-name>, "arguments": <args-json-object>, "id": <call-id>}}\n\n'
        f"{_actions_help('arguments')}"
    )


@dataclass(frozen=True)
class ModelFormat:
    """One model family's chat framing and tool-call conventions.

    Args:
        name: Format name (``"qwen2.5"``, ``"llama3.2"``, ``"chatml"``).
        bos: Text that starts the conversation (empty when the model has none in its template).
        header_start: Text before the role in a message header.
        header_end: Text between the role and the content.
        end: End-of-message special token; the agent's generation stops on it.
        tail: Text after ``end`` (a newline in ChatML framings); it carries no loss.
        native_tokens: Special tokens of the model's own vocabulary that the framing relies on.
        markers: Action markers this format adds to the vocabulary.
        tool_role: Role of tool-result messages.
        result_prefix: Text around a tool result's JSON, before it.
        result_suffix: Text around a tool result's JSON, after it.
        call_prefix: Text before a tool call's JSON.
        call_suffix: Text after a tool call's JSON.
        args_key: Key of the arguments in call and modify JSON.
        system_prompt: Builds the system message content from the tool schemas.
    """

    name: str
    bos: str
    header_start: str
    header_end: str
    end: str
    tail: str
    native_tokens: tuple[str, ...]
    markers: tuple[str, ...]
    tool_role: str
    result_prefix: str
    result_suffix: str
    call_prefix: str
    call_suffix: str
    args_key: str
    system_prompt: Callable[[list[ToolSchema]], str]

    def header(self, role: str) -> str:
        """Returns the header that opens a message.

        Args:
            role: Message role as the model sees it.

        Returns:
            The header text.
        """
        return self.header_start + role + self.header_end

    def frame(self, role: str, content: str) -> str:
        """Returns one whole message.

        Args:
            role: Message role as the model sees it.
            content: Message content, clock included.

        Returns:
            Header, content, end token and tail.
        """
        return self.header_start + role + self.header_end + content + self.end + self.tail

    def message(self, event: Event) -> tuple[str, str]:
        """Returns the role and the body (content without the clock) of the message for an event.

        Args:
            event: Any timeline event.

        Returns:
            ``(role, body)``; agent actions are ``("assistant", action_body(event))``.
        """
        kind = event.kind
        if kind == "user_chunk":
            words = (REVISED_NOTE if event.revises else "") + event.text
            return "user", (words + FINAL_NOTE) if event.final else words
        if kind == "tool_result":
            payload: dict[str, Any] = {"id": event.call_id}
            if event.error is not None:
                payload["error"] = event.error
            if event.content is not None or event.error is None:
                payload["content"] = event.content
            return self.tool_role, self.result_prefix + dumps(payload) + self.result_suffix
        if kind == "notice":
            return "system", event.text
        return "assistant", self.action_body(event)

    def action_body(self, event: Event) -> str:
        """Returns the content of an agent action's message, clock and end token excluded.

        Args:
            event: An agent event (``tool_call``, ``tool_modify``, ``tool_cancel``, ``say``, ``wait``, ``commit``).

        Returns:
            The text ``clocktune.actions.parse_action`` reads back.

        Raises:
            ValueError: For an event that is not an agent action.
        """
        kind = event.kind
        if kind == "wait":
            return WAIT
        if kind == "commit":
            return COMMIT
        if kind == "say":
            return (ANSWER if event.final else SAY) + event.text
        if kind == "tool_call":
            call = {"name": event.name, self.args_key: event.arguments, "id": event.call_id}
            return self.call_prefix + dumps(call) + self.call_suffix
        if kind == "tool_modify":
            return MODIFY + dumps({"id": event.call_id, self.args_key: event.arguments})
        if kind == "tool_cancel":
            return CANCEL + event.call_id
        raise ValueError(f"event {event.id} of kind {kind!r} is not an agent action")


_CHATML_NATIVE = ("<|im_start|>", "<|im_end|>")

FORMATS: dict[str, ModelFormat] = {
    "qwen2.5": ModelFormat(
        name="qwen2.5",
        bos="",
        header_start="<|im_start|>",
        header_end="\n",
        end="<|im_end|>",
        tail="\n",
        native_tokens=_CHATML_NATIVE,
        markers=MARKERS,
        tool_role="user",
        result_prefix="<tool_response>\n",
        result_suffix="\n</tool_response>",
        call_prefix="<tool_call>\n",
        call_suffix="\n</tool_call>",
        args_key="arguments",
        system_prompt=_qwen_system,
    ),
    "llama3.2": ModelFormat(
        name="llama3.2",
        bos="<|begin_of_text|>",
        header_start="<|start_header_id|>",
        header_end="<|end_header_id|>\n\n",
        end="<|eot_id|>",
        tail="",
        native_tokens=("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        markers=MARKERS,
        tool_role="ipython",
        result_prefix="",
        result_suffix="",
        call_prefix="",
        call_suffix="",
        args_key="parameters",
        system_prompt=_llama_system,
    ),
    "chatml": ModelFormat(
        name="chatml",
        bos="",
        header_start="<|im_start|>",
        header_end="\n",
        end="<|im_end|>",
        tail="\n",
        native_tokens=_CHATML_NATIVE,
        markers=(*MARKERS, CALL),
        tool_role="tool",
        result_prefix="",
        result_suffix="",
        call_prefix=CALL,
        call_suffix="",
        args_key="arguments",
        system_prompt=_chatml_system,
    ),
}


def get_format(model_format: str | ModelFormat) -> ModelFormat:
    """Returns a model format by name.

    Args:
        model_format: ``"qwen2.5"``, ``"llama3.2"`` or ``"chatml"``; a format instance is returned as is.

    Returns:
        The format.

    Raises:
        ValueError: For an unknown name.
    """
    if isinstance(model_format, ModelFormat):
        return model_format
    if model_format not in FORMATS:
        raise ValueError(f"unknown model format {model_format!r}; known: {sorted(FORMATS)}")
    return FORMATS[model_format]
