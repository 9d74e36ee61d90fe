"""Run evaluation episodes in parallel and collect what the report needs.

:func:`run_jobs` plays a list of :class:`EpisodeJob` on a vector env (one subprocess per env
by default) with the project's one rollout loop, :meth:`Collector.play
<odyssey_core.rollout.collector.Collector.play>`: every free env slot takes the next job, each
loop turn steps all running envs at once, and a policy agent answers all of them with one
batched ``generate``; the expert and the random agent act inside their env's worker (see
:class:`~odyssey_core.eval.agents.AgentDrivenEnv`). :class:`_JobRecorder` turns the loop's
events into one :class:`EpisodeRecord` per job.

Outcomes are recorded as they are, never guessed:

* success means the goal was reached; an episode cut by the turn limit is ``truncated``,
  not a success;
* an env that raises or whose worker dies (``VectorEnvError``), or a failing ``generate``,
  makes the episode an *error*, reported apart and left out of the progress statistics
  (zero progress would be a lie about the agent). A dead worker's slot is retired; jobs the
  loop could not start (no live slot left) are played in a new round, on a fresh vector env.

Seeds: job ``k`` of a call gets env seed ``derive_seed(seed, 1, k)`` whatever round plays it;
the ``t``-th batched ``generate`` call of the first round samples with the collector's
:func:`~odyssey_core.rollout.collector.generate_seed` ``(seed, t, params.seed)`` (a later round
uses ``derive_seed(seed, 3, round)`` in place of ``seed``). Both are recorded.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from odyssey_core.envs.vector import SubprocVectorEnv, SyncVectorEnv
from odyssey_core.eval.agents import AgentSpec, PolicyAgent, agent_driven_env_fn
from odyssey_core.eval.scenarios import check_scenario_state
from odyssey_core.eval.stats import LevelStats, TableStats, level_stats, table_from_cells
from odyssey_core.eval.suites import (
    CuratedState,
    EvalSuite,
    SuiteSection,
    load_curated_states,
    make_curated_states,
    section_skip_reason,
)
from odyssey_core.policy.base import GenerationParams
from odyssey_core.protocol.formats import RESPONSE_FORMATS
from odyssey_core.rollout.collector import (
    Collector,
    EpisodeBegin,
    EpisodeBudget,
    EpisodeStart,
    TurnOutcome,
    stream_seed,
)

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "EvalResults",
    "SectionResult",
    "TurnRecord",
    "derive_seed",
    "evaluate_suite",
    "frame_hash",
    "run_jobs",
]

_ENV_STREAM, _ROUND_STREAM = 1, 3  # tags of the runner's own seed streams
# The env's own turn limit ends eval episodes; the collector's cap only has to exist.
_NO_TURN_CAP = 2**31 - 1


#: a 32-bit seed from integers (SeedSequence keeps nearby inputs unrelated): the collector's
derive_seed = stream_seed


def frame_hash(image: np.ndarray) -> str:
    """A short content hash of a frame (collapse checks compare frames by it)."""
    return hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: a level from its start or from a saved state."""

    section: str
    level: str  # e.g. "1-2" (the game comes with the env factory)
    run: int
    state: CuratedState | None = None
    record_video: bool = False

    @property
    def start(self) -> str:
        return self.state.name if self.state is not None else "start"


@dataclass
class TurnRecord:
    """One turn: what the agent saw (by hash), answered and pressed."""

    turn: int
    frame_hash: str
    buttons: tuple[str, ...]
    progress: float
    text: str | None = None  # the model's raw answer (policy agents)
    perception: str | None = None
    reasoning: str | None = None
    answer: str | None = None
    valid: bool | None = None


