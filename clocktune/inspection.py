"""Token inspection: one rendered timeline laid out token by token, readable without colour.

``format_inspection`` is what ``clocktune inspect`` prints: one block per event, its tokens separated by ``|``,
with loss-bearing ``[...]``, clock ``{...}`` and hidden events marked, so a rendering can be checked by eye.
"""

from __future__ import annotations

from typing import Any

__all__ = ["format_inspection"]


def _token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    # Decoded one by one, without clean-up, so the texts concatenate to the rendered text (except where a token
    # holds part of a multi-byte character).
    return [tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False) for i in ids]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def _marked_tokens(texts: list[str], loss: list[bool], clock: list[bool]) -> str:
    """Tokens joined by ``|``; runs of loss-bearing tokens in ``[...]``, of clock tokens in ``{...}``, of
    loss-bearing clock tokens (``--agent-clock-loss``) in ``[{...}]``."""
    runs: list[tuple[tuple[bool, bool], list[str]]] = []
    for text, kind in zip(texts, zip(loss, clock, strict=True), strict=True):
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(_escape(text))
        else:
            runs.append((kind, [_escape(text)]))
    brackets = {
        (False, False): ("", ""),
        (True, False): ("[", "]"),
        (False, True): ("{", "}"),
        (True, True): ("[{", "}]"),
    }
    return " ".join(f"{brackets[kind][0]}{'|'.join(tokens)}{brackets[kind][1]}" for kind, tokens in runs)


def format_inspection(timeline: Any, rendering: Any, tokenizer: Any, encoding: Any, show_system: bool) -> str:
    """Lays out a rendering token by token, one block per event, readable without colour.

    Args:
        timeline: The rendered timeline.
        rendering: ``clocktune.render.render(timeline, tokenizer, ...)``.
        tokenizer: The tokenizer that rendered it.
        encoding: Its ``clocktune.encoding.Encoding``.
        show_system: Whether to print the system prefix's tokens, not only their count.

    Returns:
        The text: a legend, the events with loss-bearing ``[...]``, clock ``{...}`` and hidden tokens marked, and
        totals.
    """
    fmt, codec = encoding.model_format, encoding.codec
    spans: dict[int, list[int]] = {}
    for position, index in enumerate(rendering.event_index):
        spans.setdefault(index, [position, position])[1] = position + 1
    hidden = sum(until != float("inf") for until in rendering.visible_until)
    loss = [label != -100 for label in rendering.labels]
    lines = [
        f"timeline {timeline.id}  {timeline.domain}/{timeline.task}  {fmt.name}, {codec.name}: "
        f"{len(rendering):,} tokens, {sum(loss):,} loss-bearing, {hidden:,} hidden at some point",
        "legend: tokens separated by |, [loss-bearing], {clock}, [{loss-bearing clock}], plain = context; "
        "HIDDEN events are invisible to every token from their visible_until time on",
    ]
    start, end = spans[-1]
    lines.append(
        f"system prefix (sink, t=0): {end - start} tokens" + ("" if show_system else ", --system prints them")
    )
    if show_system:
        texts = _token_texts(tokenizer, rendering.input_ids[start:end])
        lines.append("    " + _marked_tokens(texts, loss[start:end], [False] * (end - start)))

    prev_t = 0.0
    for index, event in enumerate(timeline.events):
        start, end = spans[index]
        # Every message is header + clock (+ state line for agent actions) + body + end + tail: the clock's tokens are
        # those overlapping the characters after the header.
        role, _ = fmt.message(event)
        clock_start = len(fmt.header(role))
        clock_end = clock_start + len(codec.encode(event.t, prev_t))
        prev_t = event.t
        texts = _token_texts(tokenizer, rendering.input_ids[start:end])
        clock, offset = [], 0
        for text in texts:
            clock.append(offset < clock_end and offset + len(text) > clock_start)
            offset += len(text)
        until = min(rendering.visible_until[start:end])
        header = f"#{index:<4} {f't={event.t:.3f}s':<12} {event.kind:<11} {event.source:<6}"
        if until != float("inf"):
            header += f"  HIDDEN from t={until:.3f}s (visible_until)"
        lines.append(header.rstrip())
        lines.append("    " + _marked_tokens(texts, loss[start:end], clock))
    return "\n".join(lines)
