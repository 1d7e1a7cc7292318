"""Next-action accuracy: at every agent decision point of held-out timelines, does the model pick the right action?

A decision point is the place where the runtime has fed everything up to an agent action's header, clock and state
line, and the model must choose what to do. Its choice is the first token it would write: a marker (``<|wait|>``,
``<|say|>``, ``<|answer|>``, ``<|commit|>``, ``<|modify|>``, ``<|cancel|>``) or the format's call opening. The
evaluation is teacher-forced (one forward per timeline, with the streaming mask), so it measures the policy at the
gold history, which is what supervised fine-tuning optimises.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from clocktune.collate import StreamingCollator
from clocktune.masks import attention_inputs
from clocktune.render import IGNORE_INDEX, render
from clocktune.timeline.events import Event, Timeline


def action_type(event: Event) -> str:
    """The decision an agent event stands for: call, modify, cancel, wait, say, answer (a final say) or commit."""
    if event.kind == "say":
        return "answer" if event.final else "say"
    return event.kind.removeprefix("tool_")


@dataclass
class NextActionReport:
    """Counts and losses of one evaluation.

    Args:
        points: Decision points seen.
        correct: Decision points where the predicted action type is the gold one.
        decision_points: Decision points whose gold action is not ``wait``.
        decision_correct: Of those, how many were predicted right.
        loss_sum: Summed cross-entropy over all loss-bearing tokens.
        loss_tokens: Number of loss-bearing tokens.
        confusion: ``(gold, predicted)`` counts.
    """

    points: int = 0
    correct: int = 0
    decision_points: int = 0
    decision_correct: int = 0
    loss_sum: float = 0.0
    loss_tokens: int = 0
    confusion: Counter = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        """Accuracies and mean loss as plain numbers."""
        gold_wait = sum(count for (gold, _), count in self.confusion.items() if gold == "wait")
        return {
            "next_action_accuracy": self.correct / self.points if self.points else math.nan,
            # What always choosing `wait` would score: the floor a trained policy must clear.
            "next_action_accuracy_always_wait": gold_wait / self.points if self.points else math.nan,
            "decision_accuracy": self.decision_correct / self.decision_points if self.decision_points else math.nan,
            "eval_loss": self.loss_sum / self.loss_tokens if self.loss_tokens else math.nan,
            "decision_points": self.points,
        }


@torch.no_grad()
def evaluate_next_action(
    model: Any, tokenizer: Any, timelines: Sequence[Timeline], model_format: str | None = None
) -> NextActionReport:
    """Scores a model's next action at every agent decision point of ``timelines``.

    Args:
        model: A causal LM (plain or PEFT) whose embeddings match the extended ``tokenizer``.
        tokenizer: The tokenizer extended with clock tokens.
        timelines: Held-out timelines.
        model_format: Expected model format; ``None`` takes the tokenizer's.

    Returns:
        The counts; see :meth:`NextActionReport.summary`.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    implementation = model.config._attn_implementation
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    report = NextActionReport()
    renderings = [render(timeline, tokenizer, model_format) for timeline in timelines]
    # The first token of each kind of action, read off the gold data, tells which action a prediction names.
    first_token_type: dict[int, str] = {}
    points = []
    for timeline, rendering in zip(timelines, renderings, strict=True):
        starts = {}
        for position, (index, label) in enumerate(zip(rendering.event_index, rendering.labels, strict=True)):
            if label != IGNORE_INDEX and index not in starts:
                starts[index] = position
        gold = [(position, action_type(timeline.events[index])) for index, position in starts.items()]
        for position, kind in gold:
            first_token_type[rendering.input_ids[position]] = kind
        points.append(gold)

    for rendering, gold in zip(renderings, points, strict=True):
        batch = StreamingCollator(max_length=len(rendering), pad_token_id=pad_id)([rendering.to_dict()])
        batch = {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}
        inputs = attention_inputs(batch, implementation, dtype=dtype)
        logits = model(input_ids=batch["input_ids"], use_cache=False, **inputs).logits[0].float()
        labels = torch.tensor(rendering.labels, device=device)
        # Logits at position p predict the token at p + 1.
        targets = labels[1:]
        scored = targets != IGNORE_INDEX
        losses = torch.nn.functional.cross_entropy(logits[:-1][scored], targets[scored], reduction="sum")
        report.loss_sum += losses.item()
        report.loss_tokens += int(scored.sum())
        predicted_ids = logits.argmax(dim=-1).tolist()
        for position, kind in gold:
            predicted = first_token_type.get(predicted_ids[position - 1], "other")
            report.points += 1
            report.correct += predicted == kind
            report.confusion[(kind, predicted)] += 1
            if kind != "wait":
                report.decision_points += 1
                report.decision_correct += predicted == kind
    model.train(was_training)
    return report
