"""The classical deep-RL baseline of the Odysseus paper (Appendix D): SB3 PPO with a CnnPolicy.

The environment is the very one the VLM agents play (same reward, same frame skip per turn);
only the interface changes: the agent sees the frame alone, preprocessed the usual way for the
NatureCNN (84x84 grayscale, four stacked frames; Appendix D names no preprocessing, so these
are SB3's Atari conventions and every one is a setting), and picks one of a fixed list of
button combinations:

* ``original``: the env's 22 legal actions (noop and every set of one or two buttons);
* ``engineered``: the 8 human-like combinations of Table 5, one of which presses three buttons.

Hyper-parameters come from Table 6 through ``configs/baselines/sb3_ppo.yaml``. The task is the
Section 4.2 comparison's (Appendix D: "the same task"): a preset's ``task`` names an Odysseus RL
preset (``configs/odysseus/compare.yaml``) whose levels, start states, turn settings, turn limit
and turn-sample budget this run takes over, so both play exactly the same episodes for the same
number of state-action pairs (:func:`task_settings`).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium
import numpy as np
from PIL import Image
from pydantic import Field, ValidationError, model_validator

from odyssey_core.config import (
    GameBoyEnvConfig,
    StrictModel,
    deep_merge,
    load_preset,
    preset_path,
    read_preset,
)
from odyssey_core.envs.base import Observation, TurnEnv
from odyssey_core.eval.scenarios import LevelStartSettings

ActionSetName = Literal["original", "engineered"]

#: Table 5: the engineered action space, in the paper's order.
ENGINEERED_ACTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("RIGHT", ("right",)),
    ("RIGHT_JUMP", ("right", "a")),
    ("RIGHT_SPRINT_JUMP", ("right", "a", "b")),
    ("LEFT", ("left",)),
    ("LEFT_JUMP", ("left", "a")),
    ("RIGHT_SPRINT", ("right", "b")),
    ("LEFT_SPRINT", ("left", "b")),
    ("JUMP", ("a",)),
)

SETTINGS_FILE = "settings.json"
MODEL_FILE = "model.zip"
MONITOR_FILE = "monitor.csv"
EVALUATIONS_FILE = "evaluations.csv"
#: per-episode columns written next to SB3's r, l, t in the monitor CSV
MONITOR_KEYWORDS = ("env_id", "progress", "best_progress", "goal_reached")


# -- settings ------------------------------------------------------------------------------------


class BaselineEnvSettings(StrictModel):
    """What the CNN agent sees and presses; the turn itself is ``game`` (the VLM env's)."""

    action_space: ActionSetName = Field(
        default="engineered", description="Table 5 (8 actions) or the env's 22 legal actions"
    )
    resize: int | None = Field(
        default=84, ge=36, description="square side of the resized frame; None keeps 144x160"
    )
    grayscale: bool = Field(default=True, description="luminance instead of RGB")
    frame_stack: int = Field(default=4, ge=1, description="frames stacked per observation")
    game: GameBoyEnvConfig = Field(
        default_factory=GameBoyEnvConfig,
        description="turn settings (hold frames, reward scale, max turns); game/level come "
        "from the level names",
    )


class PPOHyperParams(StrictModel):
    """Table 6; ``rollout_size`` is the table's "batch size" (samples per PPO update)."""

    rollout_size: int = Field(default=8192, ge=1, description="Table 6 batch size: n_steps*n_envs")
    minibatch_size: int = Field(default=1024, ge=1, description="Table 6 mini-batch size")
    n_epochs: int = Field(default=4, ge=1, description="Table 6 optimization epochs")
    learning_rate: float = Field(default=5e-5, gt=0, description="Table 6 (grid-searched)")
    gamma: float = Field(default=0.95, ge=0, le=1, description="Table 6 discount factor")
    gae_lambda: float = Field(default=0.95, ge=0, le=1, description="Table 6 GAE lambda")
    clip_range: float = Field(default=0.1, gt=0, description="Table 6 policy clip range")
    clip_range_vf: float | None = Field(default=0.1, description="Table 6 value clip range")
    max_grad_norm: float = Field(default=0.5, gt=0, description="Table 6 max gradient norm")
    target_kl: float | None = Field(default=0.03, description="Table 6 target KL")
    ent_coef: float = Field(default=0.0, ge=0, description="not in Table 6: SB3's default")
    vf_coef: float = Field(default=0.5, ge=0, description="not in Table 6: SB3's default")


class BaselineEvalSettings(StrictModel):
    """Appendix D: evaluate every 1e4 samples on 128 trajectories with different seeds."""

    every: int = Field(default=10_000, ge=0, description="samples between evaluations; 0: off")
    episodes: int = Field(default=128, ge=1, description="episodes per level and evaluation")
    n_envs: int = Field(default=8, ge=1, description="envs stepped together while evaluating")
    deterministic: bool = Field(
        default=False,
        description="argmax actions; the emulator is deterministic, so sampled actions are "
        "what makes the trajectories differ",
    )


class SB3PPOSettings(LevelStartSettings):
    """One baseline run: which levels, how long, the PPO hyper-parameters and evaluation."""

    levels: list[str] = Field(default_factory=lambda: ["odland-1-1"], min_length=1)
    total_timesteps: int = Field(
        default=2_000_000, ge=1, description="samples = turns (Appendix D: up to 2e6)"
    )
    task: Path | None = Field(
        default=None,
        description="the Odysseus RL preset whose task this run played (set by the loader)",
    )
    n_envs: int = Field(default=8, ge=1, description="parallel envs, spread over the levels")
    vec_env: Literal["auto", "subproc", "dummy"] = Field(
        default="auto", description="auto: subprocesses when n_envs > 1"
    )
    seed: int = 0
    device: str = "auto"
    torch_threads: int | None = Field(
        default=None,
        ge=1,
        description="intra-op threads for the learner (None: torch's default); 1 avoids "
        "OpenMP threads fighting the emulators on a small machine",
    )
    env: BaselineEnvSettings = Field(default_factory=BaselineEnvSettings)
    ppo: PPOHyperParams = Field(default_factory=PPOHyperParams)
    eval: BaselineEvalSettings = Field(default_factory=BaselineEvalSettings)

    @model_validator(mode="after")
    def _check_shapes(self) -> SB3PPOSettings:
        if self.ppo.rollout_size % self.n_envs:
            raise ValueError(
                f"ppo.rollout_size {self.ppo.rollout_size} must be a multiple of n_envs "
                f"{self.n_envs} (each env collects rollout_size / n_envs steps)"
            )
        if self.n_envs < len(self.levels):
            raise ValueError(f"n_envs {self.n_envs} < {len(self.levels)} levels: some never play")
        self.resolve_start_states(self.levels, section="")
        return self

    def check_start_states(self) -> None:
        """Each start state is the scenario ``start_scenarios`` names for its level (a
        :class:`~odyssey_core.eval.scenarios.ScenarioError` naming the fact that fails)."""
        self.check_start_scenarios(self.env.game.rom_path, section="")

    @property
    def n_steps(self) -> int:
        return self.ppo.rollout_size // self.n_envs


#: the keys :func:`task_settings` fills in (a preset with ``task`` must not set them itself)
TASK_KEYS = ("levels", "start_states", "start_scenarios", "total_timesteps", "env.game")


def task_settings(rl: Any) -> dict[str, Any]:
    """What the baseline takes over from an Odysseus RL run's settings (``RLTrainSettings``):
    its levels, start states and their scenarios, its env's turn (frame skip, reward, fallback)
    with the rollout's turn limit, and its turn-sample budget (``max_turn_samples``) as the
    number of samples, one per turn as in SB3."""
    game = rl.env.model_copy(update={"max_turns": rl.rollout.max_turns})
    out: dict[str, Any] = {
        "levels": list(rl.levels),
        "start_states": {level: str(path) for level, path in rl.rollout.start_states.items()},
        "start_scenarios": dict(rl.rollout.start_scenarios),
        "env": {"game": game.model_dump(mode="json")},
    }
    if rl.max_turn_samples is not None:
        out["total_timesteps"] = int(rl.max_turn_samples)
    return out


def _sets(data: dict[str, Any], dotted: str) -> bool:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def load_sb3_ppo_settings(
    path: str | Path, overrides: dict[str, Any] | None = None
) -> SB3PPOSettings:
    """A baseline preset under ``configs/baselines/`` or a YAML path, with nested overrides
    (``{"ppo": {...}}``).

    A preset's ``task: <RL preset>`` (relative to the preset's folder) fills in
    :data:`TASK_KEYS` from that preset (:func:`task_settings`); the preset itself must not set
    them. ``overrides`` come last and win (``total_timesteps: 2000000`` runs Appendix D's
    longer budget on the same scenario)."""
    from odyssey_core.recipes.odysseus.settings import load_train_settings

    file = preset_path(path, "baselines")
    if not file.is_file():  # the loader's error lists the presets there are
        return load_preset(SB3PPOSettings, path, overrides, kind="baselines", what="baseline")
    data = read_preset(file)
    if data.get("task") is not None:
        task = Path(data["task"])
        task = (task if task.is_absolute() else file.parent / task).resolve()
        taken = [key for key in TASK_KEYS if _sets(data, key)]
        if taken:
            raise ValueError(
                f"{file}: {', '.join(taken)} come from task {task}; remove them from the preset"
            )
        data = deep_merge(data, {**task_settings(load_train_settings(task)), "task": str(task)})
    data = deep_merge(data, dict(overrides or {}))
    try:
        return SB3PPOSettings.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"invalid baseline in {file}:\n{err}") from None


