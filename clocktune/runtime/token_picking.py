"""How an action's tokens are picked: greedy or sampled, the same rule for plain decoding and for verifying drafts.

A sampled token is a Gumbel-max draw whose noise is keyed by the session's seed, the action and the position
(:class:`SamplingNoise`), never a stream shared with other draws. Plain decoding, speculative decoding at any draft
length and any batch therefore pick the *same* token at each position, and a session's log does not depend on how it
was decoded (docs/design.md §5). :class:`TokenPicker` applies that rule, under the action grammar when there is one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np  # pyarrow's dependency, so always there; torch is not imported: profiles read speculative.py

if TYPE_CHECKING:
    import torch

__all__ = ["SamplingNoise", "TokenPicker"]


class SamplingNoise:
    """Gumbel noise per position of one action: what makes a sampled action independent of how it was decoded.

    Sampling draws ``argmax(logits / T + g)`` over the tokens allowed, ``g`` standard Gumbel noise: by the Gumbel-max
    trick the token is distributed as ``softmax(logits / T)``. The noise of each position comes from a stream keyed
    by the session's seed, the action and the position, never from a stream shared with other draws, so plain
    decoding, speculative decoding at any draft length and any batch draw the *same* token at each position: a draft
    token is accepted iff it is the token plain decoding draws there. A session's log then does not depend on
    speculation, batch or concurrency, sampled as greedy. A model drafter drafts with the same noise, which is what
    makes its drafts agree (the Gumbel coupling accepts with probability at least ``(1 - TV) / (1 + TV)``, rejection
    sampling ``1 - TV``: a little acceptance paid for logs that do not depend on the decoding).

    Args:
        key: The stream's key (seed, the timeline's seed, the action's index).
    """

    def __init__(self, key: tuple[int, ...]) -> None:
        self.key = key
        self._drawn: dict[tuple[int, int], np.ndarray] = {}

    def at(self, position: int, vocabulary: int) -> np.ndarray:
        """The noise of the action's token ``position`` over a vocabulary of ``vocabulary`` tokens."""
        noise = self._drawn.get((position, vocabulary))
        if noise is None:
            if len(self._drawn) >= 16:  # a draft reads a few positions ahead; older ones are done with
                self._drawn.pop(next(iter(self._drawn)))
            noise = np.random.default_rng([*self.key, position]).gumbel(size=vocabulary)
            self._drawn[(position, vocabulary)] = noise
        return noise

    def sample(
        self, logits: torch.Tensor, position: int, temperature: float, allowed: np.ndarray | None = None
    ) -> int:
        """The token drawn at ``position``: ``argmax(logits / T + g)`` over the ``allowed`` tokens (all: ``None``)."""
        values = logits.detach().float().cpu().numpy().astype(np.float64) / temperature
        values += self.at(position, values.shape[-1])
        if allowed is not None:
            values = np.where(allowed, values, -np.inf)
        return int(values.argmax())


class TokenPicker:
    """The target's rule at each position of an action: plain decoding and verification share it.

    Greedy (``temperature == 0``): the argmax, or under a grammar ``GrammarMatcher.choose`` and, past the budget,
    ``choose_closing``. Sampling: a draw from ``softmax(logits / T)`` over the tokens the grammar allows, with the
    position's own noise (:class:`SamplingNoise`); past the budget the closing rule stays deterministic. Either way a
    draft token is accepted iff it is the token picked, so what is emitted does not depend on the drafts. The matcher
    advances only over tokens emitted, so rejected drafts need no rollback.

    Args:
        matcher: The action's ``GrammarMatcher``, or ``None`` unconstrained.
        max_new_tokens: Tokens before the grammar's wrap-up rule takes over.
        temperature: 0 for greedy decoding.
        noise: The action's sampling noise (needed when ``temperature > 0``).
        continuation_temperature: The temperature past the action's first token (its kind); ``None``: ``temperature``.
    """

    def __init__(
        self,
        matcher: Any,
        max_new_tokens: int,
        temperature: float = 0.0,
        noise: SamplingNoise | None = None,
        continuation_temperature: float | None = None,
    ) -> None:
        rest = temperature if continuation_temperature is None else continuation_temperature
        if max(temperature, rest) > 0 and noise is None:
            raise ValueError("sampling needs the action's noise")
        self.matcher = matcher
        self.max_new_tokens = max_new_tokens
        self.temperatures = (temperature, rest)  # at the action's first token, and past it
        self.noise = noise

    def pick(self, logits: torch.Tensor, written: int) -> int:
        """The token emitted at a position (does not advance the matcher).

        Args:
            logits: The target's next-token logits there (1D).
            written: Tokens of the action before it.

        Returns:
            The token.
        """
        matcher = self.matcher
        if matcher is not None and written >= self.max_new_tokens:
            return matcher.choose_closing(logits)
        temperature = self.temperatures[written > 0]
        if temperature <= 0:
            return int(logits.argmax()) if matcher is None else matcher.choose(logits)
        allowed = None if matcher is None else matcher.allowed(logits.shape[-1])
        return self.noise.sample(logits, written, temperature, allowed)

    def advance(self, token: int) -> None:
        """Consumes an emitted token (the grammar's state moves on)."""
        if self.matcher is not None:
            self.matcher.advance(token)

    def forced(self, limit: int) -> list[int]:
        """Tokens the grammar forces next (a free draft: the target's rule can pick nothing else), at most ``limit``.

        Args:
            limit: The most to return.

        Returns:
            The forced tokens (none unconstrained).
        """
        if self.matcher is None or limit <= 0 or self.matcher.is_accepting():
            return []
        return list(self.matcher.matcher.compute_ff_tokens()[:limit])
