"""A tiny byte-level BPE tokenizer per model format, trained offline in milliseconds, for tests.

Each one mimics its model family where it matters for rendering: the pre-tokenizer split pattern (Qwen2's and
Llama 3's regexes, GPT-2's for SmolLM2's ChatML) and the native special tokens of the chat framing. It is trained on
dialogues and on the format's system prompts (the tools' JSON), so that a rendered timeline is about as long in its
tokens as a real tokenizer makes it: trained on dialogues alone, the indented tool schemas came out at a token a
character or two, timelines at 5,000 tokens where the real ones hold 1,500-2,500, and every training test paid the
square of that in attention.
"""

from __future__ import annotations

from functools import lru_cache

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AddedToken, PreTrainedTokenizerFast

from clocktune.encoding.formats import get_format
from clocktune.timeline.show import format_timeline
from data_gen.config import GeneratorConfig
from data_gen.generate import generate_dialogue

QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

# Per format: split pattern (None: GPT-2's byte-level regex), special tokens, other added tokens, eos.
_FAMILIES = {
    "qwen2.5": (
        QWEN_PATTERN,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
        "<|im_end|>",
    ),
    "llama3.2": (
        LLAMA3_PATTERN,
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        [],
        "<|eot_id|>",
    ),
    "chatml": (None, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], [], "<|im_end|>"),
}


@lru_cache(maxsize=4)
def _corpus(model_format: str) -> tuple[str, ...]:
    config = GeneratorConfig()
    timelines = [generate_dialogue(i, 7, config) for i in range(40)]
    system_prompt = get_format(model_format).system_prompt
    return tuple(format_timeline(timeline) for timeline in timelines) + tuple(
        system_prompt(timeline.tools) for timeline in timelines
    )


def tiny_tokenizer(model_format: str, vocab_size: int = 1000) -> PreTrainedTokenizerFast:
    """Returns a fresh tiny tokenizer for a model format (fresh each call: ``extend_tokenizer`` mutates it).

    Args:
        model_format: ``"qwen2.5"``, ``"llama3.2"`` or ``"chatml"``.
        vocab_size: BPE vocabulary size before special tokens.

    Returns:
        A transformers fast tokenizer with the family's special tokens.
    """
    pattern, special, added, eos = _FAMILIES[model_format]
    tokenizer = Tokenizer(models.BPE())
    if pattern is None:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(model_format), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=eos)
    wrapped.add_tokens([AddedToken(token, special=False, normalized=False) for token in added])
    return wrapped
