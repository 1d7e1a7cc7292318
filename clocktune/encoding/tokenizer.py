"""Extending a tokenizer with clocktune's tokens and storing the encoding where ``from_pretrained`` finds it.

``extend_tokenizer`` adds the action markers and the clock tokens as special tokens and replaces the chat
template by one that frames timeline messages (``clocktune.render.timeline_to_messages``) exactly as the renderer
does. The template's first line is a Jinja comment holding the encoding as JSON::

    {#- clocktune-encoding {"version": 2, "model_format": "qwen2.5", "codec": {"name": "abs_bins", ...}} -#}

so ``AutoTokenizer.from_pretrained(dir)`` alone recovers codec and format (``load_encoding``), with no side file.
After the model's embeddings are resized, ``init_marker_embeddings`` gives each action marker the embedding of
its name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from clocktune.encoding.formats import ModelFormat, get_format
from clocktune.encoding.time_codecs import TimeCodec, get_codec

# 2: agent actions carry the state line (``clocktune.state_line``) after their clock. A tokenizer of version 1 was
# trained without it, so the renderer refuses it rather than show its model a format it never saw.
ENCODING_VERSION = 2
_HEADER = "{#- clocktune-encoding "
_HEADER_RE = re.compile(r"\{#- clocktune-encoding (.*) -#\}\n")


@dataclass(frozen=True)
class Encoding:
    """How timelines become text for one tokenizer: a time codec and a model format.

    Args:
        codec: Writes the clock before each event.
        model_format: Frames each event as a message.
    """

    codec: TimeCodec
    model_format: ModelFormat

    def special_tokens(self) -> list[str]:
        """Returns the tokens clocktune adds: the format's action markers, then the codec's clock tokens."""
        return list(self.model_format.markers) + self.codec.special_tokens()

    def marker_words(self) -> dict[str, str]:
        """Returns each action marker's name in plain words (``"<|commit|>"`` → ``" commit"``)."""
        return {marker: " " + marker.strip("<|>") for marker in self.model_format.markers}

    def to_dict(self) -> dict[str, Any]:
        """Returns the encoding as JSON-ready config."""
        return {"version": ENCODING_VERSION, "model_format": self.model_format.name, "codec": self.codec.to_dict()}

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> Encoding:
        """Builds an encoding from ``to_dict`` output.

        Args:
            config: ``{"version": 2, "model_format": ..., "codec": {...}}``.

        Returns:
            The encoding.

        Raises:
            ValueError: For an unsupported version, an unknown format or a bad codec config.
        """
        if config.get("version") != ENCODING_VERSION:
            raise ValueError(
                f"unsupported clocktune encoding version {config.get('version')!r} (this clocktune reads "
                f"{ENCODING_VERSION}); extend the base model's tokenizer again and retrain"
            )
        return cls(TimeCodec.from_dict(config["codec"]), get_format(config["model_format"]))


def chat_template(encoding: Encoding) -> str:
    """Returns the Jinja chat template that frames timeline messages and records ``encoding``.

    Messages carry their role as the model sees it and their whole content (clock included), so the template only
    frames them; ``add_generation_prompt`` appends the assistant header (the runtime adds the clock after it).

    Args:
        encoding: Codec and format.

    Returns:
        The template text.
    """
    fmt = encoding.model_format

    # json.dumps with ASCII escapes is a valid Jinja string literal.
    def literal(text: str) -> str:
        return json.dumps(text)

    bos = f"{{{{- {literal(fmt.bos)} -}}}}\n" if fmt.bos else ""
    return (
        f"{_HEADER}{json.dumps(encoding.to_dict(), separators=(',', ':'))} -#}}\n"
        f"{bos}"
        "{%- for message in messages -%}\n"
        f"{{{{- {literal(fmt.header_start)} + message['role'] + {literal(fmt.header_end)} + message['content'] + "
        f"{literal(fmt.end + fmt.tail)} -}}}}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n"
        f"{{{{- {literal(fmt.header('assistant'))} -}}}}\n"
        "{%- endif -%}\n"
    )


