"""Push uploads only regular files inside the folder being pushed, and a dataset's shards only as valid timelines.

A checkpoint or dataset may come from someone else: a link such as ``vocab.json -> /etc/passwd`` must not upload
its target, a FIFO must not block the push, and a shard must be a timeline file. Each case runs through the command
lines (``clocktune push``, ``clocktune-datagen push``) against the mock Hub of tests/mock_hub.py (the ``hub``
fixture of conftest.py), and a refusal must leave the Hub untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clocktune.cli import main as clocktune_main
from data_gen.cli import main as datagen_main
from tests.test_hub import _clock_folder

pytestmark = pytest.mark.usefixtures("bounded")  # every hostile input is refused in bounded time and memory

SECRET = "root:x:0:0:root:/root:/bin/bash\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A full model whose tokenizer carries a clocktune encoding, built once; tests push copies of it."""
    return _clock_folder(tmp_path_factory.mktemp("trained") / "checkpoint")


@pytest.fixture
def checkpoint(trained, tmp_path) -> Path:
    """A copy of ``trained`` that a test may plant links and FIFOs in."""
    return Path(shutil.copytree(trained, tmp_path / "checkpoint"))


@pytest.fixture
def dataset(tmp_path) -> Path:
    """A dataset written by the real generator: 6 dialogues in 2 JSON Lines shards."""
    from data_gen.config import GeneratorConfig
    from data_gen.writer import GenerationJob, run_generation

    job = GenerationJob(GeneratorConfig(), num=6, seed=0, out_dir=tmp_path / "spec", fmt="jsonl", shard_size=3)
    run_generation(job, progress=False)
    return job.out_dir


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file outside every folder pushed, standing for ``/etc/passwd`` or ``~/.ssh/id_ed25519``."""
    path = tmp_path / "outside" / "passwd"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


@contextmanager
def _released(fifo: Path, after_s: float = 5.0) -> Iterator[None]:
    """Opens ``fifo`` for writing and closes it again every second after ``after_s``, while the block runs.

    Code that opens the FIFO to read it would otherwise wait for a writer forever; released, it reads an empty file,
    so that a push that opens a FIFO fails its test within seconds instead of hanging the suite.
    """
    stop = threading.Event()

    def release() -> None:
        if stop.wait(after_s):
            return
        while not stop.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: nobody is reading it right now
                pass
            stop.wait(1.0)

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _refused(code: int, capsys) -> str:
    """Checks that a command failed with exit 2 and one ``error:`` line, its last output; returns that line."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and err.strip().endswith(lines[0]), err
    return lines[0]


def _push_checkpoint(folder: Path) -> int:
    return clocktune_main(["push", "--checkpoint", str(folder), "--repo-id", "me/agent"])


def _push_dataset(folder: Path) -> int:
    return datagen_main(["push", str(folder), "--repo-id", "me/dialogues"])


@pytest.mark.parametrize("name", ["vocab.json", "extra.safetensors"])
def test_a_checkpoint_file_linking_outside_the_folder_is_refused_and_nothing_is_uploaded(
    hub, checkpoint, secret, name, capsys
):
    (checkpoint / name).symlink_to(secret)

    line = _refused(_push_checkpoint(checkpoint), capsys)

    assert f"{checkpoint / name}: a symbolic link to {secret}, outside the folder being pushed" in line, line
    assert "root:x" not in line
    assert sum(hub.calls.values()) == 0


@pytest.mark.parametrize("name", ["data/train-00001-of-00002.jsonl", "stats.json"])
def test_a_dataset_file_linking_outside_the_folder_is_refused_and_nothing_is_uploaded(
    hub, dataset, tmp_path, name, capsys
):
    # The target is a copy of the file itself, valid as a shard or as stats: only where it lies is wrong.
    outside = tmp_path / "outside" / Path(name).name
    outside.parent.mkdir()
    (dataset / name).replace(outside)
    (dataset / name).symlink_to(outside)

    line = _refused(_push_dataset(dataset), capsys)

    assert f"{dataset / name}: a symbolic link to {outside}, outside the folder being pushed" in line, line
    assert sum(hub.calls.values()) == 0


