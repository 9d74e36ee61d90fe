"""The ESPO reward wrapper: scores each answer of a replayed demonstration with its stage's
verifiable reward (:func:`~odyssey_core.recipes.espo.rewards.score_step`), as GTR's wrapper
scores its env's turns.

The wrapped env replays a demonstration (``PersonaEnv(mode="replay")``), so the step an answer
is scored against is the one on screen when it was given. The step's reward becomes the turn's
reward; its parts go into ``info`` (``accuracy``, ``format``, ``intent_acc``, ``reward_reason``)
for the estimators and the metrics.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from odyssey_core.envs.base import StepResult
from odyssey_core.envs.persona.env import PersonaEnv
from odyssey_core.protocol.gui import GuiAction, ParsedGuiAnswer, parse_gui_answer
from odyssey_core.recipes.espo.rewards import StageRewardSettings, score_step

__all__ = ["StageRewardWrapper"]


class StageRewardWrapper(gymnasium.Wrapper):
    """Stage rewards on a replaying :class:`PersonaEnv`."""

    def __init__(self, env: PersonaEnv, settings: StageRewardSettings | None = None) -> None:
        if env.mode != "replay":
            raise ValueError(
                "stage rewards score answers against the demonstration: wrap a replay-mode env"
            )
        super().__init__(env)
        self.settings = settings or StageRewardSettings()

    def step(self, action: Any) -> StepResult:
        env: PersonaEnv = self.env.unwrapped  # type: ignore[assignment]
        episode, step = env.episode, env.episode.steps[env.step_index]
        if isinstance(action, GuiAction):
            parsed = ParsedGuiAnswer(action, True, None, "", None, None)
        elif isinstance(action, ParsedGuiAnswer):
            parsed = action
        else:
            parsed = parse_gui_answer(action)
        observation, _, terminated, truncated, info = self.env.step(parsed)
        score = score_step(parsed, step, episode.intent, episode.intent_slots, self.settings)
        info.update(
            accuracy=score.accuracy,
            format=score.format,
            intent_acc=score.intent_acc,
            reward_reason=score.reason,
        )
        return observation, score.reward, terminated, truncated, info
