"""The one rollout loop: N environments in lockstep, one batched generation per turn.

Each turn, the current observations of every environment whose episode is running go to the
policy in one batched ``generate`` call (one prompt per turn from the current observation
only: no history beyond what the env puts in its observation), and each raw answer text goes
to its environment, which parses it and applies its configured fallback for invalid answers.

A collection has a budget:

- :class:`EpisodeBudget`: exactly ``episodes`` complete episodes, each ended by the
  environment (termination or its own truncation) or cut after ``max_turns`` turns;
- :class:`TurnBudget`: every env plays ``ceil(turns / n_envs)`` turns, starting a new
  episode whenever one ends (auto-reset); the episodes still running at the end are cut
  (truncated, so a value function bootstraps them).

Episodes are numbered in the order they start. Episode ``k`` starts as ``starts[k]`` says
(level, save state, group), from an env seed derived from ``(seed, k)``; each generate call
samples with a seed derived from ``(seed, call number)``. The same seed, weights and
parameters therefore give the same rollout, whatever the vector env runner, and a training
step's rollout is a pure function of its seed (what makes resumption exact).

:meth:`Collector.play` is the loop itself and reports to an :class:`EpisodeObserver`;
:meth:`Collector.collect` observes with a :class:`TurnBatch` builder, and evaluation observes
with its own episode records. With ``tolerate_failures`` an env that raises or dies ends only
its own episode (with the error), as evaluation wants; training lets the error propagate.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from odyssey_core.common.redaction import summarise_error
from odyssey_core.envs.base import Observation
from odyssey_core.envs.vector import VectorEnvError
from odyssey_core.policy.base import Generation, GenerationParams, PolicyBackend
from odyssey_core.protocol.formats import ResponseFormat
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.metrics import RolloutMetrics

__all__ = [
    "Collector",
    "EpisodeBegin",
    "EpisodeBudget",
    "EpisodeObserver",
    "EpisodeStart",
    "InfoExtras",
    "TurnBudget",
    "TurnOutcome",
    "VectorEnvLike",
    "episode_seed",
    "generate_seed",
    "split_level",
]

# Tags that keep the seed streams (env seeds, sampling seeds) apart.
_ENV_STREAM, _GENERATE_STREAM = 1, 2
_GAME_LEVEL = re.compile(r"^([A-Za-z][A-Za-z_]*)-(.+)$")

#: ``(info_before, info_after) -> facts``: the JSON-able facts of a turn that a recipe wants in
#: its extras, from the env's info at the turn's start and after its step
InfoExtras = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


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


def stream_seed(*words: int) -> int:
    """A 32-bit seed from integers (any sign, any size): SeedSequence mixes them well."""
    entropy = [int(w) % 2**64 for w in words]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0])


def episode_seed(seed: int, episode: int) -> int:
    """The env seed of episode number ``episode`` in a collection seeded with ``seed``."""
    return stream_seed(_ENV_STREAM, seed, episode)


def generate_seed(seed: int, call: int, params_seed: int | None = None) -> int:
    """The sampling seed of the ``call``-th generate call (mixes in ``params.seed`` if set)."""
    extra = () if params_seed is None else (params_seed,)
    return stream_seed(_GENERATE_STREAM, seed, call, *extra)


def split_level(level: str) -> tuple[str | None, str]:
    """``"odland-1-2"`` -> ``("odland", "1-2")``; a bare ``"1-2"`` -> ``(None, "1-2")``."""
    match = _GAME_LEVEL.match(level)
    return (match.group(1), match.group(2)) if match else (None, level)


# -- what to play -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeStart:
    """How one episode begins. Every field is optional: an empty start resets the env as is."""

    level: str | None = None  # "odland-1-2" or "1-2"; None keeps the env's level
    state: bytes | None = None  # a save state to start from (emulated games)
    seed: int | None = None  # the env seed; None: derived from (collection seed, episode)
    group: int | None = None  # episodes of one group are compared by grouped estimators
    sample: int | None = None  # which sample of its group this episode is (sample_index)
    max_turns: int | None = None  # a tighter cap for this episode than the collector's
    options: dict[str, Any] = field(default_factory=dict)  # more reset options

    def reset_options(self) -> dict[str, Any] | None:
        options = dict(self.options)
        if self.level is not None:
            options["level"] = split_level(self.level)[1]
        if self.state is not None:
            options["state"] = self.state
        return options or None


def _at_least_one(budget: Any) -> None:
    ((name, count),) = vars(budget).items()
    if count < 1:
        raise ValueError(f"a budget needs at least 1 of {name}, got {count}")


@dataclass(frozen=True)
class EpisodeBudget:
    """Exactly ``episodes`` complete episodes."""

    episodes: int
    __post_init__ = _at_least_one


@dataclass(frozen=True)
class TurnBudget:
    """``turns`` turns in all, rounded up to whole rounds of every env (auto-reset)."""

    turns: int
    __post_init__ = _at_least_one


Budget = EpisodeBudget | TurnBudget
Starts = Sequence[EpisodeStart] | Callable[[int], EpisodeStart] | None


@dataclass(frozen=True)
class EpisodeBegin:
    """How an episode began, as the observer sees it."""

    slot: int  # the env that plays it
    start: EpisodeStart  # what was asked for
    env_seed: int
    observation: Observation  # the first observation
    info: dict[str, Any]


@dataclass
class TurnOutcome:
    """One played turn, as the observer sees it."""

    observation: Observation  # what the agent saw
    generation: Generation | None  # None for env-driven agents
    reward: float
    terminated: bool  # by the env: the task is over
    truncated: bool  # by the env's own turn limit
    cut: bool  # by the collector: max_turns or the end of a turn budget
    info: dict[str, Any]
    next_observation: Observation

    @property
    def ends_episode(self) -> bool:
        return self.terminated or self.truncated or self.cut


class EpisodeObserver(Protocol):
    """Receives the loop's events; episode numbers are in start order."""

    def on_start(self, episode: int, begin: EpisodeBegin) -> None: ...

    def on_turn(self, episode: int, outcome: TurnOutcome) -> None: ...

    def on_end(self, episode: int, error: str | None) -> None: ...