@pytest.mark.parametrize("name", ["vocab.json", "events.log"])
def test_a_fifo_in_a_checkpoint_is_refused_without_being_opened(hub, checkpoint, name, capsys):
    # An allow-listed name or any other: a checkpoint never holds a FIFO, and the card's tokenizer load opens files
    # beyond the allow-list.
    fifo = checkpoint / name
    os.mkfifo(fifo)

    with _released(fifo):
        line = _refused(_push_checkpoint(checkpoint), capsys)

    assert f"{fifo}: a FIFO (named pipe)" in line, line
    assert sum(hub.calls.values()) == 0


@pytest.mark.parametrize("name", ["data/train-00001-of-00002.jsonl", "generation.json"])
def test_a_fifo_in_a_dataset_is_refused_without_being_opened(hub, dataset, name, capsys):
    fifo = dataset / name
    fifo.unlink()
    os.mkfifo(fifo)

    with _released(fifo):
        line = _refused(_push_dataset(dataset), capsys)

    assert f"{fifo}: a FIFO (named pipe), where push expects a regular file" in line, line
    assert sum(hub.calls.values()) == 0


def test_a_folder_with_an_allow_listed_name_is_refused_rather_than_left_out(hub, checkpoint, capsys):
    (checkpoint / "vocab.json").mkdir()

    line = _refused(_push_checkpoint(checkpoint), capsys)

    assert f"{checkpoint / 'vocab.json'}: a folder, where push expects a regular file" in line, line
    assert sum(hub.calls.values()) == 0


def test_a_link_that_stays_inside_the_checkpoint_uploads_its_target(hub, checkpoint, capsys):
    # As a folder of shared tokenizer files might be laid out: the link is relative, its target in a subfolder.
    (checkpoint / "shared").mkdir()
    (checkpoint / "tokenizer.json").replace(checkpoint / "shared" / "tokenizer.json")
    (checkpoint / "tokenizer.json").symlink_to(Path("shared") / "tokenizer.json")

    assert _push_checkpoint(checkpoint) == 0, capsys.readouterr().err

    files = hub.files("me/agent")
    assert files["tokenizer.json"] == (checkpoint / "shared" / "tokenizer.json").read_bytes()
    assert not any(path.startswith("shared") for path in files)


def test_a_shard_linking_inside_the_dataset_uploads_its_target(hub, dataset, capsys):
    shard = dataset / "data" / "train-00001-of-00002.jsonl"
    kept = dataset / "kept" / shard.name
    kept.parent.mkdir()
    shard.replace(kept)
    shard.symlink_to(Path("..") / "kept" / shard.name)

    assert _push_dataset(dataset) == 0, capsys.readouterr().err

    files = hub.files("me/dialogues", repo_type="dataset")
    assert files[f"data/{shard.name}"] == kept.read_bytes()
    assert set(files) == {
        "data/train-00000-of-00002.jsonl",
        f"data/{shard.name}",
        "stats.json",
        "generation.json",
        "README.md",
    }


def test_a_shard_with_an_invalid_line_is_refused_naming_its_file_line_and_field(hub, dataset, capsys):
    shard = dataset / "data" / "train-00001-of-00002.jsonl"
    lines = shard.read_text().splitlines()
    record = json.loads(lines[1])
    record["events"][0]["t"] = "soon"
    lines[1] = json.dumps(record)
    shard.write_text("\n".join(lines) + "\n")

    line = _refused(_push_dataset(dataset), capsys)

    assert line.startswith(f"error: {shard}:2:events.0"), line
    assert "push uploads only valid timelines" in line
    assert sum(hub.calls.values()) == 0


@pytest.mark.parametrize("plant", ["link", "fifo"])
def test_a_tokenizer_file_push_would_refuse_is_refused_before_the_card_reads_it(
    hub, checkpoint, secret, plant, capsys
):
    tokenizer = checkpoint / "tokenizer.json"
    tokenizer.unlink()
    if plant == "link":
        tokenizer.symlink_to(secret)
    else:
        os.mkfifo(tokenizer)
    with _released(tokenizer) if plant == "fifo" else contextlib.nullcontext():
        line = _refused(_push_checkpoint(checkpoint), capsys)
    assert line.startswith(f"error: {tokenizer}: "), line
    assert sum(hub.calls.values()) == 0
