"""Model and dataset cards for the Hub: what a pushed checkpoint or dataset is, with Hub metadata a user can search.

A model card names the base model by its Hub id (``base_model:``, so the Hub links the fine-tune to it), the training
data, the clock configuration the tokenizer carries, and, when an evaluation summary is given, the live results as
``model-index`` results (live accuracy, response latency, speedup over the baseline, on the named device profile).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import DatasetCard, DatasetCardData, EvalResult, ModelCard, ModelCardData

from clocktune.data_files import read_data_text

__all__ = ["TAGS", "card_info_for", "dataset_card", "eval_results", "model_card"]

TAGS = ["clocktune", "real-time-agent", "tool-calling"]


def card_info_for(
    checkpoint: str | Path,
    dataset: str | None = None,
    dataset_stats_path: str | Path | None = None,
    eval_summary_path: str | Path | None = None,
) -> dict[str, Any]:
    """The model card facts of a checkpoint, for ``push_checkpoint(card_info=...)``.

    Args:
        checkpoint: The checkpoint folder; its tokenizer's clocktune encoding gives the clock configuration.
        dataset: The training dataset (Hub id or path), named on the card.
        dataset_stats_path: A ``stats.json`` of the training data, shown as a table; ``None`` shows none.
        eval_summary_path: A ``summary.json`` whose numbers (only those) go in the evaluation table; ``None``
            shows none.

    Returns:
        ``{"base_model", "clock", "dataset", "dataset_stats", "eval", "eval_summary"}``: the base model and, when
        ``dataset`` is ``None``, the training data come from the checkpoint's training record
        (``clocktune.train.record``).

    Raises:
        OSError: When a file cannot be read or the tokenizer cannot be loaded.
        ValueError: When the tokenizer carries no clocktune encoding, or a JSON file does not parse.
    """
    # Imported here so that dataset pushes do not pay for importing transformers.
    from transformers import AutoTokenizer

    from clocktune.encoding import load_encoding
    from clocktune.train.record import read_training_record

    encoding = load_encoding(AutoTokenizer.from_pretrained(checkpoint))
    record = read_training_record(checkpoint)
    summary = _read_json(eval_summary_path)
    # The demo's summary holds the runtime's under "eval"; clocktune eval's is the runtime's itself.
    summary = summary.get("eval") if isinstance(summary.get("eval"), dict) else summary
    # Only numbers make evaluation rows: a summary also holds paths and nested reports.
    evaluation = {key: value for key, value in summary.items() if isinstance(value, int | float)}
    return {
        "base_model": record.get("base_model"),
        "clock": {"model_format": encoding.model_format.name, **_codec_settings(encoding.codec.to_dict())},
        "dataset": dataset or (", ".join(record["train_data"]) if record.get("train_data") else None),
        "dataset_stats": _read_json(dataset_stats_path),
        "eval": evaluation,
        "eval_summary": summary,
    }


def eval_results(summary: Mapping[str, Any]) -> list[EvalResult]:
    """The live results of an evaluation summary as ``model-index`` results of the card.

    Args:
        summary: A ``clocktune eval`` summary (``summarize_runs`` keys plus the settings ``eval`` records).

    Returns:
        Live accuracy, the response latency's median and the speedup over the baseline (with the baseline and the
        device profile named); empty when the summary has no accuracy.
    """
    if not isinstance(summary.get("accuracy"), int | float):
        return []
    dataset = {
        "task_type": "text-generation",
        "task_name": "real-time tool use, played live",
        "dataset_type": "clocktune-timelines",
        "dataset_name": f"{summary.get('dialogues', '?')} held-out timelines",
        "metric_config": str(summary.get("profile") or "h200-3b"),
    }
    metrics = [("accuracy", "live accuracy", summary.get("accuracy"))]
    metrics.append(("latency", "response latency p50 (s)", summary.get("latency_p50_s")))
    baseline = summary.get("baseline", "baseline")
    metrics.append(("speedup", f"speedup p50 over {baseline}", summary.get("speedup_p50")))
    return [
        EvalResult(metric_type=kind, metric_name=name, metric_value=value, **dataset)
        for kind, name, value in metrics
        if isinstance(value, int | float)
    ]


def _read_json(path: str | Path | None) -> dict:
    """The JSON object in ``path``; ``{}`` when there is no path."""
    if path is None:
        return {}
    return json.loads(read_data_text(path))  # bounded, a regular file


def _codec_settings(codec: dict) -> dict:
    """``{"name": "abs_bins", "resolution": 0.1}`` as card rows: ``time_codec``, ``time_codec.resolution``."""
    return {("time_codec" if key == "name" else f"time_codec.{key}"): value for key, value in codec.items()}


def _repo_id_or_none(name: str | None) -> str | None:
    """``name`` when it can be a Hub repo id; ``None`` for local paths, which Hub metadata rejects."""
    if name is None or Path(name).exists() or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        return None
    return name


def _cell(value: Any) -> str:
    """One Markdown table cell: floats to 4 significant digits, dicts inline, pipes escaped."""
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, Mapping):
        text = ", ".join(f"{key}: {_cell(item)}" for key, item in value.items())
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: Mapping[str, Any], key_header: str, value_header: str) -> str:
    """A two-column Markdown table of ``rows``."""
    lines = [f"| {key_header} | {value_header} |", "| --- | --- |"]
    lines += [f"| {_cell(key)} | {_cell(value)} |" for key, value in rows.items()]
    return "\n".join(lines)


def model_card(repo_id: str, *, is_peft: bool, base_model: str | None, weights: str, info: Mapping) -> ModelCard:
    """The model card: Hub metadata, what the model is, data, clock, eval tables and how to run it."""
    from clocktune.models import hub_id_of

    dataset = info.get("dataset")
    base_model = hub_id_of(base_model) or base_model
    data = ModelCardData(
        base_model=_repo_id_or_none(base_model),
        library_name="peft" if is_peft else "transformers",
        pipeline_tag="text-generation",
        tags=TAGS,
        datasets=[repo] if (repo := _repo_id_or_none(dataset)) else None,
        model_name=repo_id.split("/")[-1],
        eval_results=eval_results(info.get("eval_summary") or {}) or None,
    )
    name = repo_id.split("/")[-1]
    sections = [
        f"# {name}",
        "A real-time agent fine-tuned with clocktune. It reads a dialogue as a timeline of time-stamped events "
        "(speech-recogniser chunks while the user is still talking, tool results as they arrive), calls tools "
        "speculatively before the user has finished, and answers within about a second of the end of speech. "
        "Every event starts with a clock, so the model knows how much time has passed.",
        f"- **Base model:** `{base_model or 'not recorded'}`\n- **Weights:** {weights}\n"
        f"- **Training data:** `{dataset or 'not recorded'}`",
    ]
    if info.get("dataset_stats"):
        sections += ["## Training data", _table(info["dataset_stats"], "statistic", "value")]
    if info.get("clock"):
        sections += ["## Clock configuration", _table(info["clock"], "setting", "value")]
    if info.get("eval"):
        sections += ["## Evaluation", _table(info["eval"], "metric", "value")]
    if is_peft:
        load = (
            "from peft import AutoPeftModelForCausalLM\n"
            "from transformers import AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")\n'
            f'model = AutoPeftModelForCausalLM.from_pretrained("{repo_id}")  # base model + adapter'
        )
    else:
        load = (
            "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")\n'
            f'model = AutoModelForCausalLM.from_pretrained("{repo_id}")'
        )
    sections += [
        "## How to run it",
        "The tokenizer carries the clock tokens and the chat template that clocktune renders timelines with; "
        "use it as it is. Run it live in the clocktune runtime (speech replayed on a virtual clock, tools executed "
        "with speculation and commit) and compare it with the turn-based baseline "
        "(`clocktune eval --help` lists the data and device options):",
        "```bash\nclocktune-datagen generate --num 100 --seed 1 --out data/eval\n"
        f"clocktune eval --data data/eval/data --model {repo_id} --profile h200-3b --out runs/eval\n```",
        "Or load it directly:",
        f"```python\n{load}\n```",
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


def dataset_card(repo_id: str, data_files: str, stats: Mapping, manifest: Mapping) -> DatasetCard:
    """The dataset card: the ``default`` config over the shards, the statistics and the timeline format."""
    data = DatasetCardData(
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": data_files}]}],
        tags=TAGS,
        task_categories=["text-generation"],
    )
    name = repo_id.split("/")[-1]
    sections = [
        f"# {name}",
        f"Streaming tool-use dialogues generated by `clocktune-datagen generate` (seed {manifest.get('seed')}, "
        f"{manifest.get('num')} dialogues); `generation.json` holds the full generator config and `stats.json` "
        "the statistics below.",
        "## Statistics",
        _table(stats, "statistic", "value"),
        "## Format",
        "Each row is one dialogue as a timeline: a header (`domain`, `task`, `seed`, `teacher`, `tools` with their "
        "schemas, `initial_state`, `ground_truth`) and `events` ordered by time. Every event has an `id`, a time `t` "
        "(seconds on the simulated clock), a `kind` (`user_chunk`, `tool_call`, `tool_modify`, `tool_cancel`, "
        "`tool_result`, `say`, `wait`, `commit`, `notice`) and a `source`. Tool arguments and results (like schemas "
        "and backend states) are stored as JSON strings, which keeps one Arrow schema across tools; "
        "`clocktune.timeline.timeline_from_record(row)` parses a row back.",
        f'```python\nfrom datasets import load_dataset\n\nds = load_dataset("{repo_id}", split="train")\n```',
    ]
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")
