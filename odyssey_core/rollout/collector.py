"""Collect complete episodes from N environments stepping in lockstep into one TurnBatch.

Each turn, the current frames of every environment whose episode is running go to the policy
in one batched ``generate`` call (one prompt per turn from the current frame only: the
paper's minimal scaffolding, no history), and each raw answer text goes to its environment,
which parses it and applies its configured fallback for invalid answers.

A collection is counted in trajectories: exactly ``num_trajectories`` complete episodes,
each ended by the environment (termination or its own truncation) or cut by the collector
after ``max_turns`` turns. Episodes are numbered in the order they start; episode ``k`` plays
level ``levels[k]`` (or a level drawn by ``level_sampler``) from an env seed derived from
``(seed, k)``, and each generate call samples with a seed derived from ``(seed, turn)``, so
the same seed, weights and parameters give the same batch, whatever the vector env runner.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from odyssey_core.envs.base import Observation
from odyssey_core.policy.base import Generation, GenerationParams, PolicyBackend
from odyssey_core.policy.masks import token_masks
from odyssey_core.rl.batch import TurnBatch
from odyssey_core.rollout.metrics import RolloutMetrics

__all__ = ["LevelSampler", "RolloutCollector", "VectorEnvLike", "episode_seed", "split_level"]

#: draws the level of one new episode, e.g. ``"odland-1-2"`` or ``"1-2"``
LevelSampler = Callable[[np.random.Generator], str]

# Tags that keep the seed streams (env seeds, sampling seeds, level draws) apart.
_ENV_STREAM, _GENERATE_STREAM, _LEVEL_STREAM = 1, 2, 3
_GAME_LEVEL = re.compile(r"^([A-Za-z][A-Za-z_]*)-(.+)$")


class VectorEnvLike(Protocol):
    """What the collector needs from :class:`~odyssey_core.envs.vector.SyncVectorEnv` or
    :class:`~odyssey_core.envs.vector.SubprocVectorEnv`."""

    num_envs: int
    env_ids: list[str]

    def reset(
        self,
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[Observation], list[dict[str, Any]]]: ...

    def step(
        self, actions: Sequence[Any], indices: Sequence[int] | None = None
    ) -> tuple[list[Observation], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]: ...


def _stream_seed(*words: int) -> int:
    """A 32-bit seed from integers (any sign, any size): SeedSequence mixes them well."""
    entropy = [int(w) % 2**64 for w in words]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0])


def episode_seed(seed: int, episode: int) -> int:
    """The env seed of episode number ``episode`` in a collection seeded with ``seed``."""
    return _stream_seed(_ENV_STREAM, seed, episode)


def split_level(level: str) -> tuple[str | None, str]:
    """``"odland-1-2"`` -> ``("odland", "1-2")``; a bare ``"1-2"`` -> ``(None, "1-2")``."""
    match = _GAME_LEVEL.match(level)
    return (match.group(1), match.group(2)) if match else (None, level)


@dataclass
class _Episode:
    """One running episode's turns, buffered until it ends so the batch keeps it contiguous."""

    number: int
    seed: int
    level_id: str
    frames: list[np.ndarray] = field(default_factory=list)
    generations: list[Generation] = field(default_factory=list)
    masks: list[tuple[list[bool], list[bool]]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    extras: list[dict[str, Any]] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.rewards)


