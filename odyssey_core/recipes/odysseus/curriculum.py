"""Multi-task auto-curriculum by inverse trajectory length (Odysseus paper Section 6.2).

Easy levels give long trajectories, so uniform level sampling fills the PPO objective with
turns from easy levels. After each batch every level k present in it gets the score

    s_k = 1 / N_k,   N_k = mean trajectory length of level k in the batch,

a level absent from the batch keeps its previous score, and the next batch samples levels
with probabilities w_k = s_k / sum_j s_j, so each level contributes about as many turns.

Scores start at 1 for every level (uniform weights until levels are seen). A never-seen level
therefore scores 1 > any 1/N_k, which sends the next batch to it: exploration for free.

Floor (not in the paper; 0 reproduces it): with p_k = s_k / sum_j s_j,

    q_k = max(p_k, floor);   w_k = q_k / sum_j q_j.

Renormalising can leave a floored level slightly below ``floor``, but never at 0: every level
stays alive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from odyssey_core.rl.trainer import Trainer, TrainerHook
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import EpisodeStart

__all__ = ["AutoCurriculum", "CurriculumHook"]


class AutoCurriculum:
    def __init__(self, levels: Sequence[str], floor: float = 0.0, seed: int = 0) -> None:
        self.levels = list(levels)
        if not self.levels or len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels must be non-empty and distinct, got {self.levels}")
        if not 0.0 <= floor < 1.0:
            raise ValueError(f"floor must be in [0, 1), got {floor}")
        self.floor = floor
        self.scores = dict.fromkeys(self.levels, 1.0)  # unnormalised 1 / N_k
        self.mean_lengths: dict[str, float | None] = dict.fromkeys(self.levels)
        self.rng = np.random.default_rng(seed)

    def update(self, episode_lengths_by_level: dict[str, list[int]]) -> None:
        """s_k = 1 / mean(lengths of level k) for each level with episodes in this batch."""
        for level, lengths in episode_lengths_by_level.items():
            if level not in self.scores:
                raise ValueError(f"unknown level {level!r}; known: {self.levels}")
            if not lengths:  # no episode of this level: it keeps its score
                continue
            if min(lengths) <= 0:
                raise ValueError(f"{level}: trajectory lengths must be positive, got {lengths}")
            mean_length = float(np.mean(lengths))
            self.mean_lengths[level] = mean_length
            self.scores[level] = 1.0 / mean_length

    def weights(self) -> dict[str, float]:
        """Sampling probabilities (sum 1): normalised scores, floored, renormalised."""
        scores = np.array([self.scores[k] for k in self.levels], dtype=np.float64)
        p = np.maximum(scores / scores.sum(), self.floor)
        p = p / p.sum()
        return dict(zip(self.levels, p.tolist(), strict=True))

    def sample(self, n: int) -> list[str]:
        """n level ids drawn independently from :meth:`weights` with the curriculum's own RNG."""
        p = np.array(list(self.weights().values()))
        picks = self.rng.choice(len(self.levels), size=n, p=p)
        return [self.levels[i] for i in picks]

    def metrics(self) -> dict[str, float]:
        out = {f"curriculum/weight/{k}": w for k, w in self.weights().items()}
        for level, length in self.mean_lengths.items():
            if length is not None:
                out[f"curriculum/mean_length/{level}"] = length
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "levels": list(self.levels),
            "floor": self.floor,
            "scores": dict(self.scores),
            "mean_lengths": dict(self.mean_lengths),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["levels"]) != self.levels:
            raise ValueError(f"checkpoint levels {state['levels']} != {self.levels}")
        self.floor = float(state["floor"])
        self.scores = {k: float(state["scores"][k]) for k in self.levels}
        self.mean_lengths = dict(state["mean_lengths"])
        self.rng.bit_generator.state = state["rng"]


class CurriculumHook(TrainerHook):
    """The curriculum on the one trainer: it picks each step's levels and, after the step,
    scores the levels by the batch's trajectory lengths (when ``update`` is on)."""

    name = "curriculum"

    def __init__(
        self,
        curriculum: AutoCurriculum,
        episodes: int,
        update: bool = True,
        start_states: dict[str, bytes] | None = None,
    ) -> None:
        self.curriculum, self.episodes, self.update = curriculum, episodes, update
        self.start_states = dict(start_states or {})  # level -> the save state it starts from

    def episode_starts(self, trainer: Trainer) -> list[EpisodeStart]:
        return [
            EpisodeStart(level=level, state=self.start_states.get(level))
            for level in self.curriculum.sample(self.episodes)
        ]

    def on_step_end(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        if self.update:
            by_level: dict[str, list[int]] = {}
            for part in batch.episode_slices():
                by_level.setdefault(batch.levels[part.start], []).append(part.stop - part.start)
            self.curriculum.update(by_level)
        return self.curriculum.metrics()

    def state_dict(self) -> dict[str, Any]:
        return self.curriculum.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.curriculum.load_state_dict(state)
