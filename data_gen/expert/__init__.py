"""Reactive experts: runtime policies that finish a generated task from any state a session reaches (DAgger's
labeller), deciding from the events shown so far plus the task's privileged ground truth."""

from data_gen.expert.factory import expert_factory, experts_of_data, generator_config_of, spoken_words
from data_gen.expert.policy import EXPERT_STRATEGIES, MAX_RETRIES, ExpertPolicy, settle_points
from data_gen.expert.view import CallView, SessionView

__all__ = [
    "EXPERT_STRATEGIES",
    "MAX_RETRIES",
    "CallView",
    "ExpertPolicy",
    "SessionView",
    "expert_factory",
    "experts_of_data",
    "generator_config_of",
    "settle_points",
    "spoken_words",
]
