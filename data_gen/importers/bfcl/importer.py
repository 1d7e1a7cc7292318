"""Playing BFCL entries out as timelines, and importing a whole category in the generator's dataset layout.

Each turn's calls are read at their earliest determinable point (``entries.build_task`` with
``data_gen.determinable``, the rule ``import-chat`` uses too), and the expert of the config's teacher plays the entry
in the runtime (``generate.play_task``) keeping BFCL's program order (``ExpertPolicy(program_order=True)`` on the
backend's ``sequential`` executor): before the user has finished it issues only a turn's leading read-only calls
whose arguments have been heard; state-changing calls, and everything after one, wait for the final chunk and the
commit.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from clocktune.atomic import atomic_write_lines
from clocktune.settings_stamp import stamp_settings
from clocktune.timeline.events import GroundTruth, Timeline
from clocktune.timeline.io import timeline_to_json
from clocktune.timeline.validate import validate_timeline
from data_gen.backends import RecordingBackend
from data_gen.config import GeneratorConfig, config_to_dict
from data_gen.dialogues import dialogue_seed
from data_gen.domains.base import ToolError
from data_gen.generate import GenerationError, play_task
from data_gen.importers.bfcl.backend import BfclBackend, BfclCallError
from data_gen.importers.bfcl.entries import build_task, load_entries, plan_turns
from data_gen.importers.bfcl.errors import BfclError
from data_gen.importers.bfcl.schemas import parameter_names, tool_schemas
from data_gen.importers.bfcl.wheel import find_bfcl_root, installed_version
from data_gen.stats import DatasetStats
from data_gen.writer import MANIFEST

__all__ = ["DOMAIN", "SHARD_NAME", "entry_timeline", "import_bfcl"]

DOMAIN = "bfcl"
SHARD_NAME = "train-00000-of-00001.jsonl"


def entry_timeline(
    entry: dict,
    ground_truth: list,
    category: str,
    seed: int,
    config: GeneratorConfig,
    bfcl_dir: str | os.PathLike | None = None,
) -> Timeline:
    """Plays one BFCL entry out under the config's teacher.

    Args:
        entry: The BFCL entry.
        ground_truth: Its per-turn call strings.
        category: Its category (the timeline's task).
        seed: The dialogue's own seed (speech, latencies, acknowledgements).
        config: Generator config.
        bfcl_dir: See :func:`~data_gen.importers.bfcl.wheel.find_bfcl_root`.

    Returns:
        The timeline; ``ground_truth.calls`` are the calls that reached the backend (the possible answer's, less
        any the config's failure rate timed out), and ``final_state`` is the state after replaying them on a fresh
        backend.

    Raises:
        BfclError: For bad input, a ground-truth call BFCL cannot run, or a played-out dialogue whose final state
            differs from the replay.
    """
    entry_id = entry["id"]
    classes = list(entry["involved_classes"])
    long_context = "long_context" in category
    tools = tool_schemas(classes, config, bfcl_dir)
    schemas = {tool.name: tool.parameters for tool in tools}
    task = build_task(category, plan_turns(entry, ground_truth, parameter_names(classes, bfcl_dir)), schemas)
    # The ground truth is what reached the backend, in order: with injected failures (tools.failure_rate) a
    # timed-out call never runs, and the later turns act on the state without it.
    backend = RecordingBackend(BfclBackend(classes, entry["initial_config"], long_context, bfcl_dir))
    initial_state = {
        "involved_classes": classes,
        "initial_config": entry["initial_config"],
        "long_context": long_context,
    }
    header = Timeline(
        id=entry_id,
        domain=DOMAIN,
        task=category,
        seed=seed,
        teacher=config.teacher,
        tools=tools,
        initial_state=initial_state,
        ground_truth=GroundTruth(),
        events=[],
    )
    # BFCL's calls act on the state the earlier ones leave (cd, then ls): the expert keeps their order.
    try:
        played = play_task(header, task, backend, config, program_order=True)
    except GenerationError as error:
        raise BfclError(f"entry {entry_id}: {error}") from None
    calls = backend.calls
    replay = BfclBackend(classes, entry["initial_config"], long_context, bfcl_dir)
    for index, call in enumerate(calls):
        try:
            replay.execute(call.name, call.arguments)
        except BfclCallError as error:
            raise BfclError(f"entry {entry_id}: ground-truth call {index} cannot run: {error}") from None
        except ToolError:
            continue  # a refusal in BFCL's ground truth; the dialogue shows it as an error result
    final_state = replay.state()
    if final_state != backend.state():
        raise BfclError(f"entry {entry_id}: the played-out dialogue ends in another state than its ground truth")
    ground_truth = GroundTruth(calls=calls, final_state=final_state, facts=[])
    return replace(played.log.timeline, ground_truth=ground_truth, placements=task.placements)


def import_bfcl(
    category: str,
    out_dir: str | os.PathLike,
    limit: int | None = None,
    seed: int = 0,
    config: GeneratorConfig | None = None,
    bfcl_dir: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Imports one BFCL multi-turn category as timelines, in the generator's dataset layout.

    Writes ``out_dir/data/train-00000-of-00001.jsonl`` (atomically), ``out_dir/generation.json`` (what determines
    the file) and ``out_dir/stats.json`` (dataset statistics plus the skipped entries). An entry that cannot be
    converted is skipped and reported with its reason, never dropped silently.

    Args:
        category: One of :data:`~data_gen.importers.bfcl.entries.CATEGORIES`.
        out_dir: Output folder.
        limit: Import only the first ``limit`` entries (at least 1).
        seed: Seed of the run; entry ``i`` gets its own seed from it, so a limit does not change the others.
        config: Generator config (speech, latencies, device, teacher); defaults when ``None``.
        bfcl_dir: The ``bfcl_eval`` folder; see :func:`~data_gen.importers.bfcl.wheel.find_bfcl_root`.
        data_dir: Folder with the entry and possible-answer files; defaults to the wheel's ``data`` folder.

    Returns:
        ``path`` (the shard), ``entries`` (read), ``written``, ``skipped`` (entry id -> reason), ``seconds`` and
        ``stats`` (what ``stats.json`` holds).

    Raises:
        BfclError: For a missing wheel, an unknown category, unreadable files, a limit below 1, or an ``out_dir``
            that is a file or was written with other settings.
    """
    started = time.perf_counter()
    config = config or GeneratorConfig()
    if config.perturb.dialogues > 0:
        # The ground truth of an entry is every call its backend ran, which would then include the wrong ones.
        raise BfclError("perturb.dialogues must be 0 for import-bfcl: its ground truth is every call the dialogue ran")
    if limit is not None and limit < 1:
        raise BfclError(f"limit must be ≥ 1, got {limit}")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise BfclError(f"{out_dir} is a file, not a folder")
    root = find_bfcl_root(bfcl_dir)
    pairs = load_entries(category, Path(data_dir) if data_dir is not None else root / "data")
    if limit is not None:
        pairs = pairs[:limit]
    out_dir = Path(out_dir)
    manifest = {
        "source": "bfcl",
        "bfcl_version": installed_version(root),
        "category": category,
        "data_dir": None if data_dir is None else str(Path(data_dir)),
        "limit": limit,
        "seed": seed,
        "format": "jsonl",
        "config": config_to_dict(config),
    }
    # Stamped only now that the entries have loaded: a stamp left by a run that failed on bad input would refuse
    # the corrected command.
    stamp_settings(out_dir / MANIFEST, manifest, error=BfclError)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)

    lines, skipped, stats = [], {}, DatasetStats()
    for index, (entry, ground_truth) in enumerate(pairs):
        try:
            timeline = entry_timeline(entry, ground_truth, category, dialogue_seed(seed, index), config, root)
        except BfclError as error:
            skipped[entry["id"]] = str(error)
            continue
        issues = validate_timeline(timeline)
        if issues:
            # BFCL's ground truth can break its own docs (e.g. a string ticket_id for an integer parameter).
            shown = "; ".join(f"{issue.field}: {issue.message}" for issue in issues[:3])
            more = f" (and {len(issues) - 3} more)" if len(issues) > 3 else ""
            skipped[entry["id"]] = f"the timeline is invalid: {shown}{more}"
            continue
        stats.add(timeline)
        lines.append(timeline_to_json(timeline) + "\n")
    path = out_dir / "data" / SHARD_NAME
    atomic_write_lines(path, lines)
    summary = stats.to_dict()
    summary.update({"entries": len(pairs), "skipped": len(skipped), "skipped_entries": skipped})
    atomic_write_lines(out_dir / "stats.json", [json.dumps(summary, indent=2) + "\n"])
    return {
        "path": path,
        "entries": len(pairs),
        "written": len(lines),
        "skipped": skipped,
        "seconds": time.perf_counter() - started,
        "stats": summary,
    }
