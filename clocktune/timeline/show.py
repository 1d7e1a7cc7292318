"""Showing a timeline: a readable listing for the terminal and a Gantt chart of who was doing what when."""

from __future__ import annotations

import json
import os

from clocktune.timeline.analysis import call_records
from clocktune.timeline.events import CallPlacement, Timeline

_MARK = {"user": "USER ", "agent": "AGENT", "tool": "TOOL ", "system": "SYS  "}


def format_timeline(timeline: Timeline) -> str:
    """Renders a timeline as text, one event per line, with speculative calls marked.

    Args:
        timeline: The timeline.

    Returns:
        The listing.
    """
    records = call_records(timeline)
    tools = ", ".join(f"{tool.name}{'*' if tool.side_effect else ''}" for tool in timeline.tools)
    lines = [
        f"timeline {timeline.id}  domain={timeline.domain}  task={timeline.task}  teacher={timeline.teacher}",
        f"tools (* changes state): {tools}",
    ]
    for event in timeline.events:
        body = event.kind
        if event.kind == "user_chunk":
            body = (
                f"{event.text!r}"
                + (" [final]" if event.final else "")
                + (f" revises {event.revises}" if event.revises else "")
            )
        elif event.kind == "tool_call":
            spec = " speculative" if records[event.call_id].speculative else ""
            body = f"call {event.call_id} {event.name}({json.dumps(event.arguments)}){spec}"
        elif event.kind == "tool_modify":
            body = f"modify {event.call_id} -> {json.dumps(event.arguments)}"
        elif event.kind == "tool_cancel":
            body = f"cancel {event.call_id}"
        elif event.kind == "tool_result":
            payload = f"error: {event.error}" if event.error is not None else json.dumps(event.content)
            body = f"result {event.call_id} {payload[:100]}"
        elif event.kind in ("say", "notice"):
            body = f"{event.kind} {event.text!r}" + (" [final]" if event.final else "")
        lines.append(f"{event.t:8.3f}s  {_MARK[event.source]}  {body}")
    truth = timeline.ground_truth
    lines.append("ground truth: " + "; ".join(f"{c.name}({json.dumps(c.arguments)})" for c in truth.calls))
    lines.append(f"facts: {truth.facts}")
    if timeline.placements:
        lines.append("placed (where each imported call's arguments were settled in the user's words):")
        lines += [f"  {format_placement(placement)}" for placement in timeline.placements]
    return "\n".join(lines)


def format_placement(placement: CallPlacement) -> str:
    """One line for an imported call's placement: where in its turn, and which words settled each argument.

    Args:
        placement: The record.

    Returns:
        E.g. ``t0c0 book_table: turn 0, word 9 of 12: date 'tomorrow' (date, word 4); time ... (time, word 9)``.
    """
    where = (
        f"word {placement.at_word} of {placement.words}"
        if placement.at_word is not None
        else f"end of speech ({placement.words} words)"
    )
    parts = []
    for argument in placement.arguments:
        said = f" {argument.words!r}" if argument.words is not None else ""
        at = f", word {argument.at_word}" if argument.at_word is not None else ""
        parts.append(f"{argument.path}{said} ({argument.kind}{at})")
    return f"{placement.key} {placement.name}: turn {placement.turn}, {where}: " + ("; ".join(parts) or "no values")


def draw_gantt(timeline: Timeline, path: str | os.PathLike, words_per_s: float = 3.0) -> None:
    """Draws user speech, calls in flight and agent speech on one time axis and saves it as an image.

    Args:
        timeline: The timeline.
        path: Output image (PNG).
        words_per_s: Speaking rate used to draw how long the agent's words last.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = call_records(timeline)
    rows: list[tuple[str, list[tuple[float, float, str, str]]]] = []
    user, previous, words = [], None, []
    for event in timeline.events:
        if event.kind == "user_chunk":
            start = previous if previous is not None else max(event.t - 0.4, 0.0)
            words.append(event.text)
            label = ""
            if event.final:
                text = " ".join(words)
                label, words = (text if len(text) < 60 else text[:57] + "..."), []
            user.append((start, event.t - start, "tab:red" if event.revises else "tab:blue", label))
            previous = None if event.final else event.t
    rows.append(("user", user))
    end = timeline.events[-1].t if timeline.events else 1.0
    for record in records.values():
        stop = record.end_t if record.end_t is not None else end
        color = "tab:gray" if record.cancelled_t is not None else "tab:red" if record.side_effect else "tab:orange"
        label = record.name + (" (spec.)" if record.speculative else "")
        spans = [(record.issued_t, max(stop - record.issued_t, 0.02), color, label)]
        spans += [(t, 0.03, "black", "") for t in record.modifications]
        rows.append((record.call_id, spans))
    agent = []
    for event in timeline.events:
        if event.kind == "say":
            duration = max(len(event.text.split()) / words_per_s, 0.2)
            agent.append((event.t, duration, "tab:green" if event.final else "tab:olive", ""))
        elif event.kind == "commit":
            agent.append((event.t, 0.04, "purple", "commit"))
    rows.append(("agent", agent))

    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 1.5))
    for y, (name, spans) in enumerate(reversed(rows)):
        for start, width, color, label in spans:
            ax.broken_barh([(start, width)], (y - 0.35, 0.7), facecolor=color, edgecolor="white", linewidth=0.8)
            if label:
                # An utterance's words sit at its end, where the final chunk lands; other labels at their start.
                ax.text(start + width if name == "user" else start, y + 0.42, label, fontsize=7, va="bottom",
                        ha="right" if name == "user" else "left")  # fmt: skip
    for event in timeline.events:
        if event.kind == "user_chunk" and event.final:
            ax.axvline(event.t, color="gray", linestyle="--", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [name for name, _ in reversed(rows)])
    ax.set_xlabel("time (s)")
    ax.set_title(f"{timeline.id}  {timeline.domain}/{timeline.task}  teacher={timeline.teacher}")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
