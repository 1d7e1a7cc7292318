"""Push trained checkpoints and generated datasets to the Hugging Face Hub, each with a card.

Both pushes go through ``huggingface_hub.HfApi`` (``create_repo(exist_ok=True)`` then one ``upload_folder``), so
the endpoint and token come from the usual ``HF_ENDPOINT`` / ``HF_TOKEN`` environment. The folder handed to
``upload_folder`` is a temporary staging folder of symlinks to the chosen files plus the generated ``README.md``:
the checkpoint or dataset folder itself is never written to, and the card replaces any README already there (PEFT
and the Trainer write their own) in the same single commit.

What a checkpoint push uploads is an allow-list (``CHECKPOINT_FILES``, matched against the names of the files at
the top of the folder): the weights (``*.safetensors`` with their index; ``pytorch_model*.bin`` only when there is
no safetensors file), ``config.json``, ``generation_config.json``, the PEFT adapter, the tokenizer files and the
generated card. clocktune's own settings travel inside the tokenizer: the encoding (time codec and model format)
is a header of the chat template (``clocktune.encoding.load_encoding``), and training writes no other file next
to the checkpoint. Everything else stays local and is named on one line on stderr: dotfiles (``.env``), logs,
folders (``wandb/``, ``runs/``, ``checkpoint-*/``) and the state that only resumes training (``optimizer.pt``,
``scheduler.pt``, ``rng_state*.pth``, ``trainer_state.json``, ``training_args.bin``, a pickle).

A checkpoint or dataset may come from someone else, so what a push uploads is checked by kind as well as by name,
before anything is uploaded (:func:`check_checkpoint`): only regular files inside the folder being pushed go up. A
symbolic link is resolved: one whose target lies outside the folder (``vocab.json -> /etc/passwd``) is refused, one
to a regular file inside it uploads that file. A FIFO, socket or device anywhere at the top of the folder, or a
folder where a file is expected, is refused; neither is ever opened (a FIFO would block the push forever). A
dataset's shards are validated as timelines first (:func:`clocktune.timeline.validate.validate_file`, the rules of
``clocktune-datagen validate`` without a domain's replay: no code of the data is imported), and its small JSON files
are read bounded (:mod:`clocktune.data_files`). A refusal is a ``ValueError`` naming the file, and nothing is pushed.

A push the Hub refuses (401, 403, 404, ...) or cannot be reached for raises :class:`HubPushError`, an ``OSError``
with a one-line message naming the repo and what to do, which the command lines print as ``error: ...``.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from clocktune.data_files import read_data_text
from clocktune.model_card import dataset_card, model_card
from clocktune.timeline.validate import validate_file

logger = logging.getLogger(__name__)

# The files a checkpoint push uploads (fnmatch patterns on paths in the folder; see the module docstring). Anything
# else stays local: an allow-list, because a skip list misses whatever a run happens to leave in the folder.
WEIGHT_FILES = ("*.safetensors", "model.safetensors.index.json")
# Pickled weights, uploaded only from a folder without safetensors (older or PEFT-bin checkpoints).
PICKLED_WEIGHT_FILES = ("pytorch_model*.bin", "pytorch_model.bin.index.json", "adapter_model.bin")
# clocktune_training.json is the training record (clocktune.train.record): base model and data, for the card.
CONFIG_FILES = ("config.json", "generation_config.json", "adapter_config.json", "clocktune_training.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    # transformers saves the named templates of a tokenizer with several here.
    "additional_chat_templates/*.jinja",
)
CHECKPOINT_FILES = WEIGHT_FILES + CONFIG_FILES + TOKENIZER_FILES
# Replaced by the generated card, so neither uploaded nor reported as skipped.
CARD_FILE = "README.md"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
# Statuses worth retrying: timeout, rate limit, server errors. Other 4xx (auth, validation) fail the same way again.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
RETRY_BASE_DELAY_S = 2.0
RETRY_MAX_DELAY_S = 60.0

_T = TypeVar("_T")


def push_checkpoint(
    checkpoint_dir: str | Path,
    repo_id: str,
    *,
    private: bool | None = False,
    merge_lora: bool = False,
    card_info: Mapping[str, Any] | None = None,
    revision: str | None = None,
    token: str | None = None,
    max_retries: int = 3,
) -> str:
    """Uploads a Trainer checkpoint (full model or PEFT LoRA adapter, with its tokenizer) as a model repo.

    Only the allow-listed files go up (``CHECKPOINT_FILES``, see the module docstring), and only as regular files
    inside the folder (:func:`check_checkpoint`); the rest of the folder is named on one line on stderr. Tokenizer
    files are uploaded as they are: they carry the clock tokens and the timeline chat template.

    Args:
        checkpoint_dir: Folder saved by a Trainer: ``config.json`` + safetensors, or ``adapter_config.json`` +
            ``adapter_model.safetensors``; plus the tokenizer files.
        repo_id: Target model repo, ``"namespace/name"``; created when missing. A bare ``"name"`` goes to the
            token's user (``whoami``), where the Hub creates a repo named without a namespace.
        private: Create the repo private (an existing repo keeps its visibility); ``None``: the namespace's
            default.
        merge_lora: For an adapter checkpoint, merge the LoRA weights into the base model named by
            ``adapter_config.json`` (loaded with ``from_pretrained``) and upload the plain merged model.
        card_info: Optional model card facts: ``base_model`` (defaults to the adapter's base), ``dataset`` (repo id
            or path), ``dataset_stats``, ``clock`` and ``eval`` (flat dicts shown as tables).
        revision: Branch to push to, created from ``main`` when missing; ``None`` pushes to ``main``.
        token: The Hub token; ``None`` takes ``HF_TOKEN`` or the one ``hf auth login`` stored.
        max_retries: Retries of the whole push after a transient error (connection error, HTTP 408/429/5xx),
            with exponential backoff; other errors are raised at once.

    Returns:
        URL of the commit that holds the upload.

    Raises:
        ValueError: When the folder is neither a model nor an adapter checkpoint, or ``merge_lora`` is set for a
            full model or an adapter whose config names no base model; when a file to upload is not a regular file
            inside the folder, or the folder holds a FIFO, socket or device (see :func:`check_checkpoint`).
        FileNotFoundError: When ``checkpoint_dir`` is not a folder.
        HubPushError: When the Hub refuses the push (HTTP 401, 403, 404, ...) or cannot be reached after the
            retries; an ``OSError`` whose message is one line.
    """
    checkpoint_dir = Path(checkpoint_dir)
    info = dict(card_info or {})
    files, skipped = _checkpoint_files(checkpoint_dir)
    is_adapter = "adapter_config.json" in files
    if not is_adapter and "config.json" not in files:
        raise ValueError(f"{checkpoint_dir} holds neither config.json nor adapter_config.json")
    if merge_lora and not is_adapter:
        raise ValueError(f"merge_lora=True needs an adapter checkpoint; {checkpoint_dir} holds a full model")

    adapter_base = None
    if is_adapter:
        adapter_base = _read_json_object(files["adapter_config.json"]).get("base_model_name_or_path")
    if merge_lora and not adapter_base:
        raise ValueError(f"{checkpoint_dir / 'adapter_config.json'} names no base_model_name_or_path to merge into")
    base_model = info.get("base_model") or adapter_base
    if not is_adapter:
        weights = "full fine-tune"
    elif merge_lora:
        weights = "LoRA adapter merged into the base model's weights"
    else:
        weights = "LoRA adapter (PEFT); load it on top of the base model"

    repo_id = _namespaced(repo_id, token, max_retries)  # the card names the repo as others will load it
    with tempfile.TemporaryDirectory(prefix="clocktune-push-") as tmp:
        if merge_lora:
            merged_dir = Path(tmp) / "merged"
            _merge_adapter(checkpoint_dir, adapter_base, merged_dir)
            files = {path: src for path, src in files.items() if path not in ADAPTER_FILES}
            files.update(_checkpoint_files(merged_dir)[0])
        card = model_card(
            repo_id, is_peft=is_adapter and not merge_lora, base_model=base_model, weights=weights, info=info
        )
        staging = _stage(files, str(card), Path(tmp) / "repo")
        if is_adapter and not merge_lora:
            _point_adapter_at_hub(staging / "adapter_config.json", base_model)
        if skipped:
            print(
                f"not uploading {len(skipped)} item(s) of {checkpoint_dir} that are not model, tokenizer or card "
                f"files: {', '.join(skipped)}",
                file=sys.stderr,
            )
        return _push(staging, repo_id, "model", private, revision, max_retries, token)


def push_dataset(data_dir: str | Path, repo_id: str, *, private: bool = False, max_retries: int = 3) -> str:
    """Uploads a dataset written by ``clocktune-datagen generate`` as a dataset repo with a dataset card.

    Only a complete, valid dataset is pushed: every shard named by ``train-XXXXX-of-YYYYY``, each validated as
    timelines first (the rules of ``clocktune-datagen validate`` without a domain's replay), ``stats.json`` (written
    last by the generator) and ``generation.json``, all regular files inside the folder (a symbolic link may point
    only to a regular file inside it). Other files in the folder (e.g. temporary files) stay local.

    Args:
        data_dir: The generator's ``--out`` folder: ``data/train-XXXXX-of-YYYYY.jsonl`` (or ``.parquet``),
            ``stats.json``, ``generation.json``.
        repo_id: Target dataset repo, ``"namespace/name"``; created when missing.
        private: Create the repo private (an existing repo keeps its visibility).
        max_retries: Retries of the whole push after a transient error, as in ``push_checkpoint``.

    Returns:
        URL of the commit that holds the upload.

    Raises:
        ValueError: When shards are missing, or both JSON Lines and Parquet shards are present; when a file to
            upload is not a regular file inside the folder (a symbolic link leaving it, a FIFO, a device, a folder);
            when ``stats.json`` or ``generation.json`` is not a JSON object of at most
            :data:`~clocktune.data_files.MAX_DATA_FILE_BYTES`; when a shard holds a line that is not a valid
            timeline (the message starts with its ``file:line:field``).
        FileNotFoundError: When ``stats.json`` or ``generation.json`` is missing.
        HubPushError: When the Hub refuses the push or cannot be reached, as in ``push_checkpoint``.
    """
    data_dir = Path(data_dir)
    shards = sorted((data_dir / "data").glob("train-*-of-*.*"))
    formats = {shard.suffix for shard in shards}
    if len(formats) != 1 or not formats <= {".jsonl", ".parquet"}:
        raise ValueError(f"{data_dir / 'data'} must hold train-*-of-* shards of one format, found {sorted(formats)}")
    expected = int(re.search(r"-of-(\d+)\.", shards[0].name)[1])
    if len(shards) != expected:
        raise ValueError(f"{data_dir / 'data'} holds {len(shards)} of {expected} shards; finish generating first")
    # Every file is checked for what it is before any is read, and all of them before anything is uploaded.
    root = data_dir.resolve()
    in_folder = {f"data/{shard.name}": shard for shard in shards}
    in_folder["stats.json"] = data_dir / "stats.json"
    in_folder["generation.json"] = data_dir / "generation.json"
    files = {path_in_repo: _upload_source(path, root) for path_in_repo, path in in_folder.items()}
    stats = _read_json_object(in_folder["stats.json"])
    manifest = _read_json_object(in_folder["generation.json"])
    for shard in shards:
        _check_shard(shard)

    card = dataset_card(repo_id, f"data/*{formats.pop()}", stats, manifest)
    with tempfile.TemporaryDirectory(prefix="clocktune-push-") as tmp:
        staging = _stage(files, str(card), Path(tmp) / "repo")
        return _push(staging, repo_id, "dataset", private, None, max_retries)


def _printable(name: str) -> str:
    """``name`` as it can stand in one line of output: quoted when it holds control or other odd characters."""
    return name if name.isprintable() else ascii(name)


def check_checkpoint(checkpoint_dir: str | Path) -> None:
    """Refuses a checkpoint folder whose files :func:`push_checkpoint` would refuse to upload, reading none of them.

    For a caller that reads the folder before pushing it (``clocktune push`` loads the tokenizer for the card): run
    first, it refuses a FIFO named ``tokenizer.json`` instead of letting the load block on it, and a link leaving the
    folder before its target is read.

    Args:
        checkpoint_dir: The checkpoint folder.

    Raises:
        ValueError: When an allow-listed file (``CHECKPOINT_FILES``) is a symbolic link to a path outside the folder,
            a folder, or anything but a regular file; when the top of the folder (or ``additional_chat_templates/``)
            holds a FIFO, socket or device, whatever its name. The message names the path and what it is.
        FileNotFoundError: When ``checkpoint_dir`` is not a folder.
    """
    _checkpoint_files(Path(checkpoint_dir))


def _checkpoint_files(folder: Path) -> tuple[dict[str, Path], list[str]]:
    """The allow-listed files of a checkpoint folder, checked to be regular files inside it, and what is left out.

    Args:
        folder: The checkpoint folder.

    Returns:
        ``(files, skipped)``: the files to upload by repo path (each the resolved path of a regular file inside the
        folder, see :func:`_upload_source`); the paths left out (folders as ``name/``, not descended into, except a
        real ``additional_chat_templates/`` folder), sorted. The README is in neither: the card replaces it.

    Raises:
        ValueError: As :func:`check_checkpoint`.
        FileNotFoundError: When ``folder`` is not a folder.
    """
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such checkpoint folder")
    root = folder.resolve()
    candidates: list[str] = []
    skipped: list[str] = []
    # lstat only: a link is not followed here (nor into a folder elsewhere), and no entry is opened. A FIFO or device
    # is refused whatever its name: loading the tokenizer for the card opens files beyond the allow-list.
    for path in sorted(folder.iterdir()):
        mode = path.lstat().st_mode
        _refuse_special(path, mode)
        if stat.S_ISDIR(mode) and path.name == "additional_chat_templates":
            for item in sorted(path.iterdir()):
                item_mode = item.lstat().st_mode
                _refuse_special(item, item_mode)
                if stat.S_ISDIR(item_mode):
                    skipped.append(f"{path.name}/{item.name}/")
                else:
                    candidates.append(f"{path.name}/{item.name}")
        elif stat.S_ISDIR(mode):
            skipped.append(f"{path.name}/")
        else:
            candidates.append(path.name)

    def allowed(name: str, patterns: tuple[str, ...]) -> bool:
        # Never a dotfile, even one that a pattern such as *.safetensors would match.
        return not any(part.startswith(".") for part in name.split("/")) and any(
            fnmatch.fnmatchcase(name, pattern) for pattern in patterns
        )

    has_safetensors = any(allowed(name, ("*.safetensors",)) for name in candidates)
    patterns = CHECKPOINT_FILES if has_safetensors else CHECKPOINT_FILES + PICKLED_WEIGHT_FILES
    files: dict[str, Path] = {}
    for name in candidates:
        if name == CARD_FILE:
            continue
        if allowed(name, patterns):
            files[name] = _upload_source(folder / name, root)
        else:
            # A link left out is named as what it points to (a folder as ``name/``); only its metadata is read.
            skipped.append(f"{name}/" if (folder / name).is_dir() else name)
    # An allow-listed name given to a folder would otherwise be left out and the push go on without that file.
    for name in skipped:
        if name.endswith("/") and allowed(name[:-1], patterns):
            raise ValueError(f"{_printable(str(folder / name[:-1]))}: a folder, where push expects a regular file")
    return files, sorted(_printable(name) for name in skipped)


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message: ``a FIFO (named pipe)``, ``a device``, ..."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse_special(path: Path, mode: int) -> None:
    """Refuses a FIFO, socket or device: nothing a checkpoint or dataset holds, and never to be opened."""
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise ValueError(f"{_printable(str(path))}: {_kind(mode)}; push uploads only regular files")


def _upload_source(path: Path, root: Path) -> Path:
    """The regular file that ``path`` uploads: itself, or the target of a symbolic link that stays inside ``root``.

    Only the file's metadata is read (``lstat``, then ``stat`` of a link's target), never its content: opening a
    FIFO would block forever, and a link may point anywhere (``vocab.json -> /etc/passwd``).

    Args:
        path: A file of the folder being pushed.
        root: That folder, resolved.

    Returns:
        The resolved path of the regular file to upload.

    Raises:
        ValueError: Naming ``path``, when it is a symbolic link whose target lies outside ``root`` or cannot be
            reached (dangling, a loop), or when it (or its target) is not a regular file.
        FileNotFoundError: When ``path`` does not exist.
    """
    shown = _printable(str(path))
    info = path.lstat()
    target = Path(os.path.realpath(path))
    if stat.S_ISLNK(info.st_mode):
        if not target.is_relative_to(root):
            raise ValueError(
                f"{shown}: a symbolic link to {_printable(str(target))}, outside the folder being pushed; push "
                "uploads only files inside it"
            )
        try:
            info = target.stat()
        except OSError as error:
            raise ValueError(
                f"{shown}: a symbolic link to {_printable(str(target))}, which cannot be read ({error.strerror})"
            ) from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{shown}: {_kind(info.st_mode)}, where push expects a regular file")
    return target


def _read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in a small file of the folder being pushed, read bounded (:func:`read_data_text`).

    Raises:
        ValueError: Naming ``path``, when it is not a regular file, is too large, or does not hold a JSON object.
        OSError: When it cannot be opened.
    """
    try:
        value = json.loads(read_data_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: a JSON {type(value).__name__}, where a JSON object is expected")
    return value


def _check_shard(shard: Path) -> None:
    """Validates a dataset shard as timelines (:func:`validate_file`; no domain replay, no code of the data runs).

    Raises:
        ValueError: One line starting with the first issue's ``file:line:field`` and counting the others.
    """
    try:
        _, issues = validate_file(shard)
    except (OSError, ValueError) as error:
        raise ValueError(f"{shard}: cannot be read as timelines ({_one_line(error)})") from None
    if issues:
        more = f" (and {len(issues) - 1} more issue(s): `clocktune-datagen validate` lists them)" if issues[1:] else ""
        raise ValueError(f"{issues[0]}{more}; push uploads only valid timelines")


def _merge_adapter(adapter_dir: Path, base_model: str, out_dir: Path) -> None:
    """Loads the base model, applies the LoRA adapter, merges it and saves the plain model to ``out_dir``."""
    # Imported here so that plain and dataset pushes do not pay for importing torch and peft.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_model, dtype="auto")
    # Training grows the embeddings to fit the added clock tokens (extend_tokenizer, then resize), so the adapter
    # expects the larger matrix; its trainable-token rows overwrite the new rows' initial values.
    vocab = len(AutoTokenizer.from_pretrained(adapter_dir))
    if vocab > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(vocab)
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    merged.save_pretrained(out_dir)


def _point_adapter_at_hub(adapter_config: Path, base_model: str | None) -> None:
    """Rewrites the staged adapter config to name its base model by Hub id, when it names a local folder.

    Training records the path the base was loaded from (for the embedded model, a cache folder on this machine);
    whoever loads the adapter from the Hub needs the base's Hub id (``AutoPeftModelForCausalLM`` reads it).
    """
    from clocktune.models import hub_id_of

    config = _read_json_object(adapter_config)
    hub_id = hub_id_of(base_model) or hub_id_of(config.get("base_model_name_or_path"))
    if hub_id is None or hub_id == config.get("base_model_name_or_path"):
        return
    config["base_model_name_or_path"] = hub_id
    adapter_config.unlink()  # a symlink to the checkpoint's own file, which must stay as it is
    adapter_config.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _stage(files: Mapping[str, Path], readme: str, staging: Path) -> Path:
    """Builds the folder to upload: symlinks to ``files`` (no copy of large weights) and ``README.md``."""
    for path_in_repo, src in files.items():
        link = staging / path_in_repo
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(src.resolve())
    (staging / "README.md").write_text(readme, encoding="utf-8")
    return staging


def _upload(
    folder: Path, repo_id: str, repo_type: str, private: bool | None, revision: str | None, token: str | None
) -> str:
    """Creates the repo (and branch) when missing and uploads ``folder`` in one commit; returns the commit URL."""
    # A fresh client per attempt reads HF_ENDPOINT / HF_TOKEN at push time, not at import time.
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
    if revision is not None:
        api.create_branch(repo_id, repo_type=repo_type, branch=revision, exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo_id,
        folder_path=folder,
        repo_type=repo_type,
        revision=revision,
        commit_message=f"Upload {repo_type} with clocktune",
    )
    return commit.commit_url


class HubPushError(OSError):
    """A push the Hub refused or could not be reached for; the message is one line naming the repo and the fix.

    Args:
        message: The one-line message.
        status: The HTTP status the Hub answered; ``None`` for a connection failure.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _is_transient(error: Exception) -> bool:
    """Whether retrying could help: a network failure, or an HTTP status in ``TRANSIENT_STATUSES``."""
    if isinstance(error, HfHubHTTPError):
        return error.response.status_code in TRANSIENT_STATUSES
    # huggingface_hub 2.x talks HTTP through httpx2: its transport errors are connect/read/write/timeout failures.
    return isinstance(error, httpx2.TransportError)


def _with_retries(action: Callable[[], _T], max_retries: int) -> _T:
    """Runs ``action``, retrying transient failures with exponential backoff (``RETRY_BASE_DELAY_S`` doubling).

    Re-running a whole push is safe: ``create_repo`` and ``create_branch`` accept an existing repo or branch, and
    ``upload_folder`` re-sends the same files.
    """
    attempt = 0
    while True:
        try:
            return action()
        except (HfHubHTTPError, httpx2.TransportError) as error:
            if attempt >= max_retries or not _is_transient(error):
                raise
            delay = min(RETRY_BASE_DELAY_S * 2**attempt, RETRY_MAX_DELAY_S)
            attempt += 1
            logger.warning("push failed (%s); retry %d/%d in %.1f s", error, attempt, max_retries, delay)
            time.sleep(delay)


def _one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters: server messages may be long or multi-line."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _endpoint() -> str:
    """The Hub endpoint pushes go to, without any user:password part."""
    parts = urlsplit(constants.ENDPOINT)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}" if parts.hostname else "?"


def _push_error(error: Exception, repo_id: str, repo_type: str, revision: str | None) -> HubPushError:
    """The one-line :class:`HubPushError` for a failed push: what went wrong and what to do about it."""
    where = f"push to {repo_type} repo {repo_id}" + (f" (branch {revision})" if revision else "")
    endpoint = _endpoint()
    if not isinstance(error, HfHubHTTPError):
        if isinstance(error, OfflineModeIsEnabled):
            fix = "huggingface_hub is in offline mode: unset HF_HUB_OFFLINE"
        else:
            fix = f"check the network connection and HF_ENDPOINT ({type(error).__name__}: {_one_line(error)})"
        return HubPushError(f"{where} failed: cannot reach the Hub at {endpoint}: {fix}")
    status = error.response.status_code if error.response is not None else None
    if status == 401:
        fix = "the Hub did not accept the token: run `hf auth login` (`huggingface-cli login`) or set HF_TOKEN"
    elif status == 403:
        fix = (
            "the token may not write there: use a token with write access (HF_TOKEN or `hf auth login`) of an "
            "account that owns the namespace or may write to it"
        )
    elif status == 404:
        fix = "not found: check the repo id and its namespace, the branch, and HF_ENDPOINT"
    elif status in TRANSIENT_STATUSES:
        fix = "the Hub kept failing after the retries: try again later"
    else:
        detail = getattr(error, "server_message", None) or str(error)
        fix = _one_line(detail)
    return HubPushError(f"{where} on {endpoint} failed (HTTP {status}): {fix}", status=status)


def _namespaced(repo_id: str, token: str | None, max_retries: int) -> str:
    """``repo_id``, or ``user/repo_id`` for a bare name: the token's user, in whose namespace the Hub would create
    it (the upload itself needs the full id)."""
    if "/" in repo_id:
        return repo_id
    try:
        user = _with_retries(lambda: HfApi(token=token).whoami()["name"], max_retries)
    except (HfHubHTTPError, httpx2.HTTPError, OfflineModeIsEnabled) as error:
        raise _push_error(error, repo_id, "model", None) from error
    return f"{user}/{repo_id}"


def _push(
    folder: Path,
    repo_id: str,
    repo_type: str,
    private: bool | None,
    revision: str | None,
    max_retries: int,
    token: str | None = None,
) -> str:
    """``_upload`` with retries; a failure that remains becomes a :class:`HubPushError`."""
    try:
        return _with_retries(lambda: _upload(folder, repo_id, repo_type, private, revision, token), max_retries)
    except (HfHubHTTPError, httpx2.HTTPError, OfflineModeIsEnabled) as error:
        raise _push_error(error, repo_id, repo_type, revision) from error
