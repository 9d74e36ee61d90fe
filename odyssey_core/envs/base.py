"""The environment contract every Odyssey environment follows.

``reset(seed=None, options=None) -> (Observation, info)`` and
``step(action) -> (Observation, reward, terminated, truncated, info)``, where the action is
the model's raw text, a parsed response, a tuple of button names or an index into the legal
actions (the last is what classical RL baselines use). Emulated games also offer
``save_state() -> bytes`` and ``load_state(bytes)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium
import numpy as np


@dataclass(frozen=True)
class Observation:
    """What the agent sees on a turn: a frame and the task text."""

    image: np.ndarray  # uint8 [H, W, 3]
    text: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.image.dtype != np.uint8 or self.image.ndim != 3 or self.image.shape[2] != 3:
            raise ValueError(
                "Observation.image must be uint8 [H, W, 3], "
                f"got {self.image.dtype} {self.image.shape}"
            )


StepResult = tuple[Observation, float, bool, bool, dict[str, Any]]


class TurnEnv(gymnasium.Env, ABC):
    """A turn-based environment whose observations are images plus text.

    It is a ``gymnasium.Env`` so Gymnasium tooling works with it; its observations are
    :class:`Observation` objects (``odyssey_core.envs.gym_compat`` turns them into dicts for
    code that wants Gymnasium spaces checked).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    #: the registry name, e.g. ``"odland-1-1"``
    env_id: str = ""
    #: the discrete actions, in the order an integer action indexes them
    legal_actions: list[Any]

    @abstractmethod
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Implementations call ``super().reset(seed=seed)`` first: it seeds ``self.np_random``."""
        super().reset(seed=seed)
        return None  # type: ignore[return-value]

    @abstractmethod
    def step(self, action: Any) -> StepResult: ...

    def render(self) -> np.ndarray:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__} does not render")

    @property
    def supports_save_state(self) -> bool:
        return False

    def save_state(self) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} cannot save its state")

    def load_state(self, state: bytes) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load a state")