# -- the environment as SB3 sees it ------------------------------------------------------------


def to_agent_image(image: np.ndarray, resize: int | None, grayscale: bool) -> np.ndarray:
    """uint8 [H, W, 3] frame -> uint8 [S, S, 1 or 3] (or unresized) for the CNN."""
    picture = Image.fromarray(image)
    if grayscale:
        picture = picture.convert("L")  # ITU-R 601 luma, as OpenCV's RGB2GRAY
    if resize is not None:
        picture = picture.resize((resize, resize), Image.Resampling.BILINEAR)
    array = np.asarray(picture, dtype=np.uint8)
    return array[:, :, None] if array.ndim == 2 else array


class ClassicalRLEnv(gymnasium.Wrapper):
    """A TurnEnv seen by SB3: image-only Box observations and a Discrete action list.

    ``info`` gains ``best_progress``: the furthest progress reached in the episode (a death
    can move the player back, so the last progress alone undersells an episode), and
    ``env_id``, the registry name (``level`` alone does not say which game).
    """

    def __init__(
        self,
        env: TurnEnv,
        action_space: ActionSetName = "engineered",
        *,
        resize: int | None = 84,
        grayscale: bool = True,
        start_state: bytes | None = None,
    ) -> None:
        super().__init__(env)
        self.action_set = action_space
        self.start_state = start_state  # every episode starts here (None: the level start)
        self.resize = resize
        self.grayscale = grayscale
        base = env.unwrapped
        if action_space == "original":
            self.actions: list[tuple[str, ...]] = [tuple(a) for a in base.legal_actions]
        elif action_space == "engineered":
            self.actions = [buttons for _, buttons in ENGINEERED_ACTIONS]
            needed = max(len(b) for b in self.actions)
            allowed = getattr(getattr(base, "config", None), "max_code_buttons", 2)
            if allowed < needed:
                raise ValueError(
                    f"the engineered actions press {needed} buttons; build the env with "
                    f"max_code_buttons={needed} (make_classical_env does)"
                )
        else:
            raise ValueError(f"unknown action space {action_space!r}: original or engineered")
        self.action_space = gymnasium.spaces.Discrete(len(self.actions))
        height, width, _ = env.observation_space.shape  # type: ignore[misc]
        if resize is not None:
            height = width = resize
        self.observation_space = gymnasium.spaces.Box(
            0, 255, (height, width, 1 if grayscale else 3), np.uint8
        )
        self._best = 0.0

    def _image(self, observation: Observation) -> np.ndarray:
        return to_agent_image(np.asarray(observation.image), self.resize, self.grayscale)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if self.start_state is not None and "state" not in (options or {}):
            options = {**(options or {}), "state": self.start_state}
        observation, info = self.env.reset(seed=seed, options=options)
        self._best = float(info.get("progress", 0))
        return self._image(observation), self._with_extras(info)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        index = int(action)
        if self.action_set == "original":
            turn = self.env.step(index)  # the env's own index into legal_actions
        else:
            turn = self.env.step(self.actions[index])
        observation, reward, terminated, truncated, info = turn
        self._best = max(self._best, float(info.get("progress", 0)))
        info = self._with_extras(info)
        return self._image(observation), float(reward), terminated, truncated, info

    def _with_extras(self, info: dict[str, Any]) -> dict[str, Any]:
        return {**info, "best_progress": self._best, "env_id": self.env.unwrapped.env_id}