def extend_tokenizer(tokenizer: Any, codec: TimeCodec | str, model_format: ModelFormat | str) -> list[int]:
    """Adds clocktune's markers and clock tokens to a tokenizer and stores the encoding in its chat template.

    The tokens are added as special tokens (never split, skipped by ``decode(skip_special_tokens=True)``).
    Calling it again with the same encoding changes nothing. Resize the model's embeddings afterwards
    (``model.resize_token_embeddings(len(tokenizer))``). The tokenizer's previous chat template is replaced.

    Args:
        tokenizer: A Hugging Face tokenizer of the model family ``model_format`` describes.
        codec: Time codec, or its name for the default parameters.
        model_format: ``"qwen2.5"``, ``"llama3.2"`` or ``"chatml"``, or a format.

    Returns:
        Ids of the clocktune tokens (markers, then clock tokens): the new embeddings to train, e.g. as PEFT's
        ``trainable_token_indices``.

    Raises:
        ValueError: When the tokenizer lacks the special tokens of the format's framing (not that model family).
    """
    encoding = Encoding(get_codec(codec), get_format(model_format))
    added = tokenizer.get_added_vocab()
    missing = [token for token in encoding.model_format.native_tokens if token not in added]
    if missing:
        raise ValueError(
            f"tokenizer lacks the special tokens {missing} that model format {encoding.model_format.name!r} frames "
            "messages with; use that model family's tokenizer"
        )
    tokens = encoding.special_tokens()
    tokenizer.add_special_tokens({"additional_special_tokens": tokens}, replace_extra_special_tokens=False)
    tokenizer.chat_template = chat_template(encoding)
    return tokenizer.convert_tokens_to_ids(tokens)


def init_marker_embeddings(model: Any, tokenizer: Any, keep: Collection[str] = ()) -> int:
    """Initialises the embeddings of the action markers from the words they are named by.

    Each marker's row becomes the mean of the rows of its name's tokens (``<|commit|>`` from `` commit``), in the
    input embeddings and, when they are not tied, in the output layer. The model then starts knowing roughly what
    each marker means (the system prompt explains them in words), where ``resize_token_embeddings`` gives every new
    token a random draw around the same mean; short fine-tunes learn the decisions faster from there. Clock tokens
    keep their draws: a bag of digit tokens would give 1.2 s and 2.1 s the same row.

    Args:
        model: A causal LM already resized to ``len(tokenizer)``.
        tokenizer: The tokenizer extended by :func:`extend_tokenizer`.
        keep: Markers whose rows are left as they are: those the model already had (a clocktune checkpoint trained
            them; re-initialising would throw that away).

    Returns:
        The number of rows initialised.
    """
    import torch

    words = {marker: word for marker, word in load_encoding(tokenizer).marker_words().items() if marker not in keep}
    token_ids = tokenizer.convert_tokens_to_ids(list(words))
    word_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in words.values()]
    input_rows = model.get_input_embeddings().weight
    output_layer = model.get_output_embeddings()
    tables = [input_rows]
    if output_layer is not None and output_layer.weight.data_ptr() != input_rows.data_ptr():
        tables.append(output_layer.weight)
    with torch.no_grad():
        for table in tables:
            for token_id, ids in zip(token_ids, word_ids, strict=True):
                table[token_id] = table[ids].mean(dim=0)
    return len(token_ids)


def load_encoding(tokenizer: Any) -> Encoding:
    """Recovers the encoding that ``extend_tokenizer`` stored in a tokenizer's chat template.

    Args:
        tokenizer: A tokenizer extended by ``extend_tokenizer`` (possibly saved and reloaded).

    Returns:
        Its codec and model format.

    Raises:
        ValueError: When the tokenizer carries no clocktune encoding.
    """
    template = tokenizer.chat_template
    match = _HEADER_RE.match(template) if isinstance(template, str) else None
    if match is None:
        raise ValueError("tokenizer carries no clocktune encoding; call clocktune.encoding.extend_tokenizer first")
    return Encoding.from_dict(json.loads(match.group(1)))