class RolloutCollector:
    """Plays ``policy`` in ``vector_env`` and returns complete episodes as a :class:`TurnBatch`.

    ``max_turns`` caps every episode (the env may end it earlier with its own limit).
    ``level_sampler(rng)`` picks the level of each episode when ``collect`` gets no
    ``levels``; with neither, every env keeps the level it has. ``tokenizer`` (default:
    ``policy.tokenizer``) splits responses into thought and action tokens.
    """

    def __init__(
        self,
        vector_env: VectorEnvLike,
        policy: PolicyBackend,
        params: GenerationParams,
        max_turns: int,
        level_sampler: LevelSampler | None = None,
        *,
        tokenizer: Any = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.vector_env = vector_env
        self.policy = policy
        self.params = params
        self.max_turns = int(max_turns)
        self.level_sampler = level_sampler
        self.tokenizer = tokenizer if tokenizer is not None else getattr(policy, "tokenizer", None)
        if self.tokenizer is None:
            raise ValueError(
                "the collector needs a tokenizer for the thought/action masks: the policy has "
                "no .tokenizer, pass tokenizer=..."
            )

    @property
    def num_envs(self) -> int:
        return int(self.vector_env.num_envs)

    # -- the collection loop ---------------------------------------------------------------------

    def collect(
        self, num_trajectories: int, levels: Sequence[str] | None = None, seed: int = 0
    ) -> tuple[TurnBatch, RolloutMetrics]:
        """Exactly ``num_trajectories`` complete episodes, ordered by episode number.

        ``levels`` gives one level per episode (``"odland-1-2"`` or ``"1-2"``).
        """
        if num_trajectories < 1:
            raise ValueError(f"num_trajectories must be at least 1, got {num_trajectories}")
        plan = self._plan_levels(num_trajectories, levels, seed)
        started = time.perf_counter()
        timings = {"generate_s": 0.0, "env_s": 0.0}

        slots: list[_Episode | None] = [None] * self.num_envs
        observations: list[Observation | None] = [None] * self.num_envs
        finished: dict[int, _Episode] = {}
        next_episode = 0

        def start(indices: list[int]) -> None:
            """Begin the next episodes on ``indices`` (one reset call for all of them)."""
            nonlocal next_episode
            numbers = list(range(next_episode, next_episode + len(indices)))
            next_episode += len(indices)
            seeds = [episode_seed(seed, k) for k in numbers]
            options = [None if plan[k] is None else {"level": plan[k][1]} for k in numbers]
            t0 = time.perf_counter()
            obs, infos = self.vector_env.reset(seeds=seeds, options=options, indices=indices)
            timings["env_s"] += time.perf_counter() - t0
            for i, k, s, o, info in zip(indices, numbers, seeds, obs, infos, strict=True):
                slots[i] = _Episode(k, s, self._level_id(i, info, plan[k]))
                observations[i] = o

        start(list(range(min(self.num_envs, num_trajectories))))
        turn_counter = 0
        while True:
            active = [i for i, episode in enumerate(slots) if episode is not None]
            if not active:
                break
            frames = [observations[i] for i in active]
            # One seed per call; the backend gives batch item j the seed + j.
            call_params = self.params.model_copy(
                update={"seed": self._generate_seed(seed, turn_counter)}
            )
            turn_counter += 1
            t0 = time.perf_counter()
            generations = self.policy.generate(frames, call_params)
            timings["generate_s"] += time.perf_counter() - t0
            if len(generations) != len(active):
                raise RuntimeError(
                    f"the policy returned {len(generations)} answers for {len(active)} frames"
                )
            t0 = time.perf_counter()
            next_obs, rewards, terminated, truncated, infos = self.vector_env.step(
                [g.text for g in generations], indices=active
            )
            timings["env_s"] += time.perf_counter() - t0

            ended: list[int] = []
            for j, i in enumerate(active):
                episode = slots[i]
                assert episode is not None and observations[i] is not None
                env_done = bool(terminated[j]) or bool(truncated[j])
                cut = not env_done and episode.turns + 1 >= self.max_turns
                self._record(
                    episode,
                    observations[i],  # type: ignore[arg-type]
                    generations[j],
                    float(rewards[j]),
                    infos[j],
                    terminated=bool(terminated[j]),
                    truncated=bool(truncated[j]),
                    cut=cut,
                )
                observations[i] = next_obs[j]
                if env_done or cut:
                    finished[episode.number] = episode
                    slots[i] = None
                    observations[i] = None
                    ended.append(i)
            # Envs that ended an episode start the next one while more are needed; the rest idle.
            refill = ended[: max(0, num_trajectories - next_episode)]
            if refill:
                start(refill)

        batch = self._to_batch([finished[k] for k in range(num_trajectories)])
        timings["total_s"] = time.perf_counter() - started
        timings["turns_per_s"] = len(batch) / timings["total_s"] if timings["total_s"] else 0.0
        return batch, RolloutMetrics.from_batch(batch, timings)

    # -- helpers ---------------------------------------------------------------------------------

    def _plan_levels(
        self, count: int, levels: Sequence[str] | None, seed: int
    ) -> list[tuple[str | None, str] | None]:
        """Per episode: ``(game or None, level)`` to reset into, or None to keep the env's."""
        if levels is not None:
            if len(levels) != count:
                raise ValueError(f"got {len(levels)} levels for {count} trajectories")
            chosen: Sequence[str | None] = list(levels)
        elif self.level_sampler is not None:
            rng = np.random.default_rng(_stream_seed(_LEVEL_STREAM, seed))
            chosen = [self.level_sampler(rng) for _ in range(count)]
        else:
            chosen = [None] * count
        return [None if level is None else split_level(str(level)) for level in chosen]

    def _generate_seed(self, seed: int, turn: int) -> int:
        """The sampling seed of the ``turn``-th generate call; mixes in ``params.seed`` if set."""
        extra = () if self.params.seed is None else (self.params.seed,)
        return _stream_seed(_GENERATE_STREAM, seed, turn, *extra)

    def _level_id(
        self, index: int, info: dict[str, Any], wanted: tuple[str | None, str] | None
    ) -> str:
        """The env id of the level the env was reset into, e.g. ``"odland-1-1"``."""
        game, level = info.get("game"), info.get("level")
        if wanted is not None and wanted[0] is not None and game is not None and game != wanted[0]:
            raise ValueError(
                f"env {index} plays {game}, but a level of {wanted[0]} was requested: "
                f"{wanted[0]}-{wanted[1]}"
            )
        if game is not None and level is not None:
            return f"{game}-{level}"
        return self.vector_env.env_ids[index]  # a non-Game Boy env: its registry id

    def _record(
        self,
        episode: _Episode,
        observation: Observation,
        generation: Generation,
        reward: float,
        info: dict[str, Any],
        *,
        terminated: bool,
        truncated: bool,
        cut: bool,
    ) -> None:
        n = len(generation.response_ids)
        if len(generation.logprobs) != n:
            raise RuntimeError(
                f"the policy gave {len(generation.logprobs)} log-probs for {n} response tokens; "
                "RL needs one behaviour log-prob per sampled token"
            )
        episode.frames.append(np.array(observation.image, dtype=np.uint8, copy=True))
        episode.generations.append(generation)
        episode.masks.append(
            token_masks(generation.text, generation.response_ids, self.tokenizer, generation.parsed)
        )
        episode.rewards.append(reward)
        max_progress = info.get("max_progress")
        episode.extras.append(
            {
                "response": generation.text,
                "response_tokens": n,
                "finish_reason": generation.finish_reason,
                "progress": float(info.get("progress", 0.0)),
                "max_progress": None if max_progress is None else float(max_progress),
                "invalid_action": bool(info.get("invalid_action", False)),
                "parse_error": info.get("parse_error"),
                "buttons": [str(b) for b in info.get("buttons", ())],
                "life_lost": bool(info.get("life_lost", False)),
                "goal_reached": bool(info.get("goal_reached", False)),
                "terminated": terminated,
                "truncated": truncated,  # by the env's own turn limit
                "cut": cut,  # by the collector's max_turns
                "env_seed": episode.seed,
            }
        )

    @staticmethod
    def _to_batch(episodes: list[_Episode]) -> TurnBatch:
        episode_ids, turn_index, levels, dones = [], [], [], []
        frames, extras, rewards = [], [], []
        prompt_ids, response_ids, thought, action, logprobs = [], [], [], [], []
        for episode in episodes:
            length = episode.turns
            episode_ids += [episode.number] * length
            turn_index += list(range(length))
            levels += [episode.level_id] * length
            dones += [False] * (length - 1) + [True]
            frames += episode.frames
            extras += episode.extras
            rewards += episode.rewards
            for generation, (thought_mask, action_mask) in zip(
                episode.generations, episode.masks, strict=True
            ):
                prompt_ids.append(torch.tensor(generation.prompt_ids, dtype=torch.long))
                response_ids.append(torch.tensor(generation.response_ids, dtype=torch.long))
                thought.append(torch.tensor(thought_mask, dtype=torch.bool))
                action.append(torch.tensor(action_mask, dtype=torch.bool))
                logprobs.append(torch.tensor(generation.logprobs, dtype=torch.float32))
        return TurnBatch(
            episode_ids=torch.tensor(episode_ids, dtype=torch.long),
            turn_index=torch.tensor(turn_index, dtype=torch.long),
            levels=levels,
            frames=frames,
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            thought_mask=thought,
            action_mask=action,
            behaviour_logprobs=logprobs,
            rewards=torch.tensor(rewards, dtype=torch.float32),
            dones=torch.tensor(dones, dtype=torch.bool),
            extras=extras,
        )
