"""Importing tool-calling conversations (``messages`` + ``tools``, as TRL and OpenAI write them) as timelines.

``clocktune-datagen import-chat FILE|DIR --out OUT`` reads JSON Lines, JSON, Parquet or a saved ``datasets``
dataset and writes the generator's layout (``OUT/data/train-00000-of-00001.jsonl``, ``OUT/generation.json``,
``OUT/stats.json``). Each user message is spoken through the speech model; each call is read at its earliest
determinable point (``data_gen.determinable``: the first prefix of the user's words that holds all its argument
values), arguments taken from earlier results become ``$ref`` references, and the recorded results are served by
a recorded-response backend rebuilt from the timeline alone. Timelines are of domain ``chat``, served through
:data:`PLUGIN` (entry point ``chat`` of group ``clocktune.domains``).

The package, in the order the data flows:

- ``reader``: rows from files or a saved dataset, each located by line or row number.
- ``conversation``: a row checked (every problem as ``file:line:field``) and split into turns.
- ``placement``: the turns as the teacher's task: calls placed, references found, answer facts.
- ``backend``: the recorded-response backend and the rule for which tools change state.
- ``importer``: conversations played out on the virtual clock; a whole file written as a dataset.

**Limits** (each a reported ``file:line:field``, or one ``error:`` line for the source itself): a source file must
be a regular file, never a FIFO or a device (``reader``); a JSON Lines line holds at most 64 MiB
(``reader.MAX_LINE_BYTES``); a message's text at most 100,000 characters (``conversation.MAX_MESSAGE_CHARS``, about
25,000 tokens); a result or arguments text nests at most 97 levels (``conversation.MAX_PAYLOAD_DEPTH``); and a
conversation plays out within the longest timeline (``clocktune.timeline.events.MAX_TIMELINE_S``, an hour). Below
them, importing takes time linear in a conversation's size (``placement.build_task``).
"""

from __future__ import annotations

from data_gen.importers.chat.backend import (
    READ_VERBS,
    WRITE_VERBS,
    RecordedBackend,
    backend_for_timeline,
    side_effect,
)
from data_gen.importers.chat.conversation import Conversation, parse_conversation
from data_gen.importers.chat.importer import DOMAIN, ChatImportError, conversation_timeline, import_chat
from data_gen.importers.chat.placement import answer_facts, build_task, find_path
from data_gen.importers.chat.reader import read_rows
from data_gen.plugins import DomainPlugin

__all__ = [
    "DOMAIN",
    "PLUGIN",
    "READ_VERBS",
    "WRITE_VERBS",
    "ChatImportError",
    "Conversation",
    "RecordedBackend",
    "answer_facts",
    "backend_for_timeline",
    "build_task",
    "conversation_timeline",
    "find_path",
    "import_chat",
    "parse_conversation",
    "read_rows",
    "side_effect",
]

PLUGIN = DomainPlugin(name=DOMAIN, backend=backend_for_timeline, prefix=True)
"""The entry point ``chat``: recorded-response backends for ``chat`` and ``chat:<dataset>`` timelines."""