def make_classical_env(
    env_id: str, settings: BaselineEnvSettings, start_state: str | Path | None = None
) -> ClassicalRLEnv:
    """Build registry level ``env_id`` (e.g. ``odland-1-1``) with the baseline's interface;
    with ``start_state`` (a save-state file), every episode starts from it."""
    from odyssey_core.envs.registry import make_env

    overrides = {"max_code_buttons": 3} if settings.action_space == "engineered" else {}
    env = make_env(env_id, config=settings.game, **overrides)
    return ClassicalRLEnv(
        env,
        settings.action_space,
        resize=settings.resize,
        grayscale=settings.grayscale,
        start_state=Path(start_state).read_bytes() if start_state is not None else None,
    )


def _env_factory(
    env_id: str, settings: BaselineEnvSettings, start_state: str | None = None
) -> ClassicalRLEnv:
    # Module level so SubprocVecEnv can pickle it (through functools.partial).
    return make_classical_env(env_id, settings, start_state)


def _build_vec_env(
    env_ids: Sequence[str],
    settings: BaselineEnvSettings,
    *,
    kind: Literal["auto", "subproc", "dummy"] = "dummy",
    monitor_path: Path | None = None,
    seed: int | None = None,
    start_states: dict[str, Path] | None = None,
) -> Any:
    """One env per id (from its start state, if any), monitored (optional) and frame-stacked,
    as a VecEnv."""
    from stable_baselines3.common.vec_env import (
        DummyVecEnv,
        SubprocVecEnv,
        VecFrameStack,
        VecMonitor,
    )

    states = {level: str(path) for level, path in (start_states or {}).items()}
    fns: list[Callable[[], gymnasium.Env]] = [
        functools.partial(_env_factory, env_id, settings, states.get(env_id)) for env_id in env_ids
    ]
    use_subproc = kind == "subproc" or (kind == "auto" and len(fns) > 1)
    venv = SubprocVecEnv(fns) if use_subproc else DummyVecEnv(fns)
    if seed is not None:
        venv.seed(seed)
    if monitor_path is not None:
        # One CSV for all envs, written in this process; "env_id" tells the envs apart.
        venv = VecMonitor(venv, str(monitor_path), info_keywords=MONITOR_KEYWORDS)
    if settings.frame_stack > 1:
        venv = VecFrameStack(venv, settings.frame_stack)
    return venv