@dataclass
class EpisodeRecord:
    section: str
    agent: str
    env_id: str
    level: str
    run: int
    seed: int
    start: str  # "start" or the curated state's name
    start_progress: float = 0.0  # absolute progress at the first observation
    progress: float = 0.0  # absolute progress (from the level start) at the end
    max_progress: float | None = None
    turns: int = 0
    goal_reached: bool = False
    life_lost: bool = False
    truncated: bool = False
    invalid_actions: int = 0
    error: str | None = None
    generate_seeds: list[int] = field(default_factory=list)
    turn_log: list[TurnRecord] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list, repr=False)  # video episodes only
    video: str | None = None

    @property
    def gained(self) -> float:
        """Progress made during the episode (differs from ``progress`` for curated states)."""
        return self.progress - self.start_progress

    @property
    def success(self) -> bool:
        return self.error is None and self.goal_reached

    @property
    def finished(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (no frames, no per-turn log)."""
        out = {k: v for k, v in asdict(self).items() if k not in {"frames", "turn_log"}}
        out.update(gained=self.gained, success=self.success)
        return out


EnvFn = Callable[[], Any]


def _vector(kind: str, fns: list[EnvFn], timeout: float | None) -> Any:
    if kind == "sync":
        return SyncVectorEnv(fns)
    return SubprocVectorEnv(fns, timeout=timeout)


def run_jobs(
    jobs: Sequence[EpisodeJob],
    env_fn: EnvFn,
    agent: AgentSpec | PolicyAgent,
    *,
    seed: int = 0,
    workers: int = 4,
    vector: str = "subproc",
    timeout: float | None = 600.0,
    show_progress: bool = False,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
) -> list[EpisodeRecord]:
    """Play every job with ``agent`` on envs from ``env_fn`` (a picklable zero-argument
    factory); returns one record per job, in job order."""
    if isinstance(agent, AgentSpec) and agent.kind != "env":
        raise ValueError("build policy agents with build_policy_agent() first")
    if not jobs:
        return []
    policy = agent if isinstance(agent, PolicyAgent) else None
    slot_fn = env_fn if policy else agent_driven_env_fn(env_fn, agent.name, agent.kwargs)
    bar = tqdm(total=len(jobs), desc=f"{agent.label}", unit="ep", disable=not show_progress)

    def finished(record: EpisodeRecord) -> None:
        bar.update(1)
        if on_episode:
            on_episode(record)

    recorder = _JobRecorder(jobs, agent.label, seed, finished)
    remaining = list(range(len(jobs)))
    vec: Any = None
    try:
        for round_ in itertools.count():
            if not remaining:
                break
            if vec is None or getattr(vec, "dead_workers", None):  # dead slots stay dead
                if vec is not None:
                    vec.close()
                vec = _vector(vector, [slot_fn] * max(1, min(workers, len(remaining))), timeout)
            recorder.begin_round(vec, remaining)
            Collector(
                vec,
                policy.backend if policy is not None else None,
                policy.params if policy is not None else GenerationParams(),
                max_turns=_NO_TURN_CAP,
            ).play(
                EpisodeBudget(len(remaining)),
                recorder,
                seed=seed if round_ == 0 else derive_seed(seed, _ROUND_STREAM, round_),
                starts=recorder.start,
                tolerate_failures=True,
                on_generate=recorder.on_generate if policy is not None else None,
            )
            # Jobs the round never started (every slot died, or a failed generate ended the
            # round early) go to the next round; each round starts at least one job.
            left = [j for j in remaining if recorder.records[j] is None]
            if len(left) == len(remaining):
                raise RuntimeError(f"the rollout loop started none of the {len(left)} jobs left")
            remaining = left
    finally:
        bar.close()
        if vec is not None:
            vec.close()
    return [r for r in recorder.records if r is not None]


class _JobRecorder:
    """An :class:`~odyssey_core.rollout.collector.EpisodeObserver` that keeps one
    :class:`EpisodeRecord` per job.

    Episode ``k`` of a round plays job ``order[k]``; its record is made when the collector asks
    for the episode's start (:meth:`start`), so a job whose record is still ``None`` after a
    round was never started and goes to the next round.
    """

    def __init__(
        self,
        jobs: Sequence[EpisodeJob],
        label: str,
        seed: int,
        finished: Callable[[EpisodeRecord], None],
    ) -> None:
        self.jobs, self.label, self.seed, self.finished = jobs, label, seed, finished
        self.records: list[EpisodeRecord | None] = [None] * len(jobs)
        self.vec: Any = None
        self.order: list[int] = []

    def begin_round(self, vec: Any, order: Sequence[int]) -> None:
        self.vec, self.order = vec, list(order)

    def _record(self, episode: int) -> EpisodeRecord:
        record = self.records[self.order[episode]]
        assert record is not None, f"episode {episode} was never started"
        return record

    def start(self, episode: int) -> EpisodeStart:
        job_index = self.order[episode]
        job = self.jobs[job_index]
        env_seed = derive_seed(self.seed, _ENV_STREAM, job_index)
        self.records[job_index] = EpisodeRecord(
            section=job.section,
            agent=self.label,
            env_id=job.state.env_id if job.state else job.level,
            level=job.level,
            run=job.run,
            seed=env_seed,
            start=job.start,
        )
        state = job.state.state if job.state is not None else None
        return EpisodeStart(level=job.level, state=state, seed=env_seed)

    def on_generate(self, episodes: list[int], seed: int) -> None:
        for episode in episodes:
            self._record(episode).generate_seeds.append(seed)

    def on_start(self, episode: int, begin: EpisodeBegin) -> None:
        record, info = self._record(episode), begin.info
        if "game" in info:
            record.env_id = f"{info['game']}-{info['level']}"
        else:
            record.env_id = self.vec.env_ids[begin.slot]
        record.start_progress = record.progress = float(info.get("progress", 0.0))
        record.max_progress = info.get("max_progress")
        if self.jobs[self.order[episode]].record_video:
            record.frames.append(begin.observation.image)

    def on_turn(self, episode: int, outcome: TurnOutcome) -> None:
        record = self._record(episode)
        info = outcome.info
        record.turns += 1
        record.progress = float(info.get("progress", record.progress))
        record.invalid_actions += int(bool(info.get("invalid_action")))
        turn = TurnRecord(
            turn=record.turns,
            frame_hash=frame_hash(outcome.observation.image),
            buttons=tuple(info.get("buttons", ())),
            progress=record.progress,
        )
        generation = outcome.generation
        if generation is not None:  # the eval suites play Game Boy games: the odysseus format
            parsed = RESPONSE_FORMATS.get("odysseus").parse(generation.text)
            turn.text = generation.text
            turn.perception, turn.reasoning = parsed.perception, parsed.reasoning
            turn.answer, turn.valid = parsed.answer_text, parsed.valid
        record.turn_log.append(turn)
        if self.jobs[self.order[episode]].record_video:
            record.frames.append(outcome.next_observation.image)
        if outcome.ends_episode:
            truncated = outcome.truncated or outcome.cut
            # success is the goal only: a run cut by the turn limit is truncated, never a success
            record.goal_reached = bool(info.get("goal_reached")) and not truncated
            record.life_lost = bool(info.get("life_lost"))
            record.truncated = truncated

    def on_end(self, episode: int, error: str | None) -> None:
        record = self.records[self.order[episode]]
        if record is None:  # never started (no live slot left): the next round plays it
            return
        if error is not None and record.error is None:
            record.error = error
        self.finished(record)


# -- suites ------------------------------------------------------------------------------------


@dataclass
class SectionResult:
    """One section of a suite: its records per agent, or why it was skipped."""

    section: SuiteSection
    game: str
    records: dict[str, list[EpisodeRecord]] = field(default_factory=dict)
    skipped: str | None = None
    base_agent: str | None = None

    def table(self) -> TableStats:
        levels = [f"{self.game}-{lv}" for lv in self.section.levels]
        cells: dict[str, dict[str, LevelStats]] = {}
        for agent, records in self.records.items():
            cells[agent] = {}
            for level, env_id in zip(self.section.levels, levels, strict=True):
                mine = [r for r in records if r.level == level]
                done = [r for r in mine if r.finished]
                cells[agent][env_id] = level_stats(
                    env_id,
                    [r.progress for r in done],
                    gained=[r.gained for r in done],
                    errors=len(mine) - len(done),
                    successes=sum(r.success for r in done),
                    truncated=sum(r.truncated for r in done),
                    deaths=sum(r.life_lost for r in done),
                    max_progress=next((r.max_progress for r in mine if r.max_progress), None),
                )
        title = f"{self.section.name} ({self.section.kind}, {self.game}, {self.section.split})"
        return table_from_cells(
            title, cells, levels=levels, base_agent=self.base_agent, note=self.skipped or ""
        )


@dataclass
class EvalResults:
    suite: EvalSuite
    agents: list[str]
    sections: list[SectionResult]
    seconds: float = 0.0

    def tables(self) -> list[TableStats]:
        return [s.table() for s in self.sections if s.skipped is None]

    def metrics(self) -> dict[str, float]:
        """Flat metrics for loggers: ``eval/<section>/<agent>/<level>/mean`` ..."""
        flat: dict[str, float] = {}
        for section in self.sections:
            if section.skipped is None:
                flat.update(section.table().metrics(prefix=f"eval/{section.section.name}/"))
        flat["eval/seconds"] = self.seconds
        return {k: v for k, v in flat.items() if not (isinstance(v, float) and math.isnan(v))}

    def records(self) -> list[EpisodeRecord]:
        return [r for s in self.sections for rs in s.records.values() for r in rs]


def _env_fn(suite: EvalSuite, section: SuiteSection) -> EnvFn:
    from odyssey_core.envs.registry import make_env

    game = suite.section_game(section)
    return functools.partial(
        make_env,
        f"{game}-{section.levels[0]}",
        **{**suite.env_overrides, "max_turns": suite.section_max_turns(section)},
    )


def section_jobs(
    suite: EvalSuite,
    section: SuiteSection,
    *,
    runs: int | None = None,
    states: dict[str, list[CuratedState]] | None = None,
    api: bool = False,
) -> list[EpisodeJob]:
    """The episodes of a section; curated sections need their ``states`` by level. ``runs``
    overrides the suite's from-start episodes per level (``api``: its API-model count)."""
    jobs: list[EpisodeJob] = []
    videos_left = suite.videos
    for level in section.levels:
        if section.kind == "from_start":
            count = runs or suite.section_runs(section, api=api)
            starts: list[CuratedState | None] = [None] * count
        else:
            level_states = (states or {}).get(level) or []
            if not level_states:
                raise ValueError(f"section {section.name}: no curated states for level {level}")
            starts = [s for s in level_states for _ in range(section.states.runs_per_state)]
        for run, state in enumerate(starts):
            # one video per level until the section's budget is spent
            video = run == 0 and videos_left > 0
            videos_left -= int(video)
            jobs.append(EpisodeJob(section.name, level, run, state, record_video=video))
    return jobs


def curated_states_for(
    suite: EvalSuite, section: SuiteSection, cache_dir: Path | None = None
) -> dict[str, list[CuratedState]]:
    """Load a curated section's states from files, or make them with the expert."""
    game = suite.section_game(section)
    config = section.states
    out: dict[str, list[CuratedState]] = {}
    for level in section.levels:
        if config.states_dir is not None:
            states = load_curated_states(config.states_dir, f"{game}-{level}")[: config.count]
            if level in config.scenarios:  # each state is the scenario, before any episode
                for state in states:
                    check_scenario_state(
                        config.scenarios[level],
                        Path(config.states_dir) / state.env_id / f"{state.name}.state",
                        rom_path=suite.env_overrides.get("rom_path"),
                    )
        else:
            states = make_curated_states(
                level,
                config.count,
                game=game,
                expert_turns=config.expert_turns,
                expert_max_nodes=config.expert_max_nodes,
                env_overrides=suite.env_overrides,
                seed=suite.seed,
            )
        if len(states) < config.count and not config.allow_fewer:
            raise ValueError(f"{game}-{level}: {len(states)} curated states, need {config.count}")
        out[level] = states
    if cache_dir is not None:
        from odyssey_core.eval.suites import save_curated_states

        save_curated_states([s for group in out.values() for s in group], cache_dir)
    return out


def evaluate_suite(
    suite: EvalSuite,
    agents: Sequence[AgentSpec | PolicyAgent],
    *,
    runs: int | None = None,
    vector: str = "subproc",
    timeout: float | None = 600.0,
    states_cache: Path | None = None,
    show_progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> EvalResults:
    """Every agent on every section of ``suite``: open models and the env agents play the
    suite's from-start ``runs`` per level, API models its ``api_runs``; ``runs`` overrides
    both."""
    started = time.perf_counter()
    labels = [a.label for a in agents]
    sections: list[SectionResult] = []
    for section in suite.sections:
        game = suite.section_game(section)
        base = suite.section_base(section)
        result = SectionResult(section, game, base_agent=base if base in labels else None)
        sections.append(result)
        result.skipped = section_skip_reason(game, suite.env_overrides)
        if result.skipped:
            if log:
                log(f"{section.name}: {result.skipped}")
            continue
        states = None
        if section.kind == "curated":
            cache = states_cache / section.name if states_cache is not None else None
            states = curated_states_for(suite, section, cache)
        jobs = {
            api: section_jobs(suite, section, runs=runs, states=states, api=api)
            for api in (False, True)
        }
        for agent in agents:
            if isinstance(agent, PolicyAgent):
                agent.set_game(game)
            result.records[agent.label] = run_jobs(
                jobs[agent.api],
                _env_fn(suite, section),
                agent,
                seed=derive_seed(suite.seed, len(sections)),
                workers=suite.workers,
                vector=vector,
                timeout=timeout,
                show_progress=show_progress,
            )
    return EvalResults(suite, labels, sections, seconds=time.perf_counter() - started)
