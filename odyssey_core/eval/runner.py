"""Run evaluation episodes in parallel and collect what the report needs.

:func:`run_jobs` plays a list of :class:`EpisodeJob` on a vector env (one subprocess per env
by default). Every free env slot takes the next job; each loop turn steps all running envs
at once. A policy agent answers all of them with one batched ``generate``; the expert and the
random agent act inside their env's worker (see :class:`~odyssey_core.eval.agents.AgentDrivenEnv`).

Outcomes are recorded as they are, never guessed:

* success means the goal was reached; an episode cut by the turn limit is ``truncated``,
  not a success;
* an env that raises or whose worker dies (``VectorEnvError``), or a failing ``generate``,
  makes the episode an *error*, reported apart and left out of the progress statistics
  (zero progress would be a lie about the agent). A dead worker's slot is retired; when no
  slot is left, a fresh vector env takes over.

Seeds: episode ``k`` of a call gets env seed ``derive_seed(seed, 1, k)``; the ``t``-th batched
``generate`` call samples with seed ``derive_seed(seed, 2, t)``. Both are recorded.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from odyssey_core.envs.base import Observation
from odyssey_core.envs.vector import SubprocVectorEnv, SyncVectorEnv, VectorEnvError
from odyssey_core.eval.agents import AgentSpec, PolicyAgent, agent_driven_env_fn
from odyssey_core.eval.stats import LevelStats, TableStats, level_stats, table_from_cells
from odyssey_core.eval.suites import (
    CuratedState,
    EvalSuite,
    SuiteSection,
    load_curated_states,
    make_curated_states,
    section_skip_reason,
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

_ENV_STREAM, _GENERATE_STREAM = 1, 2


def derive_seed(*words: int) -> int:
    """A 32-bit seed from integers; SeedSequence keeps nearby inputs unrelated."""
    entropy = [int(w) % 2**64 for w in words]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0])


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
    policy = agent if isinstance(agent, PolicyAgent) else None
    label = agent.label
    slot_fn = env_fn if policy else agent_driven_env_fn(env_fn, agent.name, agent.kwargs)
    records: list[EpisodeRecord | None] = [None] * len(jobs)
    pending = deque(range(len(jobs)))
    num_slots = max(1, min(workers, len(jobs)))
    bar = tqdm(total=len(jobs), desc=f"{label}", unit="ep", disable=not show_progress)
    vec: Any = None
    slots: list[int | None] = []  # the job each slot plays
    retired: set[int] = set()
    observations: dict[int, Observation] = {}
    generate_calls = 0

    def finish(job_index: int, error: str | None = None) -> None:
        record = records[job_index]
        assert record is not None
        if error is not None and record.error is None:
            record.error = error
        bar.update(1)
        if on_episode:
            on_episode(record)

    def usable() -> list[int]:
        dead = set(getattr(vec, "dead_workers", {}) or {})
        return [i for i in range(len(slots)) if i not in retired and i not in dead]

    def retire_dead() -> None:
        for i in getattr(vec, "dead_workers", {}) or {}:
            retired.add(i)

    try:
        while pending or any(s is not None for s in slots):
            if vec is None or not usable():
                if vec is not None:
                    vec.close()
                vec = _vector(vector, [slot_fn] * num_slots, timeout)
                slots, retired = [None] * num_slots, set()
            # 1. start jobs on free slots
            free = [i for i in usable() if slots[i] is None]
            starting: list[tuple[int, int]] = []
            for i in free:
                if not pending:
                    break
                starting.append((i, pending.popleft()))
            if starting:
                _start(vec, starting, jobs, records, slots, observations, label, seed)
                for i, job_index in starting:
                    if slots[i] is None:  # its reset failed
                        finish(job_index)
                retire_dead()
            running = [i for i in usable() if slots[i] is not None]
            if not running:
                continue
            # 2. choose actions
            actions: list[Any]
            generations: list[Any] = [None] * len(running)
            if policy is not None:
                gen_seed = derive_seed(seed, _GENERATE_STREAM, generate_calls)
                generate_calls += 1
                try:
                    generations = policy.act_batch([observations[i] for i in running], gen_seed)
                except Exception as exc:  # e.g. an API failure: the envs are fine
                    for i in running:
                        job_index = slots[i]
                        slots[i] = None
                        finish(job_index, f"generate failed: {type(exc).__name__}: {exc}")
                    continue
                for i in running:
                    records[slots[i]].generate_seeds.append(gen_seed)  # type: ignore[union-attr]
                actions = [g.text for g in generations]
            else:
                actions = [None] * len(running)
            # 3. step
            try:
                stepped = _transpose(vec.step(actions, indices=running))
                results = dict(zip(running, stepped, strict=True))
                failed: dict[int, str] = {}
            except VectorEnvError as err:
                results = dict(err.partial)
                failed = {i: _error_text(err, i) for i in err.indices}
                retire_dead()
            for k, i in enumerate(running):
                job_index = slots[i]
                assert job_index is not None
                record = records[job_index]
                assert record is not None
                if i in failed or i not in results:
                    slots[i] = None
                    finish(job_index, failed.get(i, "env gave no result"))
                    continue
                done = _record_turn(
                    record, jobs[job_index], observations[i], generations[k], results[i]
                )
                observations[i] = results[i][0]
                if done:
                    slots[i] = None
                    finish(job_index)
    finally:
        bar.close()
        if vec is not None:
            vec.close()
    return [r for r in records if r is not None]


def _transpose(step: tuple) -> list[tuple]:
    observations, rewards, terminated, truncated, infos = step
    return list(zip(observations, rewards, terminated, truncated, infos, strict=True))


def _error_text(err: VectorEnvError, index: int) -> str:
    lines = [line for line in str(err).splitlines() if line.startswith(f"env {index} ")]
    return (lines[0] if lines else str(err).splitlines()[0])[:500]


def _start(
    vec: Any,
    starting: list[tuple[int, int]],
    jobs: Sequence[EpisodeJob],
    records: list[EpisodeRecord | None],
    slots: list[int | None],
    observations: dict[int, Observation],
    label: str,
    seed: int,
) -> None:
    """Reset the chosen slots for their jobs; a failed reset makes that job an error."""
    indices = [i for i, _ in starting]
    seeds, options = [], []
    for i, job_index in starting:
        job = jobs[job_index]
        env_seed = derive_seed(seed, _ENV_STREAM, job_index)
        seeds.append(env_seed)
        opts: dict[str, Any] = {"level": job.level}
        if job.state is not None:
            opts["state"] = job.state.state
        options.append(opts)
        records[job_index] = EpisodeRecord(
            section=job.section,
            agent=label,
            env_id=job.state.env_id if job.state else job.level,
            level=job.level,
            run=job.run,
            seed=env_seed,
            start=job.start,
        )
        slots[i] = job_index
    try:
        reset = vec.reset(seeds=seeds, options=options, indices=indices)
        results = dict(zip(indices, zip(*reset, strict=True), strict=True))
        failed: dict[int, str] = {}
    except VectorEnvError as err:
        results = dict(err.partial)
        failed = {i: _error_text(err, i) for i in err.indices}
    for i, job_index in starting:
        record = records[job_index]
        assert record is not None
        if i in failed or i not in results:
            slots[i] = None
            record.error = "reset failed: " + failed.get(i, "no result")
            continue
        observation, info = results[i]
        observations[i] = observation
        record.env_id = f"{info['game']}-{info['level']}" if "game" in info else vec.env_ids[i]
        record.start_progress = record.progress = float(info.get("progress", 0.0))
        record.max_progress = info.get("max_progress")
        if jobs[job_index].record_video:
            record.frames.append(observation.image)


def _record_turn(
    record: EpisodeRecord,
    job: EpisodeJob,
    seen: Observation,
    generation: Any,
    result: tuple,
) -> bool:
    """Add one step's outcome to ``record``; True when the episode has ended."""
    observation, _, terminated, truncated, info = result
    record.turns += 1
    record.progress = float(info.get("progress", record.progress))
    record.invalid_actions += int(bool(info.get("invalid_action")))
    turn = TurnRecord(
        turn=record.turns,
        frame_hash=frame_hash(seen.image),
        buttons=tuple(info.get("buttons", ())),
        progress=record.progress,
    )
    if generation is not None:
        parsed = generation.parsed
        turn.text = generation.text
        turn.perception, turn.reasoning = parsed.perception, parsed.reasoning
        turn.answer, turn.valid = parsed.answer_text, parsed.valid
    record.turn_log.append(turn)
    if job.record_video:
        record.frames.append(observation.image)
    if terminated or truncated:
        # success is the goal only: a run cut by the turn limit is truncated, never a success
        record.goal_reached = bool(info.get("goal_reached")) and not truncated
        record.life_lost = bool(info.get("life_lost"))
        record.truncated = bool(truncated)
        return True
    return False


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
) -> list[EpisodeJob]:
    """The episodes of a section; curated sections need their ``states`` by level."""
    jobs: list[EpisodeJob] = []
    videos_left = suite.videos
    for level in section.levels:
        if section.kind == "from_start":
            starts: list[CuratedState | None] = [None] * (runs or suite.section_runs(section))
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
    """Every agent on every section of ``suite``; ``runs`` overrides from-start runs."""
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
        jobs = section_jobs(suite, section, runs=runs, states=states)
        for agent in agents:
            if isinstance(agent, PolicyAgent):
                agent.set_game(game)
            result.records[agent.label] = run_jobs(
                jobs,
                _env_fn(suite, section),
                agent,
                seed=derive_seed(suite.seed, len(sections)),
                workers=suite.workers,
                vector=vector,
                timeout=timeout,
                show_progress=show_progress,
            )
    return EvalResults(suite, labels, sections, seconds=time.perf_counter() - started)
