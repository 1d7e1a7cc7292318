"""Generating a dataset: shards written atomically, in parallel, resumable, with statistics.

The shard layout depends only on ``num`` and ``shard_size``, and dialogue ``i`` only on the seed and ``i``, so
the files are byte-identical whatever the number of processes. Shards are generated a window at a time, so memory
stays bounded however many there are. A shard that exists is complete (it was
renamed into place), so a rerun of the same command skips it and only reads it back for the statistics; one that
does not read back complete is refused, naming it (see :func:`_read_shard`).
"""

from __future__ import annotations

import contextlib
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
from data_gen.declarative import backend_digest, file_digest
from data_gen.dialogues import select_domains
from data_gen.generate import generate_dialogue
from data_gen.stats import DatasetStats

MANIFEST = "generation.json"
FORMATS = ("jsonl", "parquet")
MAX_DIALOGUES = 10_000_000
"""The most dialogues one run generates: the statistics keep a few numbers per dialogue (about 250 bytes), so 10
million need some 2.5 GB and hours on one core; generate more as several runs (other seeds, other folders)."""


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

    Raises:
        ValueError: For ``num`` or ``shard_size`` below 1 or ``num`` above :data:`MAX_DIALOGUES`, or an unknown
            format.
    """

    config: GeneratorConfig
    num: int
    seed: int
    out_dir: Path
    fmt: str = "jsonl"
    shard_size: int = 500

    def __post_init__(self) -> None:
        for name in ("num", "shard_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.num > MAX_DIALOGUES:
            raise ValueError(f"num must be ≤ {MAX_DIALOGUES:,} (generate more as several runs), got {self.num:,}")
        if self.fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.fmt!r}")

    @property
    def num_shards(self) -> int:
        """Number of shard files."""
        return max(1, -(-self.num // self.shard_size))

    def shard_path(self, index: int) -> Path:
        """Path of shard ``index``, named as the Hub names data files."""
        return self.out_dir / "data" / f"train-{index:05d}-of-{self.num_shards:05d}.{self.fmt}"

    def manifest(self) -> dict:
        """What determines the files; a rerun into the same folder must match it."""
        settings = {
            "num": self.num,
            "seed": self.seed,
            "format": self.fmt,
            "shard_size": self.shard_size,
            "config": config_to_dict(self.config),
        }
        if self.config.domain_files:
            # The files' content, not only their names: an edited domain file is other settings.
            settings["domain_files_sha256"] = [file_digest(path) for path in self.config.domain_files]
            # And their backends' code: an edited backend module gives other results from the same file.
            backends = [backend_digest(path) for path in self.config.domain_files]
            if any(backends):
                settings["domain_backends_sha256"] = backends
        return settings


def _read_shard(path: Path, expected: int) -> DatasetStats:
    """The statistics of a shard that is already there, which must hold its ``expected`` timelines.

    A damaged shard is refused rather than regenerated. The writer only ever renames a complete shard into place,
    so one that does not read back whole was cut short or written by something else (a copy that ran out of disk,
    a sync tool, a hand edit): the user should hear of it, since the same cause may have touched other files, and
    the command never deletes a file it did not write. The fix is one ``rm``; the rerun regenerates the same bytes.
    """
    stats = DatasetStats()
    problem = None
    try:
        for _, item in iter_timeline_file(path):
            if isinstance(item, list):
                more = f" (and {len(item) - 1} more)" if len(item) > 1 else ""
                problem = f"line {item[0].line}, {item[0].field}: {item[0].message}{more}"
                break
            stats.add(item)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid and UnicodeDecodeError are ValueErrors
        if isinstance(error, OSError) and error.errno is not None:
            raise  # the file system's own error (permissions, ...), not the shard's content
        problem = " ".join(str(error).split()) or type(error).__name__
    if problem is None and stats.dialogues != expected:
        problem = f"{stats.dialogues} timeline(s) where the shard has {expected}"
    if problem is not None:
        raise ValueError(
            f"{path}: a damaged shard, not one generate wrote ({problem}); generate renames only complete shards "
            "into place, so this one was cut short or written by something else: delete it and run the same "
            "command again to regenerate it"
        )
    return stats


def _shard(job: GenerationJob, index: int) -> DatasetStats:
    path = job.shard_path(index)
    stop = min(job.num, (index + 1) * job.shard_size)
    if path.exists():
        return _read_shard(path, stop - index * job.shard_size)
    stats = DatasetStats()
    domains = select_domains(job.config)
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


def _shards_written(out_dir: Path) -> bool:
    data = out_dir / "data"
    return data.is_dir() and any(data.glob("train-*-of-*.*"))


def _window_stats(job: GenerationJob, num_proc: int, bar: tqdm) -> DatasetStats:
    # Shards are handed out a window at a time and merged in index order as each window ends, so that memory and
    # the work queue stay bounded by the window whatever --num is, and the statistics are the same whatever the
    # number of processes. (Pool.imap would read a whole task list into its queue before the first shard ends.)
    stats = DatasetStats()
    window = num_proc * 4
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with context.Pool(num_proc) if num_proc > 1 else contextlib.nullcontext() as pool:
        for start in range(0, job.num_shards, window):
            tasks = [(job, index) for index in range(start, min(start + window, job.num_shards))]
            partial: dict[int, DatasetStats] = {}
            results = pool.imap_unordered(_shard_worker, tasks) if pool is not None else map(_shard_worker, tasks)
            for index, shard_stats in results:
                partial[index] = shard_stats
                bar.update(shard_stats.dialogues)
            for index in sorted(partial):
                stats.merge(partial[index])
    return stats


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
            ``clocktune.settings_stamp.SettingsMismatchError``) or a damaged shard, is a file, the config names an
            unknown domain, or ``num_proc`` is below 1.
        OSError: When ``out_dir`` cannot be written.
    """
    # Every input first (the config and the numbers were checked when they were built): a stamp written for a run
    # that then fails on bad input would refuse the corrected command.
    if num_proc < 1:
        raise ValueError(f"num_proc must be ≥ 1, got {num_proc}")
    select_domains(job.config)  # also fails before starting workers
    if job.out_dir.exists() and not job.out_dir.is_dir():
        raise ValueError(f"{job.out_dir} is a file, not a folder")
    manifest = job.manifest()
    if (job.out_dir / MANIFEST).exists() and not _shards_written(job.out_dir):
        # A run that failed before its first shard wrote nothing the new settings could mix with: its stamp must
        # not refuse the corrected command.
        (job.out_dir / MANIFEST).unlink()
    stamp_settings(job.out_dir / MANIFEST, manifest)
    (job.out_dir / "data").mkdir(parents=True, exist_ok=True)

    bar = tqdm(total=job.num, unit="dlg", disable=not progress, desc="generate")
    stats = _window_stats(job, num_proc, bar)
    bar.close()
    result = stats.to_dict()
    atomic_write_lines(job.out_dir / "stats.json", [json.dumps(result, indent=2) + "\n"])
    return result
