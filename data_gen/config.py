"""Generator configuration: YAML file -> dataclasses, validated by pydantic with the offending field named."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from clocktune.clock import PROFILES, DeviceProfile, SpeechConfig, ToolLatencyConfig
from clocktune.yaml_config import Probability, check_fields, load_validated_yaml

_STRICT = ConfigDict(extra="forbid")


@dataclass
class PlannerConfig:
    """How the teacher acts on what it has heard.

    Args:
        threshold: Confidence of the most likely reading at which read-only calls are issued speculatively.
        early_wrong_rate: Probability that a guess made before the words settle it clears the threshold, so that
            the teacher calls early and must later modify or cancel.
        ack_rate: Probability of a short acknowledgement when the user has finished but results are pending.
    """

    __pydantic_config__ = _STRICT

    threshold: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.6
    early_wrong_rate: Probability = 0.6
    ack_rate: Probability = 0.3

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class PerturbConfig:
    """Noise in the teacher's actions, so that the data shows states off its path and how it recovers from them
    (DART, Laskey et al. 2017; :mod:`data_gen.expert.perturb`). The wrong actions carry no loss
    (``Timeline.context_only``); the expert's recovery does.

    Args:
        dialogues: Share of dialogues whose expert is perturbed (0: none, the default).
        rate: In such a dialogue, probability of a perturbation at each decision (when its kind applies).
        budget: Perturbations at most per dialogue.
        kinds: What a perturbation does: ``missed_call`` (a wait in place of a call), ``wrong_arguments`` (a call or
            modify with one argument changed), ``wrong_tool`` (a call to another tool in place of a call or modify),
            ``spurious_call`` (a call to some tool where the expert waited). After each of them the expert can always
            finish the task (tests/test_expert.py), so the ground truth is the unperturbed one's.
    """

    __pydantic_config__ = _STRICT

    dialogues: Probability = 0.0
    rate: Probability = 0.5
    budget: Annotated[int, Field(ge=1)] = 1
    kinds: Annotated[
        list[Literal["missed_call", "wrong_arguments", "wrong_tool", "spurious_call"]], Field(min_length=1)
    ] = field(default_factory=lambda: ["missed_call", "wrong_arguments", "wrong_tool"])

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class GeneratorConfig:
    """Everything that shapes generated timelines besides the seed.

    Args:
        speech: Speech and recogniser model.
        tools: Tool latency and failure model.
        device: Agent compute profile.
        planner: Teacher behaviour.
        domains: Registered domains to draw from, by name, uniformly (all registered ones when both this and
            ``domain_files`` are empty).
        domain_files: Declarative domain files (YAML or JSON, see :mod:`data_gen.declarative`; relative paths from
            the working directory) to draw from too.
        no_tool_rate: Share of dialogues that need no tool.
        teacher: ``speculative`` (acts while the user speaks) or ``sync`` (turn-based baseline).
        perturb: Noise in the teacher's actions (off by default).
    """

    __pydantic_config__ = _STRICT

    speech: SpeechConfig = field(default_factory=SpeechConfig)
    tools: ToolLatencyConfig = field(default_factory=ToolLatencyConfig)
    device: DeviceProfile = field(default_factory=lambda: PROFILES["h200-3b"])
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    domains: list[str] = field(default_factory=list)
    domain_files: list[str] = field(default_factory=list)
    no_tool_rate: Probability = 0.1
    teacher: Literal["speculative", "sync"] = "speculative"
    perturb: PerturbConfig = field(default_factory=PerturbConfig)

    def __post_init__(self) -> None:
        check_fields(self)  # the nested configs checked themselves when they were built


_ADAPTER = TypeAdapter(GeneratorConfig)


def held_out_config(config: GeneratorConfig) -> GeneratorConfig:
    """The config of held-out dialogues for a training config: the same, without noise in the teacher's actions.

    Noise is for training (its wrong actions carry no loss); held out, a teacher-forced score would count its wrong
    actions as decisions to predict.

    Args:
        config: The training data's config.

    Returns:
        The config with ``perturb`` off.
    """
    return replace(config, perturb=PerturbConfig())


def load_config(path: str | Path | None) -> GeneratorConfig:
    """Reads a generator config from YAML; ``None`` gives the defaults.

    Args:
        path: A YAML file whose keys are the fields of :class:`GeneratorConfig`.

    Returns:
        The validated config.

    Raises:
        ValueError: Naming the file and every bad field, or the file when it is not a YAML mapping.
        OSError: When the file cannot be read.
    """
    if path is None:
        return GeneratorConfig()
    return load_validated_yaml(path, _ADAPTER, "generator config")


def config_to_dict(config: GeneratorConfig) -> dict:
    """The config as plain data (for ``stats.json`` and resume checks).

    ``domain_files`` is left out when empty and ``perturb`` when it is off (the default), so that the settings stamps
    of folders written before the fields existed still match.
    """
    data = _ADAPTER.dump_python(config, mode="json")
    if not data["domain_files"]:
        del data["domain_files"]
    if config.perturb == PerturbConfig():
        del data["perturb"]
    return data
