"""How an action's tokens are picked: greedy, sampled, or sampled at the action's first token alone."""

import pytest
import torch

from clocktune.runtime.token_picking import SamplingNoise, TokenPicker

# A mild preference: sampled at temperature 1, every one of the four tokens is drawn within a few hundred keys.
LOGITS = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))


def _picks(written: int, continuation_temperature: float | None) -> set[int]:
    return {
        TokenPicker(None, 64, 1.0, SamplingNoise((seed,)), continuation_temperature).pick(LOGITS, written)
        for seed in range(300)
    }


def test_a_continuation_temperature_of_zero_samples_an_actions_first_token_and_writes_the_rest_greedily():
    assert _picks(0, 0.0) == {0, 1, 2, 3}  # the first token (the action's kind) is sampled
    assert all(_picks(written, 0.0) == {0} for written in (1, 2, 7))  # past it, the argmax whatever the noise
    assert all(_picks(written, None) == {0, 1, 2, 3} for written in (0, 1, 7))  # unset: sampled throughout


def test_a_sampled_continuation_after_a_greedy_first_token_is_refused_without_the_actions_noise():
    with pytest.raises(ValueError, match="noise"):
        TokenPicker(None, 64, 0.0, None, 1.0)
    assert {TokenPicker(None, 64, 0.0, SamplingNoise((seed,)), 1.0).pick(LOGITS, 0) for seed in range(50)} == {0}
