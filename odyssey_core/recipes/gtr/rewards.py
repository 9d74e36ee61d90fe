"""GTR's data-quality helpers: a per-step format reward and corrector-driven truncation.

* :func:`format_reward`: a well-formed answer (a legal action in the agent format) earns
  ``value`` each step, so RL does not drift into unparsable output (GTR section 4.4).
* :class:`EpisodeGuard`: ends an episode early when the corrector finds it unsolvable or the
  agent loops (the same state and action ``max_repeats`` times), so the buffer is not filled
  with steps that cannot teach anything.
* :class:`GTRWrapper`: both, plus the corrector call, around a card env: ``step(text)``
  returns the correction in ``info["gtr"]``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import gymnasium
from pydantic import Field

from odyssey_core.config import StrictModel
from odyssey_core.protocol.gtr_format import GTRParsed, parse_gtr_response
from odyssey_core.recipes.gtr.corrector import Correction, Corrector, EpisodeMemory

__all__ = ["EpisodeGuard", "GTRRewardConfig", "GTRWrapper", "format_reward"]


class GTRRewardConfig(StrictModel):
    format_reward: float = Field(
        default=0.1, description="added each step the answer is well formed (0 disables)"
    )
    malformed_penalty: float = Field(
        default=0.0, description="added (usually negative) when the answer is not well formed"
    )
    truncate_unsolvable: bool = Field(
        default=True, description="end the episode when the corrector says it cannot be won"
    )
    max_repeats: int = Field(
        default=3, ge=0, description="end the episode when one (state, action) recurs this often"
    )


def format_reward(
    parsed: GTRParsed | str,
    legal_actions: Sequence[str] = (),
    *,
    value: float = 0.1,
    penalty: float = 0.0,
) -> float:
    """``value`` for an answer that names a legal action in the agent format, else ``penalty``."""
    if isinstance(parsed, str):
        parsed = parse_gtr_response(parsed, legal_actions)
    return value if parsed.valid else penalty


class EpisodeGuard:
    """Decides when to cut an episode short; call :meth:`reset` at each episode start."""

    def __init__(self, *, max_repeats: int = 3, truncate_unsolvable: bool = True) -> None:
        self.max_repeats = max_repeats
        self.truncate_unsolvable = truncate_unsolvable
        self._seen: Counter[tuple[Hashable, Hashable]] = Counter()

    def reset(self) -> None:
        self._seen.clear()

    def check(
        self, state_key: Hashable, action: Hashable, correction: Correction | None = None
    ) -> str | None:
        """Record one step; the reason to truncate (``"unsolvable"``, ``"looping"``) or None."""
        self._seen[(state_key, action)] += 1
        if (
            self.truncate_unsolvable
            and correction is not None
            and correction.valid
            and correction.solvable is False
        ):
            return "unsolvable"
        if self.max_repeats and self._seen[(state_key, action)] >= self.max_repeats:
            return "looping"
        return None


class GTRWrapper(gymnasium.Wrapper):
    """A card env that takes the agent's raw answer and returns GTR's extras in ``info``.

    Each step: parse the answer, correct its thought against the frame and info the agent
    saw (before the step, as in GTR's Algorithm 1), step the env, add the format reward and
    truncate if the guard says so. ``info["gtr"]`` holds the correction, the format reward and
    the truncation reason. The corrector gets this episode's :class:`EpisodeMemory` (a new
    one at every reset), so the target formula it settles on carries across the steps.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        corrector: Corrector | None,
        config: GTRRewardConfig | None = None,
    ) -> None:
        super().__init__(env)
        self.corrector = corrector
        self.config = config or GTRRewardConfig()
        self.guard = EpisodeGuard(
            max_repeats=self.config.max_repeats,
            truncate_unsolvable=self.config.truncate_unsolvable,
        )
        self._last: tuple[Any, dict[str, Any]] | None = None
        self.memory = EpisodeMemory()

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        self.guard.reset()
        self.memory = EpisodeMemory()
        self._last = (observation, info)
        return observation, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._last is None:
            raise RuntimeError("call reset() first")
        before_obs, before_info = self._last
        legal = before_info["legal_actions"]
        parsed = action if isinstance(action, GTRParsed) else None
        if isinstance(action, str) and action not in legal:
            parsed = parse_gtr_response(action, legal)
        correction = None
        if self.corrector is not None and parsed is not None:
            correction = self.corrector.correct(
                before_obs, parsed.thought, parsed.action, before_info, self.memory
            )
        state_key = before_info.get("state_key")
        observation, reward, terminated, truncated, info = self.env.step(
            parsed if parsed is not None else action
        )
        bonus = 0.0
        if parsed is not None:
            bonus = format_reward(
                parsed, value=self.config.format_reward, penalty=self.config.malformed_penalty
            )
        reason = self.guard.check(state_key, info.get("action"), correction)
        if reason is not None and not (terminated or truncated):
            truncated = True
        else:
            reason = None
        info["gtr"] = {"correction": correction, "format_reward": bonus, "truncation": reason}
        self._last = (observation, info)
        return observation, float(reward) + bonus, terminated, truncated, info