# -- the loop -------------------------------------------------------------------------------------


class Collector:
    """Plays ``policy`` in ``vector_env``.

    ``response_format`` turns each answer into thought/action token masks for the trainer;
    ``info_extras(info_before, info_after)`` picks the facts of the env's info that go into
    each turn's extras (the recipe knows its game; the collector does not). ``policy=None``
    lets the envs act on their own (env-driven agents such as the search expert): they get
    ``None``.
    """

    def __init__(
        self,
        vector_env: VectorEnvLike,
        policy: PolicyBackend | None,
        params: GenerationParams,
        *,
        max_turns: int,
        response_format: ResponseFormat | None = None,
        info_extras: InfoExtras | None = None,
        tokenizer: Any = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.vector_env = vector_env
        self.policy = policy
        self.params = params
        self.max_turns = int(max_turns)
        self.response_format = response_format
        self.info_extras = info_extras or default_info_extras
        self.tokenizer = tokenizer if tokenizer is not None else getattr(policy, "tokenizer", None)

    @property
    def num_envs(self) -> int:
        return int(self.vector_env.num_envs)

    def play(
        self,
        budget: Budget,
        observer: EpisodeObserver,
        *,
        seed: int = 0,
        starts: Starts = None,
        tolerate_failures: bool = False,
        on_generate: Callable[[list[int], int], None] | None = None,
    ) -> dict[str, float]:
        """Run the loop until ``budget`` is spent; returns timings (generate, env, total).

        A callable ``starts(k)`` is called exactly when episode ``k`` starts, once, in
        episode order. Every episode gets one ``on_end``: with its error when it failed
        (``tolerate_failures``), or "no live environment left" when every env died before
        it could start. ``on_generate(episodes, seed)`` hears which episodes each generate
        call served.
        """
        start_of = _start_lookup(budget, starts)
        started = time.perf_counter()
        timings = {"generate_s": 0.0, "env_s": 0.0}
        n = self.num_envs
        episode_budget = budget.episodes if isinstance(budget, EpisodeBudget) else None
        rounds = math.ceil(budget.turns / n) if isinstance(budget, TurnBudget) else None

        slot_episode: list[int | None] = [None] * n
        slot_turns = [0] * n  # turns of the slot's running episode
        slot_cap = [self.max_turns] * n
        slot_played = [0] * n  # turns the slot played in this collection (turn budgets)
        observations: list[Observation | None] = [None] * n
        retired: set[int] = set()
        next_episode = 0

        def dead() -> set[int]:
            return set(getattr(self.vector_env, "dead_workers", {}) or {})

        def attempt(call: Callable[[], Any], slots: list[int]) -> tuple[dict, dict[int, str]]:
            """Per slot, what ``call`` returned for it; with ``tolerate_failures``, also the
            errors of the slots whose env failed (their workers are retired if dead)."""
            t0 = time.perf_counter()
            try:
                results = dict(zip(slots, zip(*call(), strict=True), strict=True))
                failed: dict[int, str] = {}
            except VectorEnvError as err:
                if not tolerate_failures:
                    raise
                results, failed = dict(err.partial), _failures(err)
                retired.update(dead())
            timings["env_s"] += time.perf_counter() - t0
            return results, failed

        def wants_more(slot: int) -> bool:
            if episode_budget is not None:
                return next_episode < episode_budget
            return slot_played[slot] < (rounds or 0)

        def start(slots: list[int]) -> None:
            """Begin the next episodes on ``slots`` (one reset call for all of them)."""
            nonlocal next_episode
            numbers = list(range(next_episode, next_episode + len(slots)))
            next_episode += len(slots)
            plan = [start_of(k) for k in numbers]
            seeds = [
                p.seed if p.seed is not None else episode_seed(seed, k)
                for p, k in zip(plan, numbers, strict=True)
            ]
            options = [p.reset_options() for p in plan]
            results, failed = attempt(
                lambda: self.vector_env.reset(seeds=seeds, options=options, indices=slots), slots
            )
            lost: list[int] = []  # slots whose reset failed
            for i, k, p, s in zip(slots, numbers, plan, seeds, strict=True):
                if i not in results:
                    observer.on_end(k, "reset failed: " + failed.get(i, "no result"))
                    lost.append(i)
                    continue
                observation, info = results[i]
                slot_episode[i], slot_turns[i], observations[i] = k, 0, observation
                slot_cap[i] = min(self.max_turns, p.max_turns or self.max_turns)
                observer.on_start(k, EpisodeBegin(i, p, s, observation, info))
            if lost and episode_budget is not None:  # a live env takes the next episode
                refill_slots(lost)

        def refill_slots(freed: list[int]) -> None:
            """Slots whose episode ended start the next one while the budget wants more."""
            refill = [i for i in freed if i not in retired and wants_more(i)]
            if episode_budget is not None:
                refill = refill[: max(0, episode_budget - next_episode)]
            if refill:
                start(refill)

        start([i for i in range(n) if wants_more(i)][: episode_budget or n])
        calls = 0
        while True:
            if (
                episode_budget is not None
                and next_episode < episode_budget
                and all(i in retired for i in range(n))
            ):
                for k in range(next_episode, episode_budget):  # nothing left to play them on
                    observer.on_end(k, "no live environment left")
                next_episode = episode_budget
            active = [i for i in range(n) if slot_episode[i] is not None and i not in retired]
            if not active:
                break
            episodes = [slot_episode[i] for i in active]
            call_seed = generate_seed(seed, calls, self.params.seed)
            calls += 1
            actions: list[Any] = [None] * len(active)
            generations: list[Generation | None] = [None] * len(active)
            if self.policy is not None:
                # One seed per call; the backend gives batch item j the seed + j.
                params = self.params.model_copy(update={"seed": call_seed})
                t0 = time.perf_counter()
                try:
                    generated = self.policy.generate([observations[i] for i in active], params)
                except Exception as exc:  # e.g. a dead API: the envs are fine
                    if not tolerate_failures:
                        raise
                    for i, k in zip(active, episodes, strict=True):
                        slot_episode[i] = None
                        observer.on_end(k, f"generate failed: {summarise_error(exc)}")
                    refill_slots(active)
                    continue
                timings["generate_s"] += time.perf_counter() - t0
                if len(generated) != len(active):
                    raise RuntimeError(
                        f"the policy returned {len(generated)} answers for {len(active)} frames"
                    )
                generations = list(generated)
                actions = [g.text for g in generated]
            if on_generate is not None:
                on_generate(episodes, call_seed)  # type: ignore[arg-type]

            results, failed = attempt(
                lambda: self.vector_env.step(actions, indices=active),  # noqa: B023
                active,
            )

            ended: list[int] = []
            for j, i in enumerate(active):
                k = slot_episode[i]
                assert k is not None
                if i not in results:
                    slot_episode[i] = None
                    observer.on_end(k, failed.get(i, "env gave no result"))
                    ended.append(i)  # a live env takes the next episode (a dead one is retired)
                    continue
                next_obs, reward, terminated, truncated, info = results[i]
                slot_turns[i] += 1
                slot_played[i] += 1
                env_done = bool(terminated) or bool(truncated)
                cut = not env_done and (
                    slot_turns[i] >= slot_cap[i]
                    or (rounds is not None and slot_played[i] >= rounds)
                )
                outcome = TurnOutcome(
                    observation=observations[i],  # type: ignore[arg-type]
                    generation=generations[j],
                    reward=float(reward),
                    terminated=bool(terminated),
                    truncated=bool(truncated),
                    cut=cut,
                    info=info,
                    next_observation=next_obs,
                )
                observer.on_turn(k, outcome)
                observations[i] = next_obs
                if outcome.ends_episode:
                    slot_episode[i] = None
                    observations[i] = None
                    observer.on_end(k, None)
                    ended.append(i)
            refill_slots(ended)
        timings["total_s"] = time.perf_counter() - started
        return timings

    def collect(
        self,
        budget: Budget | int,
        *,
        seed: int = 0,
        starts: Starts = None,
        levels: Sequence[str] | None = None,
    ) -> tuple[TurnBatch, RolloutMetrics]:
        """The rollout as a :class:`TurnBatch`, episodes in start order (an int budget means
        that many episodes; ``levels`` is a shorthand for one start per episode)."""
        if isinstance(budget, int):
            budget = EpisodeBudget(budget)
        if levels is not None:
            if starts is not None:
                raise ValueError("give starts or levels, not both")
            if isinstance(budget, EpisodeBudget) and len(levels) != budget.episodes:
                raise ValueError(f"got {len(levels)} levels for {budget.episodes} trajectories")
            starts = [EpisodeStart(level=level) for level in levels]
        if self.policy is None or self.tokenizer is None or self.response_format is None:
            raise ValueError(
                "collecting a TurnBatch needs a policy, its tokenizer and a response format "
                "(for the thought/action token masks)"
            )
        builder = _BatchBuilder(self)
        timings = self.play(budget, builder, seed=seed, starts=starts)
        batch = builder.batch()
        timings["turns_per_s"] = len(batch) / timings["total_s"] if timings["total_s"] else 0.0
        return batch, RolloutMetrics.from_batch(batch, timings)


def _start_lookup(budget: Budget, starts: Starts) -> Callable[[int], EpisodeStart]:
    if starts is None:
        return lambda _k: EpisodeStart()
    if callable(starts):
        return starts
    plan = list(starts)
    if isinstance(budget, EpisodeBudget):
        if len(plan) != budget.episodes:
            raise ValueError(f"got {len(plan)} episode starts for {budget.episodes} episodes")
        return plan.__getitem__
    if not plan:
        raise ValueError("starts is empty")
    return lambda k: plan[k % len(plan)]  # a turn budget cycles through the starts


def _failures(err: VectorEnvError) -> dict[int, str]:
    lines = str(err).splitlines()
    out = {}
    for index in err.indices:
        mine = [line for line in lines if line.startswith(f"env {index} ")]
        out[index] = (mine[0] if mine else lines[0] if lines else "env failed")[:500]
    return out


def default_info_extras(before: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The facts every env reports (DESIGN's environment contract): progress, invalid answers,
    goal; a game's own facts come from its recipe's ``info_extras``."""
    max_progress = info.get("max_progress")
    return {
        "progress": float(info.get("progress", 0.0)),
        "max_progress": None if max_progress is None else float(max_progress),
        "invalid_action": bool(info.get("invalid_action", False)),
        "parse_error": info.get("parse_error"),
        "goal_reached": bool(info.get("goal_reached", False)),
    }


# -- the TurnBatch builder ----------------------------------------------------------------------


@dataclass
class _Episode:
    """One running episode's turns, buffered until it ends so the batch keeps it contiguous."""

    number: int
    seed: int
    level_id: str
    group: int | None
    sample: int | None
    outcomes: list[TurnOutcome] = field(default_factory=list)
    masks: list[tuple[list[bool], list[bool]]] = field(default_factory=list)
    extras: list[dict[str, Any]] = field(default_factory=list)
    stages: list[str | None] = field(default_factory=list)


class _BatchBuilder:
    """An :class:`EpisodeObserver` that turns the loop's events into a TurnBatch."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.running: dict[int, _Episode] = {}
        self.finished: dict[int, _Episode] = {}
        self.infos: dict[int, dict[str, Any]] = {}  # each episode's info before its next turn

    def on_start(self, episode: int, begin: EpisodeBegin) -> None:
        env_id = self.collector.vector_env.env_ids[begin.slot]
        level_id = _level_id(env_id, episode, begin.start, begin.info)
        self.running[episode] = _Episode(
            episode, begin.env_seed, level_id, begin.start.group, begin.start.sample
        )
        self.infos[episode] = begin.info

    def on_turn(self, episode: int, outcome: TurnOutcome) -> None:
        record = self.running[episode]
        generation = outcome.generation
        assert generation is not None
        n = len(generation.response_ids)
        if len(generation.logprobs) != n:
            raise RuntimeError(
                f"the policy gave {len(generation.logprobs)} log-probs for {n} response tokens; "
                "RL needs one behaviour log-prob per sampled token"
            )
        fmt = self.collector.response_format
        assert fmt is not None
        before = self.infos[episode]
        record.masks.append(
            fmt.token_masks(
                generation.text, generation.response_ids, self.collector.tokenizer, before
            )
        )
        record.extras.append(
            {
                "response": generation.text,
                "response_tokens": n,
                "finish_reason": generation.finish_reason,
                **self.collector.info_extras(before, outcome.info),
                "terminated": outcome.terminated,
                "truncated": outcome.truncated,  # by the env's own turn limit
                "cut": outcome.cut,  # by the collector: max_turns or the turn budget
                "env_seed": record.seed,
            }
        )
        record.outcomes.append(outcome)
        stage = before.get("stage")  # the stage of the step this turn answered
        record.stages.append(None if stage is None else str(stage))
        self.infos[episode] = outcome.info

    def on_end(self, episode: int, error: str | None) -> None:
        if error is not None:  # training does not tolerate failures; keep the message anyway
            raise RuntimeError(f"episode {episode} failed: {error}")
        self.finished[episode] = self.running.pop(episode)
        self.infos.pop(episode, None)

    def batch(self) -> TurnBatch:
        episodes = [self.finished[k] for k in sorted(self.finished)]
        columns: dict[str, list[Any]] = {
            k: []
            for k in (
                "episode_ids",
                "turn_index",
                "levels",
                "frames",
                "prompt_ids",
                "response_ids",
                "thought_mask",
                "action_mask",
                "behaviour_logprobs",
                "rewards",
                "terminated",
                "truncated",
                "extras",
                "groups",
                "samples",
                "stages",
                "next_observations",
            )
        }
        for episode in episodes:
            length = len(episode.outcomes)
            columns["episode_ids"] += [episode.number] * length
            columns["turn_index"] += list(range(length))
            columns["levels"] += [episode.level_id] * length
            columns["groups"] += [episode.group] * length
            columns["samples"] += [episode.sample] * length
            columns["stages"] += episode.stages
            columns["extras"] += episode.extras
            for t, (outcome, (thought, action)) in enumerate(
                zip(episode.outcomes, episode.masks, strict=True)
            ):
                g = outcome.generation
                assert g is not None
                last = t == length - 1
                columns["frames"].append(np.array(outcome.observation.image, dtype=np.uint8))
                columns["prompt_ids"].append(torch.tensor(g.prompt_ids, dtype=torch.long))
                columns["response_ids"].append(torch.tensor(g.response_ids, dtype=torch.long))
                columns["thought_mask"].append(torch.tensor(thought, dtype=torch.bool))
                columns["action_mask"].append(torch.tensor(action, dtype=torch.bool))
                columns["behaviour_logprobs"].append(torch.tensor(g.logprobs, dtype=torch.float32))
                columns["rewards"].append(outcome.reward)
                columns["terminated"].append(last and outcome.terminated)
                cut_here = last and not outcome.terminated
                columns["truncated"].append(cut_here)
                columns["next_observations"].append(outcome.next_observation if cut_here else None)
        groups, samples, stages = (
            columns.pop("groups"),
            columns.pop("samples"),
            columns.pop("stages"),
        )
        return TurnBatch(
            episode_ids=torch.tensor(columns["episode_ids"], dtype=torch.long),
            turn_index=torch.tensor(columns["turn_index"], dtype=torch.long),
            levels=columns["levels"],
            frames=columns["frames"],
            prompt_ids=columns["prompt_ids"],
            response_ids=columns["response_ids"],
            thought_mask=columns["thought_mask"],
            action_mask=columns["action_mask"],
            behaviour_logprobs=columns["behaviour_logprobs"],
            rewards=torch.tensor(columns["rewards"], dtype=torch.float32),
            terminated=torch.tensor(columns["terminated"], dtype=torch.bool),
            truncated=torch.tensor(columns["truncated"], dtype=torch.bool),
            group_id=None
            if any(g is None for g in groups)
            else torch.tensor(groups, dtype=torch.long),
            sample_index=None
            if not samples or any(s is None for s in samples)
            else torch.tensor(samples, dtype=torch.long),
            stage=None if not stages or any(s is None for s in stages) else stages,
            extras=columns["extras"],
            next_observations=columns["next_observations"],
        )


def _level_id(env_id: str, episode: int, start: EpisodeStart, info: dict[str, Any]) -> str:
    """The env id of the level an episode plays, e.g. ``"odland-1-1"``."""
    game, level = info.get("game"), info.get("level")
    wanted = None if start.level is None else split_level(start.level)
    if wanted is not None and wanted[0] is not None and game is not None and game != wanted[0]:
        raise ValueError(
            f"episode {episode} plays {game}, but a level of {wanted[0]} was requested: "
            f"{start.level}"
        )
    if game is not None and level is not None:
        return f"{game}-{level}"
    return env_id  # a non-Game Boy env: its registry id