# -- evaluation ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LevelProgress:
    """Evaluation of one level: progress per episode summarized as mean ± standard error."""

    level: str
    episodes: int
    mean: float
    stderr: float
    goal_rate: float
    max_progress: float | None = None

    def row(self) -> str:
        target = f"/ {self.max_progress:g}" if self.max_progress else ""
        return (
            f"{self.level:14s} {self.mean:9.1f} ± {self.stderr:6.1f}  {target:<7s} "
            f"{self.goal_rate:6.1%}  {self.episodes:4d}"
        )


def summarize(level: str, episodes: Sequence[dict[str, Any]]) -> LevelProgress:
    """Mean ± standard error (sample std / sqrt(n); 0 for one episode) of best progress."""
    values = np.asarray([float(e["best_progress"]) for e in episodes], dtype=np.float64)
    n = len(values)
    stderr = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    goals = float(np.mean([bool(e.get("goal_reached")) for e in episodes])) if n else 0.0
    max_progress = episodes[0].get("max_progress") if n else None
    return LevelProgress(
        level=level,
        episodes=n,
        mean=float(values.mean()) if n else float("nan"),
        stderr=stderr,
        goal_rate=goals,
        max_progress=float(max_progress) if max_progress is not None else None,
    )


def _run_episodes(model: Any, venv: Any, episodes: int, deterministic: bool) -> list[dict]:
    """Play ``episodes`` episodes over the venv's envs; each env gets a fixed share so short
    episodes are not over-counted (the same scheme as SB3's evaluate_policy)."""
    n = venv.num_envs
    targets = np.array([(episodes + i) // n for i in range(n)])
    counts = np.zeros(n, dtype=int)
    finished: list[dict] = []
    observations = venv.reset()
    while (counts < targets).any():
        actions, _ = model.predict(observations, deterministic=deterministic)
        observations, _, dones, infos = venv.step(actions)
        for i in np.flatnonzero(dones):
            if counts[i] < targets[i]:
                info = infos[i]
                finished.append(
                    {
                        key: info.get(key)
                        for key in ("env_id", "progress", "best_progress", "goal_reached")
                    }
                    | {"max_progress": info.get("max_progress")}
                )
                counts[i] += 1
    return finished


def evaluate_model(
    model: Any,
    env_ids: Sequence[str],
    episodes: int,
    env_settings: BaselineEnvSettings,
    *,
    n_envs: int = 8,
    deterministic: bool = False,
    seed: int = 0,
    start_states: dict[str, Path] | None = None,
) -> dict[str, LevelProgress]:
    """Per-level progress of an in-memory SB3 model; envs are made for this call only, each
    level's episodes from its start state when ``start_states`` names one."""
    from stable_baselines3.common.utils import set_random_seed

    results: dict[str, LevelProgress] = {}
    for offset, env_id in enumerate(env_ids):
        # A different policy-sampling seed per level, the same across calls: comparable curves.
        set_random_seed(seed + 1000 * offset)
        venv = _build_vec_env(
            [env_id] * min(n_envs, episodes),
            env_settings,
            kind="dummy",
            seed=seed,
            start_states=start_states,
        )
        try:
            played = _run_episodes(model, venv, episodes, deterministic)
        finally:
            venv.close()
        results[env_id] = summarize(env_id, played)
    return results


def evaluate_sb3(
    model_path: str | Path,
    env_ids: Sequence[str],
    episodes: int,
    *,
    settings: SB3PPOSettings | None = None,
    deterministic: bool | None = None,
    seed: int = 0,
) -> dict[str, LevelProgress]:
    """Load a saved baseline and report per-level mean progress ± standard error.

    ``settings`` default to the ``settings.json`` saved beside the model, so the evaluation
    sees exactly the observations and actions the model was trained on.
    """
    from stable_baselines3 import PPO

    model_path = Path(model_path)
    if settings is None:
        saved = model_path.parent / SETTINGS_FILE
        if not saved.is_file():
            raise FileNotFoundError(f"no {SETTINGS_FILE} beside {model_path}; pass settings=")
        settings = SB3PPOSettings.model_validate_json(saved.read_text())
    settings.check_start_states()
    device = "cpu" if settings.device == "auto" else settings.device
    model = PPO.load(str(model_path), device=device)
    return evaluate_model(
        model,
        env_ids,
        episodes,
        settings.env,
        n_envs=settings.eval.n_envs,
        deterministic=settings.eval.deterministic if deterministic is None else deterministic,
        seed=seed,
        start_states=settings.start_states,
    )


def format_table(results: dict[str, LevelProgress]) -> str:
    header = f"{'level':14s} {'progress':>9s}   {'s.e.':>6s}  {'max':<7s} {'goal':>6s}  {'n':>4s}"
    return "\n".join([header, *(r.row() for r in results.values())])


# -- training ------------------------------------------------------------------------------------


def _callbacks(settings: SB3PPOSettings, out_dir: Path, log: Callable[[str], None] | None) -> Any:
    """A progress line per rollout and, when enabled, periodic evaluations to a CSV."""
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList

    class RolloutLog(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.recent: list[float] = []
            self.episodes = 0
            self.start = time.monotonic()

        def _on_step(self) -> bool:
            for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
                if done:
                    self.episodes += 1
                    self.recent = [*self.recent[-99:], float(info.get("best_progress", 0))]
            return True

        def _on_rollout_end(self) -> None:
            if log is None:
                return
            rate = self.num_timesteps / max(time.monotonic() - self.start, 1e-9)
            mean = f"{np.mean(self.recent):.1f}" if self.recent else "-"
            log(
                f"steps {self.num_timesteps:>9d}/{settings.total_timesteps}  "
                f"episodes {self.episodes:>6d}  progress(last 100) {mean:>7s}  {rate:6.0f} sps"
            )

    class PeriodicEval(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_at = settings.eval.every
            self.path = out_dir / EVALUATIONS_FILE

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_at:
                return True
            while self.next_at <= self.num_timesteps:
                self.next_at += settings.eval.every
            results = evaluate_model(
                self.model,
                settings.levels,
                settings.eval.episodes,
                settings.env,
                n_envs=settings.eval.n_envs,
                deterministic=settings.eval.deterministic,
                seed=settings.seed,
                start_states=settings.start_states,
            )
            new = not self.path.exists()
            with self.path.open("a", newline="") as handle:
                writer = csv.writer(handle)
                if new:
                    writer.writerow(["timesteps", "level", "episodes", "mean", "stderr", "goal"])
                for r in results.values():
                    writer.writerow(
                        [self.num_timesteps, r.level, r.episodes, r.mean, r.stderr, r.goal_rate]
                    )
            if log is not None:
                log(f"eval @ {self.num_timesteps}:\n{format_table(results)}")
            return True

    callbacks: list[BaseCallback] = [RolloutLog()]
    if settings.eval.every > 0:
        callbacks.append(PeriodicEval())
    return CallbackList(callbacks)


def train_sb3_ppo(
    settings: SB3PPOSettings,
    out_dir: str | Path,
    *,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Train PPO (CnnPolicy, NatureCNN) on ``settings.levels``; return the saved model zip.

    ``out_dir`` receives ``model.zip``, ``settings.json`` (what ``evaluate_sb3`` rebuilds the
    envs from), ``monitor.csv`` (one row per episode: reward, length, time, level,
    progress, best_progress, goal_reached) and, with ``eval.every`` > 0, ``evaluations.csv``.
    """
    from stable_baselines3 import PPO

    if settings.torch_threads is not None:
        import torch

        torch.set_num_threads(settings.torch_threads)
    settings.check_start_states()  # before any env or model: a wrong state names its fact
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SETTINGS_FILE).write_text(settings.model_dump_json(indent=2))
    # Round-robin over the levels, so every level gets n_envs / len(levels) workers.
    env_ids = [settings.levels[i % len(settings.levels)] for i in range(settings.n_envs)]
    venv = _build_vec_env(
        env_ids,
        settings.env,
        kind=settings.vec_env,
        monitor_path=out / MONITOR_FILE,
        seed=settings.seed,
        start_states=settings.start_states,
    )
    hp = settings.ppo
    try:
        model = PPO(
            "CnnPolicy",
            venv,
            learning_rate=hp.learning_rate,
            n_steps=settings.n_steps,
            batch_size=hp.minibatch_size,
            n_epochs=hp.n_epochs,
            gamma=hp.gamma,
            gae_lambda=hp.gae_lambda,
            clip_range=hp.clip_range,
            clip_range_vf=hp.clip_range_vf,
            ent_coef=hp.ent_coef,
            vf_coef=hp.vf_coef,
            max_grad_norm=hp.max_grad_norm,
            target_kl=hp.target_kl,
            seed=settings.seed,
            device=settings.device,
            verbose=0,
        )
        model.learn(settings.total_timesteps, callback=_callbacks(settings, out, log))
        model_path = out / MODEL_FILE
        model.save(str(model_path))
    finally:
        venv.close()
    return model_path


def write_results(results: dict[str, LevelProgress], path: str | Path) -> None:
    """The final evaluation as JSON, one entry per level."""
    payload = {level: dataclasses.asdict(r) for level, r in results.items()}
    Path(path).write_text(json.dumps(payload, indent=2))
