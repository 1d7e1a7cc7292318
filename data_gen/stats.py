"""Dataset statistics, computed from the timelines themselves (what a reader of the files would find)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from clocktune.timeline.analysis import (
    observed_tool_latencies,
    response_latencies,
    speech_rates,
    timeline_features,
)
from clocktune.timeline.events import Timeline


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class DatasetStats:
    """Running statistics over timelines; shards are merged in order so the result is independent of workers."""

    dialogues: int = 0
    events: int = 0
    domains: Counter = field(default_factory=Counter)
    tasks: Counter = field(default_factory=Counter)
    features: Counter = field(default_factory=Counter)
    speech_rates: list[float] = field(default_factory=list)
    tool_latencies: list[float] = field(default_factory=list)
    response_latencies: list[float] = field(default_factory=list)

    def add(self, timeline: Timeline) -> None:
        """Counts one timeline."""
        self.dialogues += 1
        self.events += len(timeline.events)
        self.domains[timeline.domain] += 1
        self.tasks[timeline.task] += 1
        features = timeline_features(timeline)
        for name in ("speculative_call", "corrected_call", "parallel_calls", "dependent_calls", "no_tool"):
            self.features[name] += getattr(features, name)
        self.features["perturbed"] += bool(timeline.context_only)  # wrong actions of a perturbed expert (perturb)
        self.speech_rates.extend(speech_rates(timeline))
        self.tool_latencies.extend(observed_tool_latencies(timeline))
        self.response_latencies.extend(response_latencies(timeline))

    def merge(self, other: DatasetStats) -> None:
        """Adds another shard's statistics to these."""
        self.dialogues += other.dialogues
        self.events += other.events
        self.domains.update(other.domains)
        self.tasks.update(other.tasks)
        self.features.update(other.features)
        self.speech_rates.extend(other.speech_rates)
        self.tool_latencies.extend(other.tool_latencies)
        self.response_latencies.extend(other.response_latencies)

    def to_dict(self) -> dict:
        """The ``stats.json`` form: counts, fractions and latency percentiles, rounded for reading."""
        total = max(self.dialogues, 1)

        def fraction(name: str) -> float:
            return round(self.features[name] / total, 4)

        rates = self.speech_rates
        return {
            "dialogues": self.dialogues,
            "events": self.events,
            "domains": dict(sorted(self.domains.items())),
            "tasks": dict(sorted(self.tasks.items())),
            "speech_words_per_s_mean": round(sum(rates) / len(rates), 3) if rates else float("nan"),
            "tool_latency_s_p50": round(percentile(self.tool_latencies, 0.5), 3),
            "tool_latency_s_p90": round(percentile(self.tool_latencies, 0.9), 3),
            "response_latency_s_p50": round(percentile(self.response_latencies, 0.5), 3),
            "response_latency_s_p90": round(percentile(self.response_latencies, 0.9), 3),
            "frac_with_speculative_call": fraction("speculative_call"),
            "frac_with_corrected_call": fraction("corrected_call"),
            "frac_with_parallel_calls": fraction("parallel_calls"),
            "frac_with_dependent_calls": fraction("dependent_calls"),
            "frac_no_tool": fraction("no_tool"),
            "frac_perturbed": fraction("perturbed"),
        }
