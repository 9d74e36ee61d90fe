"""A tiny deterministic TurnEnv for tests that must not need the emulator."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium
import numpy as np

from odyssey_core.envs.base import Observation, StepResult, TurnEnv


class FakeTurnEnv(TurnEnv):
    """Frames and rewards are a pure function of (seed, turn, action).

    ``episode_len`` turns end an episode (terminated); the action ``"boom"`` raises
    ``ValueError``; ``"exit"`` makes the process exit at once with code 3 (a crashing worker);
    ``("sleep", seconds)`` stalls the turn (a hung worker).
    ``declare_shape=False`` hides the frame shape, so a vector env learns it from the first frame.
    """

    def __init__(
        self,
        name: str = "fake",
        shape: tuple[int, int] = (24, 32),
        episode_len: int = 5,
        declare_shape: bool = True,
        fail_on_init: bool = False,
    ) -> None:
        if fail_on_init:
            raise RuntimeError(f"{name}: could not start (on purpose)")
        self.env_id = name
        self.shape = (*shape, 3)
        self.episode_len = episode_len
        self.legal_actions = ["left", "right"]
        self.action_space = gymnasium.spaces.Discrete(2)
        if declare_shape:
            self.observation_space = gymnasium.spaces.Box(0, 255, self.shape, np.uint8)
        self._seed = 0
        self._turn = 0
        self._position = 0
        self.closed = False

    def _frame(self) -> np.ndarray:
        h, w, _ = self.shape
        base = np.arange(h * w * 3, dtype=np.int64).reshape(self.shape)
        return ((base * (self._seed + 1) + 7 * self._turn + 13 * self._position) % 251).astype(
            np.uint8
        )

    def _observation(self) -> Observation:
        text = f"{self.env_id} seed={self._seed} turn={self._turn} pos={self._position}"
        return Observation(self._frame(), text, {"turn": self._turn})

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self._seed = 0 if seed is None else seed
        self._turn = 0
        self._position = int((options or {}).get("position", 0))
        return self._observation(), {"pid": os.getpid()}

    def step(self, action: Any) -> StepResult:
        if action == "boom":
            raise ValueError(f"{self.env_id}: boom at turn {self._turn}")
        if action == "exit":
            os._exit(3)
        if isinstance(action, tuple) and action[0] == "sleep":
            time.sleep(action[1])
        delta = 1 if action in ("right", 1) else -1
        self._position += delta
        self._turn += 1
        reward = float(delta * (self._seed + 1))
        terminated = self._turn >= self.episode_len
        return self._observation(), reward, terminated, False, {"position": self._position}

    def render(self) -> np.ndarray:  # type: ignore[override]
        return self._frame()

    @property
    def supports_save_state(self) -> bool:
        return True

    def save_state(self) -> bytes:
        return f"{self._seed},{self._turn},{self._position}".encode()

    def load_state(self, state: bytes) -> None:
        self._seed, self._turn, self._position = (int(v) for v in state.decode().split(","))

    def resize(self, height: int, width: int) -> tuple[int, int, int]:
        """Change the frame shape mid-run (exercises re-attaching the shared slot)."""
        self.shape = (height, width, 3)
        return self.shape

    def close(self) -> None:
        self.closed = True
