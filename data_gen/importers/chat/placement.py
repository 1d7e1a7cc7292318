"""A conversation as the task the teacher plays: each call at its earliest determinable point, answers with facts.

Each turn's calls are placed with :func:`data_gen.determinable.place` (the rule is stated there): a call is read
at the first prefix of the user's words that holds every argument value. A value the turn's words do not hold is
looked for, in this order,

1. in the context: the system messages and the user's earlier turns; it stays a literal, known from the start;
2. in the result of an earlier call (an earlier turn's, or an earlier round of this turn's: calls of one assistant
   message ran in parallel and could not see each other's results), the latest first: it becomes
   ``{"$ref": "<key>.<path>"}`` into that result, the path found by searching the result for a leaf equal to the
   value (same JSON type; the whole result when it is the value). The expert resolves it when the result is in,
   so conversation logs and ground truth carry the resolved value;

and a value found nowhere (the assistant paraphrased or knew it) places the call at the end of the turn. Readings
accumulate (:func:`data_gen.determinable.accumulate_readings`), all with confidence 1.0.

The answer of a turn is the assistant's recorded text; its facts are the result values the text repeats: each
string or number leaf of the conversation's results so far that the text holds after normalisation, written as the
text writes it (so that "three rooms" yields the fact ``three`` for a result ``3``, which the answer contains).
Strings of one character are left out: they match by chance.
"""

from __future__ import annotations

from typing import Any

from data_gen.determinable import MISSING, Utterance, accumulate_readings, leaves, place, value_forms
from data_gen.importers.chat.conversation import Conversation, RecordedCall
from data_gen.task import Answer, PlannedCall, Task, Turn

__all__ = ["answer_facts", "build_task", "find_path", "responses"]


def find_path(result: Any, value: Any) -> str | None:
    """The dotted path of the first leaf of ``result`` equal to ``value`` (same JSON type), or ``None``.

    Args:
        result: A recorded result.
        value: The value looked for.

    Returns:
        ``""`` when the result is the value itself, else ``"items.0.id"``-style paths; keys holding a dot, or
        empty ones, cannot be written in a reference and are skipped.
    """
    for path, leaf in leaves(result):
        if type(leaf) is type(value) and leaf == value:
            parts = path.split(".") if path else []
            if path and not all(parts) or _has_dotted_key(result, parts):
                continue
            return path
    return None


def _has_dotted_key(result: Any, parts: list[str]) -> bool:
    # leaves() joins keys with dots: a key that holds one would split into a path that does not exist.
    value = result
    for part in parts:
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return True
    return False


def answer_facts(text: str, results: list[Any]) -> list[str]:
    """The result values an answer repeats, as it writes them.

    Args:
        text: The answer.
        results: Recorded results.

    Returns:
        Distinct facts (case-insensitively), in the order of the results.
    """
    answer = Utterance.of(text)
    facts: list[str] = []
    for result in results:
        for _, value in leaves(result):
            if not value_forms(value) or (isinstance(value, str) and len(value.strip()) < 2):
                continue
            span = answer.span(value)
            if span and span.lower() not in {fact.lower() for fact in facts}:
                facts.append(span)
    return facts


def build_task(conversation: Conversation, kind: str) -> Task:
    """The task of a conversation.

    Args:
        conversation: The checked conversation.
        kind: The task kind (the dataset's name).

    Returns:
        The task; call keys are ``t<turn>c<n>``.
    """
    context_words: list[str] = conversation.system.split()
    earlier: list[tuple[str, RecordedCall]] = []  # (key, call) of calls whose results a later round can see
    results: list[Any] = []
    turns = []
    for turn_index, chat_turn in enumerate(conversation.turns):
        words = chat_turn.text.split()
        utterance, context = Utterance(words), Utterance(context_words)
        placed: list[tuple[int, PlannedCall]] = []
        this_turn: list[tuple[str, RecordedCall]] = []
        for number, call in enumerate(chat_turn.calls):
            key = f"t{turn_index}c{number}"
            visible = earlier + [(k, c) for k, c in this_turn if c.round < call.round]

            def available(
                value: Any, visible: list[tuple[str, RecordedCall]] = visible, context: Utterance = context
            ) -> Any:
                if context.heard_at(value) is not None:
                    return value
                for source_key, source in reversed(visible):
                    path = find_path(source.result, value)
                    if path is not None:
                        return {"$ref": f"{source_key}.{path}" if path else source_key}
                return MISSING

            placement = place(call.arguments, utterance, available)
            at = placement.at_word if placement.at_word is not None else len(words)
            placed.append((at, PlannedCall(key, call.name, placement.arguments)))
            this_turn.append((key, call))
        earlier += this_turn
        results += [call.result for call in chat_turn.calls]
        answer = Answer(chat_turn.answer, answer_facts(chat_turn.answer, results))
        turns.append(Turn(words, accumulate_readings(placed, len(words)), lambda _results, a=answer: a))
        context_words = context_words + words
    return Task(kind, turns)


def responses(conversation: Conversation) -> list[dict[str, Any]]:
    """The recorded responses a :class:`~data_gen.importers.chat.backend.RecordedBackend` serves.

    Args:
        conversation: The checked conversation.

    Returns:
        ``{"name", "arguments", "content"}`` per call, in order.
    """
    return [
        {"name": call.name, "arguments": call.arguments, "content": call.result}
        for turn in conversation.turns
        for call in turn.calls
    ]
