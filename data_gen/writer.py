"""Generating a dataset: shards written atomically, in parallel, resumable, with statistics.

The shard layout depends only on ``num`` and ``shard_size``, and dialogue ``i`` only on the seed and ``i``, so
the files are byte-identical whatever the number of processes. A shard that exists is complete (it was
renamed into place), so a rerun of the same command skips it and only reads it back for the statistics.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from clocktune.atomic import atomic_write_lines
from clocktune.settings_stamp import stamp_settings
from clocktune.timeline.io import iter_timeline_file, timeline_to_json, write_parquet
from data_gen.config import GeneratorConfig, config_to_dict
from data_gen.generate import generate_dialogue, select_domains
from data_gen.stats import DatasetStats

MANIFEST = "generation.json"


@dataclass(frozen=True)
class GenerationJob:
    """One ``generate`` run.

    Args:
        config: Generator config.
        num: Number of dialogues.
        seed: Seed of the run.
        out_dir: Output folder; shards go to ``out_dir/data``.
        fmt: ``jsonl`` or ``parquet``.
        shard_size: Dialogues per shard file.
    """

    config: GeneratorConfig
    num: int
    seed: int
    out_dir: Path
    fmt: str = "jsonl"
    shard_size: int = 500

    @property
    def num_shards(self) -> int:
        """Number of shard files."""
        return max(1, -(-self.num // self.shard_size))

    def shard_path(self, index: int) -> Path:
        """Path of shard ``index``, named as the Hub names data files."""
        return self.out_dir / "data" / f"train-{index:05d}-of-{self.num_shards:05d}.{self.fmt}"

    def manifest(self) -> dict:
        """What determines the files; a rerun into the same folder must match it."""
        return {
            "num": self.num,
            "seed": self.seed,
            "format": self.fmt,
            "shard_size": self.shard_size,
            "config": config_to_dict(self.config),
        }


def _shard(job: GenerationJob, index: int) -> DatasetStats:
    path = job.shard_path(index)
    stats = DatasetStats()
    if path.exists():
        for _, timeline in iter_timeline_file(path):
            stats.add(timeline)
        return stats
    domains = select_domains(job.config)
    stop = min(job.num, (index + 1) * job.shard_size)
    timelines = [generate_dialogue(i, job.seed, job.config, domains) for i in range(index * job.shard_size, stop)]
    for timeline in timelines:
        stats.add(timeline)
    if job.fmt == "parquet":
        write_parquet(path, timelines)
    else:
        atomic_write_lines(path, (timeline_to_json(timeline) + "\n" for timeline in timelines))
    return stats


def _shard_worker(args: tuple[GenerationJob, int]) -> tuple[int, DatasetStats]:
    job, index = args
    return index, _shard(job, index)


def run_generation(job: GenerationJob, num_proc: int = 1, progress: bool = True) -> dict:
    """Generates (or completes) a dataset and writes ``stats.json`` next to the shards.

    Args:
        job: What to generate.
        num_proc: Worker processes.
        progress: Show a progress bar.

    Returns:
        The statistics written to ``out_dir/stats.json``.

    Raises:
        ValueError: When ``out_dir`` holds a dataset generated with other settings (a
            ``clocktune.settings_stamp.SettingsMismatchError``), or the config names an unknown domain.
    """
    # The inputs first: a stamp written for a config that then fails would refuse the corrected command.
    select_domains(job.config)  # also fails before starting workers
    stamp_settings(job.out_dir / MANIFEST, job.manifest())
    (job.out_dir / "data").mkdir(parents=True, exist_ok=True)

    stats = DatasetStats()
    partial: dict[int, DatasetStats] = {}
    tasks = [(job, index) for index in range(job.num_shards)]
    bar = tqdm(total=job.num, unit="dlg", disable=not progress, desc="generate")
    if num_proc > 1:
        with multiprocessing.get_context("fork" if os.name == "posix" else "spawn").Pool(num_proc) as pool:
            for index, shard_stats in pool.imap_unordered(_shard_worker, tasks):
                partial[index] = shard_stats
                bar.update(shard_stats.dialogues)
    else:
        for task in tasks:
            index, shard_stats = _shard_worker(task)
            partial[index] = shard_stats
            bar.update(shard_stats.dialogues)
    bar.close()
    for index in range(job.num_shards):
        stats.merge(partial[index])
    result = stats.to_dict()
    atomic_write_lines(job.out_dir / "stats.json", [json.dumps(result, indent=2) + "\n"])
    return result
