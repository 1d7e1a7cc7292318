"""Encoding of timelines as tokens (docs/design.md §3): time codecs, model formats and the tokenizer extension."""

from clocktune.encoding.formats import FORMATS, MARKERS, ModelFormat, get_format, tool_json
from clocktune.encoding.time_codecs import CODECS, AbsBinsCodec, LogDeltaCodec, TextCodec, TimeCodec, get_codec
from clocktune.encoding.tokenizer import (
    Encoding,
    chat_template,
    extend_tokenizer,
    init_marker_embeddings,
    load_encoding,
)

__all__ = [
    "CODECS",
    "FORMATS",
    "MARKERS",
    "AbsBinsCodec",
    "Encoding",
    "LogDeltaCodec",
    "ModelFormat",
    "TextCodec",
    "TimeCodec",
    "chat_template",
    "extend_tokenizer",
    "get_codec",
    "get_format",
    "init_marker_embeddings",
    "load_encoding",
    "tool_json",
]
