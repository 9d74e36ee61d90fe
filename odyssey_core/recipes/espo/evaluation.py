"""Evaluating a personalized GUI agent, on the one collector.

* Offline (the paper's protocol, teacher-forced): every step of every episode of a split is
  shown as the demonstration saw it (the screen and the demonstrated actions so far), the
  agent answers once, and the answer is scored against the demonstrated step: EleAcc, Op F1,
  Step SR and RecAcc (:mod:`~odyssey_core.recipes.espo.metrics`).
* Online: the agent's own actions drive the app from the episode's first screen; it decides
  when the pool is found, then says Yes / No to each candidate the app lists; the episode
  succeeds when its Yes set equals the user's.

Both play :class:`~odyssey_core.envs.persona.env.PersonaEnv` through
:class:`~odyssey_core.rollout.collector.Collector` with an observer of their own.

The best achievable RecAcc (:func:`best_achievable_rec_acc`, beside the trivial baselines in
every report): the RecAcc of the best agent that knows what an episode shows about a
candidate, namely the pool app, the preference the intent names, the candidate's rank by that
preference among the listed pool, and the pool's size. Recommend steps alike in all four form
a class; the best such agent answers each class's majority label, so the ceiling is
``sum over classes of max(#Yes, #No) / #recommend steps``. Where the labels follow from that
information (every generated user accepts the :data:`~odyssey_core.envs.persona.users.TOP_M`
best) each class holds one label and the ceiling is 1; a hidden per-user draw (top 1 for some
users, top 2 for others) mixes the labels of a class and lowers it. Episodes without a
scenario (loaded SmartSpot records: no catalogue to rank by) are left out and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odyssey_core.envs.persona.app import PersonaApp
from odyssey_core.envs.persona.env import PersonaEnv
from odyssey_core.envs.persona.episode import EpisodeRecord
from odyssey_core.envs.persona.users import User
from odyssey_core.envs.vector import SyncVectorEnv
from odyssey_core.policy.base import GenerationParams
from odyssey_core.recipes.espo.metrics import StepOutcome, outcome_from_response
from odyssey_core.rollout.collector import (
    Collector,
    EpisodeBegin,
    EpisodeBudget,
    EpisodeStart,
    TurnOutcome,
)

__all__ = [
    "OnlineResult",
    "RecAccCeiling",
    "best_achievable_rec_acc",
    "evaluate_offline",
    "evaluate_online",
]


@dataclass(frozen=True)
class RecAccCeiling:
    """The best achievable RecAcc over the recommend steps that can be judged.

    ``value`` is None when no step can be; ``judged`` counts the recommend steps of episodes
    with a scenario, ``steps`` every recommend step, ``classes`` the information classes and
    ``mixed`` the judged steps in classes that hold both labels."""

    value: float | None
    judged: int
    steps: int
    classes: int
    mixed: int

    def summary(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "judged_steps": self.judged,
            "recommend_steps": self.steps,
            "classes": self.classes,
            "mixed_steps": self.mixed,
        }

    def line(self) -> str:
        """One sentence for a report."""
        if self.value is None:
            return (
                f"Best achievable RecAcc: not computable ({self.steps} recommend steps, none "
                "with a scenario to rank the pool by)."
            )
        left = self.steps - self.judged
        return (
            f"Best achievable RecAcc: {100 * self.value:.1f}% over {self.judged} recommend "
            f"steps ({self.mixed} in classes holding both labels"
            + (f"; {left} steps without a scenario left out" if left else "")
            + "): the ceiling of an agent that knows the preference the intent names and "
            "each candidate's rank in the listed pool."
        )


def best_achievable_rec_acc(episodes: Iterable[EpisodeRecord]) -> RecAccCeiling:
    """The RecAcc ceiling of the module docstring over every recommend step of ``episodes``."""
    classes: dict[tuple[str, str, int, int], Counter[str]] = {}
    steps = 0
    for episode in episodes:
        recommend = episode.stage_steps("recommend")
        steps += len(recommend)
        if not episode.scenario or not recommend:
            continue
        user = User.from_json(episode.scenario["user"])
        app = PersonaApp(episode.scenario, episode.width, episode.height)
        preference = user.preference(user.pool_app)
        pool = [app.item(c) for c in episode.candidates]
        rank = {item.id: k for k, item in enumerate(preference.rank(pool))}
        for step in recommend:
            key = (user.pool_app, preference.phrase, rank[step.candidate], len(pool))
            classes.setdefault(key, Counter())[step.gold.text] += 1
    judged = sum(sum(c.values()) for c in classes.values())
    best = sum(max(c.values()) for c in classes.values())
    mixed = sum(sum(c.values()) for c in classes.values() if len(c) > 1)
    value = best / judged if judged else None
    return RecAccCeiling(value, judged, steps, len(classes), mixed)


def _starts(episodes: list[EpisodeRecord]) -> list[EpisodeStart]:
    return [EpisodeStart(options={"episode": e.episode_id}) for e in episodes]


@dataclass
class _OfflineObserver:
    """Scores each teacher-forced answer against the step it answered."""

    episodes: list[EpisodeRecord]
    outcomes: list[StepOutcome] = field(default_factory=list)
    turns: dict[int, int] = field(default_factory=dict)

    def on_start(self, episode: int, begin: EpisodeBegin) -> None:
        self.turns[episode] = 0

    def on_turn(self, episode: int, outcome: TurnOutcome) -> None:
        record = self.episodes[episode]
        step = record.steps[self.turns[episode]]
        self.turns[episode] += 1
        text = outcome.generation.text if outcome.generation is not None else ""
        self.outcomes.append(outcome_from_response(step, record, text))

    def on_end(self, episode: int, error: str | None) -> None:
        if error is not None:
            raise RuntimeError(
                f"offline evaluation of {self.episodes[episode].episode_id}: {error}"
            )


def _play(
    policy: Any,
    dataset: Path,
    episodes: list[EpisodeRecord],
    observer: Any,
    *,
    split: str,
    mode: str,
    n_envs: int,
    generation: GenerationParams | None,
    max_turns: int,
    seed: int,
    env_kwargs: dict[str, Any],
) -> None:
    """Play each of ``episodes`` once, ``n_envs`` side by side, reporting to ``observer``
    (greedy decoding unless ``generation`` says otherwise)."""

    def factory() -> PersonaEnv:
        return PersonaEnv(dataset=dataset, split=split, mode=mode, **env_kwargs)

    collector = Collector(
        SyncVectorEnv([factory] * min(n_envs, len(episodes))),
        policy,
        generation or GenerationParams(temperature=0.0, max_new_tokens=160),
        max_turns=max_turns,
    )
    try:
        collector.play(
            EpisodeBudget(len(episodes)),
            observer,
            seed=seed,
            starts=_starts(episodes),
            tolerate_failures=mode == "online",  # a live episode may fail alone
        )
    finally:
        collector.vector_env.close()


def evaluate_offline(
    policy: Any,
    dataset: Path,
    episodes: list[EpisodeRecord],
    *,
    split: str = "test",
    generation: GenerationParams | None = None,
    n_envs: int = 4,
    seed: int = 0,
    channel: str | None = None,
    history_window: int | None = None,
) -> list[StepOutcome]:
    """One answer per demonstrated step of ``episodes`` (all of ``split``), teacher-forced."""
    if not episodes:
        raise ValueError(f"no {split} episodes to evaluate")
    observer = _OfflineObserver(list(episodes))
    _play(
        policy,
        dataset,
        list(episodes),
        observer,
        split=split,
        mode="replay",
        n_envs=n_envs,
        generation=generation,
        max_turns=max(len(e.steps) for e in episodes),
        seed=seed,
        env_kwargs={"channel": channel, "history_window": history_window},
    )
    return observer.outcomes


@dataclass(frozen=True)
class OnlineResult:
    """One online episode: the agent's Yes set against the user's."""

    episode_id: str
    success: bool
    recommended: tuple[str, ...]
    yes_set: tuple[str, ...]
    turns: int
    error: str | None = None
    frames: tuple[Any, ...] = ()  # the screens, for the first ``record`` episodes only
    texts: tuple[str, ...] = ()  # the model's answer to each screen (same episodes)


@dataclass
class _OnlineObserver:
    episodes: list[EpisodeRecord]
    record: int = 0  # how many episodes keep their screens and answers (for videos)
    last_info: dict[int, dict[str, Any]] = field(default_factory=dict)
    turns: dict[int, int] = field(default_factory=dict)
    frames: dict[int, list[Any]] = field(default_factory=dict)
    texts: dict[int, list[str]] = field(default_factory=dict)
    results: dict[int, OnlineResult] = field(default_factory=dict)

    def on_start(self, episode: int, begin: EpisodeBegin) -> None:
        self.turns[episode] = 0
        self.last_info[episode] = begin.info
        if episode < self.record:
            self.frames[episode], self.texts[episode] = [begin.observation.image], []

    def on_turn(self, episode: int, outcome: TurnOutcome) -> None:
        self.turns[episode] += 1
        self.last_info[episode] = outcome.info
        if episode in self.frames:
            generation = outcome.generation
            self.texts[episode].append(generation.text if generation is not None else "")
            self.frames[episode].append(outcome.next_observation.image)

    def on_end(self, episode: int, error: str | None) -> None:
        info = self.last_info.get(episode, {})
        self.results[episode] = OnlineResult(
            episode_id=self.episodes[episode].episode_id,
            success=error is None and bool(info.get("success", False)),
            recommended=tuple(info.get("recommended", ())),
            yes_set=tuple(info.get("yes_set", self.episodes[episode].yes_items)),
            turns=self.turns.get(episode, 0),
            error=error,
            frames=tuple(self.frames.get(episode, ())),
            texts=tuple(self.texts.get(episode, ())),
        )


def evaluate_online(
    policy: Any,
    dataset: Path,
    episodes: list[EpisodeRecord],
    *,
    split: str = "test",
    generation: GenerationParams | None = None,
    n_envs: int = 4,
    seed: int = 0,
    max_steps: int = 40,
    channel: str | None = None,
    history_window: int | None = None,
    record: int = 0,
) -> list[OnlineResult]:
    """Each episode played live from its first screen (episodes without a scenario, such as
    loaded SmartSpot records, cannot be played live and are left out); the first ``record``
    keep their screens and the model's answers, for videos."""
    live = [e for e in episodes if e.scenario]
    if not live:
        return []
    observer = _OnlineObserver(live, record)
    _play(
        policy,
        dataset,
        live,
        observer,
        split=split,
        mode="online",
        n_envs=n_envs,
        generation=generation,
        max_turns=max_steps,
        seed=seed,
        env_kwargs={"channel": channel, "history_window": history_window, "max_steps": max_steps},
    )
    return [observer.results[k] for k in sorted(observer.results)]
