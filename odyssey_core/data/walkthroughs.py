"""Walkthrough videos: recorded by an agent (with a privileged-state sidecar) or imported.

Recorded walkthroughs (:func:`record_walkthrough`), ``episodes_per_level`` per level, in
``out_dir``; ``<name>`` is ``<game>-<level>`` for a level's first episode and
``<game>-<level>-ep<k>`` for episode k >= 1:

* ``<name>.mp4``: one video frame per turn the agent played, the observation the agent acted on
  (the terminal observation after the last action is not written, so every frame has a "next
  action"). Frames are upscaled x2 by pixel repetition (``scale``): each Game Boy pixel stays a
  2x2 block, so H.264's 4:2:0 chroma subsampling cannot smear colour across pixel edges;
  :mod:`~odyssey_core.data.sampling` shrinks frames back to the native 160x144 the agent sees.
* ``<name>.parquet``: the sidecar, one row per video frame (:data:`SIDECAR_COLUMNS`),
  joined to sampled frames by ``frame_index``. ``objects`` is the game's nearby-object table as
  a JSON string; ``buttons_next`` is what the agent pressed after seeing the frame.
* ``<name>.states/frame_<index>.state``: the env's ``save_state()`` bytes every
  ``state_every`` frames (``state_file`` in the sidecar is the path relative to ``out_dir``,
  null in between). Separate files keep the sidecar small and let a state be loaded directly.
* ``<name>.json``: the :class:`Walkthrough` record.

Exploration (``explore_prob``): a deterministic expert replays the same line every episode, so
extra episodes alone add nothing. With exploration, before each agent turn a *detour* of 1 to
``explore_turns`` uniformly random legal actions starts with probability ``explore_prob``; then
the agent takes over again from wherever the detour left it, and its recovery is recorded.
Detour turns are played but not written (their next action is not the agent's, and the
programmatic teacher labels a frame with its next action), so the video is the agent's turns
only and the sidecar's ``turn`` (the env's turn counter) skips the detour turns. A detour is
undone (the env is loaded back to its start and the frames recorded since are dropped) when
it loses a life, or when the agent loses one within ``recover_turns`` turns after it: no
recorded frame then leads into a death the agent could not avoid. Episodes differ by their
exploration random stream, seeded by (``seed``, level, episode).

Imported walkthroughs (:func:`import_video`) are any MP4 plus user-given level time ranges;
they have no sidecar, so only teachers that look at pixels can annotate them.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import imageio.v2 as imageio
import numpy as np
from pydantic import Field, model_validator

from odyssey_core.config import GameName, StrictModel
from odyssey_core.data.dataset import copy_file, read_json, write_bytes_atomic, write_json
from odyssey_core.data.dataset import write_table as _write_table

if TYPE_CHECKING:
    from odyssey_core.envs.base import Observation

__all__ = [
    "SIDECAR_COLUMNS",
    "ImportConfig",
    "LevelSegment",
    "RecordConfig",
    "Walkthrough",
    "import_video",
    "load_walkthroughs",
    "record_walkthrough",
    "record_walkthroughs",
]

SIDECAR_COLUMNS = (
    "level",
    "frame_index",
    "timestamp_s",
    "turn",
    "progress",
    "max_progress",
    "player_x",
    "player_y",
    "camera_x",
    "screen_x",
    "velocity_y",
    "on_ground",
    "lives",
    "objects",
    "buttons_next",
    "state_file",
)


class LevelSegment(StrictModel):
    """A level's time range inside a video, in seconds."""

    level: str
    start_s: float = Field(ge=0)
    end_s: float

    @model_validator(mode="after")
    def _ordered(self) -> LevelSegment:
        if self.end_s <= self.start_s:
            raise ValueError(f"segment {self.level}: end_s must be after start_s")
        return self


# A detour that keeps failing is retried, but not forever: after this many undone detours an
# episode stops exploring and the agent plays on alone.
MAX_UNDONE_DETOURS = 50


class RecordConfig(StrictModel):
    """Record walkthroughs by playing levels with an agent."""

    game: GameName = "odland"
    levels: list[str] = Field(default_factory=lambda: ["1-1"])
    agent: str = Field(default="expert", description="a name in odyssey_core.agents.AGENTS")
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = Field(default=400, ge=1, description="env turns per episode, detours too")
    fps: float = Field(default=8.0, gt=0, description="video frames (= agent turns) per second")
    scale: int = Field(default=2, ge=1, le=8, description="pixel-repeat upscaling of the video")
    state_every: int = Field(default=20, ge=1, description="save a state every K frames")
    seed: int = 0
    env_overrides: dict[str, Any] = Field(default_factory=dict)
    episodes_per_level: int = Field(
        default=1,
        ge=1,
        description="walkthroughs recorded per level; they differ only through exploration "
        "(a deterministic agent and env replay the same line otherwise)",
    )
    clean_episodes: int = Field(
        default=1,
        ge=0,
        description="the first N episodes of each level take no detours (the agent's own "
        "walkthrough, a clean reference); 0: every episode explores",
    )
    explore_prob: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="chance, before each agent turn, that a detour of random legal actions "
        "starts (episodes after the clean ones); detour turns are not recorded, the agent's "
        "recovery from them is. One detour at a time: the next can start only once the "
        "previous is past its recovery window",
    )
    explore_turns: int = Field(
        default=4, ge=1, description="a detour lasts 1 to this many turns (uniform)"
    )
    recover_turns: int = Field(
        default=12,
        ge=0,
        description="a life lost within this many agent turns after a detour (or during it) "
        "undoes the detour: the env goes back to its start and those frames are dropped",
    )

    @model_validator(mode="after")
    def _exploring_episode_exists(self) -> RecordConfig:
        if self.explore_prob > 0 and self.clean_episodes >= self.episodes_per_level:
            raise ValueError(
                f"explore_prob is set but all {self.episodes_per_level} episode(s) per level are "
                f"clean (clean_episodes={self.clean_episodes}); raise episodes_per_level or set "
                "clean_episodes: 0"
            )
        return self

    def walkthrough_name(self, level: str, episode: int = 0) -> str:
        """``<game>-<level>`` for episode 0 (as before episodes existed), else ``-ep<k>``."""
        base = f"{self.game}-{level}"
        return base if episode == 0 else f"{base}-ep{episode}"


class ImportConfig(StrictModel):
    """Use an existing video; ``segments`` say which level is played when."""

    video: Path
    game: GameName = "odland"
    segments: list[LevelSegment]
    name: str | None = None
    copy_video: bool = Field(default=True, description="copy into the output folder")


@dataclass(frozen=True)
class Walkthrough:
    """One walkthrough video and what is known about it (paths are absolute)."""

    name: str
    video: str
    game: str
    fps: float
    frame_count: int
    segments: list[dict[str, Any]]  # LevelSegment dicts: which level is where in time
    source: str  # e.g. "record:expert" or "import:<file name>"
    sidecar: str | None = None
    level: str | None = None  # set when the whole video is one level
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Walkthrough:
        return cls(**payload)


def _sidecar_row(
    level: str, index: int, fps: float, info: dict[str, Any], buttons: tuple[str, ...]
) -> dict[str, Any]:
    progress = int(info.get("progress", 0))
    camera = info.get("camera_x")
    return {
        "level": level,
        "frame_index": index,
        "timestamp_s": index / fps,
        "turn": int(info.get("turn", index)),
        "progress": progress,
        "max_progress": info.get("max_progress"),
        "player_x": progress,  # platformers report progress as the player's level x
        "player_y": info.get("player_y"),
        "camera_x": camera,
        "screen_x": None if camera is None else progress - int(camera),
        "velocity_y": info.get("velocity_y"),
        "on_ground": info.get("on_ground"),
        "lives": info.get("lives"),
        "objects": json.dumps(list(info.get("objects", [])), sort_keys=True),
        "buttons_next": [str(b) for b in buttons],
        "state_file": None,
    }


@dataclass
class _Detour:
    """Where a detour started, to undo it if the agent cannot recover."""

    state: bytes
    rows: int  # frames recorded before it
    observation: Observation
    info: dict[str, Any]
    turns_left: int
    deadline: int | None = None  # recorded-frame count up to which a lost life undoes it


def record_walkthrough(
    config: RecordConfig,
    level: str,
    out_dir: str | Path,
    *,
    episode: int = 0,
    show_progress: bool = False,
) -> Walkthrough:
    """Play ``level`` with the configured agent (episode ``episode`` of the level, with its
    detours), writing the MP4, sidecar and states."""
    from tqdm.auto import tqdm

    from odyssey_core.agents import make_agent
    from odyssey_core.envs import make_env

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = config.walkthrough_name(level, episode)
    video_path = out / f"{name}.mp4"
    states_dir = out / f"{name}.states"
    env = make_env(f"{config.game}-{level}", max_turns=config.max_turns, **config.env_overrides)
    agent = make_agent(config.agent, **config.agent_kwargs)
    seed = config.seed + episode
    explore = config.explore_prob if episode >= config.clean_episodes else 0.0
    # A string seed is hashed with SHA-512 by `random`: stable across runs and processes.
    rng = random.Random(f"{config.seed}:{config.game}-{level}:{episode}")
    rows: list[dict[str, Any]] = []
    pending: list[np.ndarray] = []  # frames not yet in the video (a detour may drop them)
    stats = {"detours": 0, "detour_turns": 0, "undone_detours": 0}
    writer = imageio.get_writer(
        video_path, format="FFMPEG", fps=config.fps, codec="libx264", quality=9, macro_block_size=1
    )
    bar = tqdm(desc=f"record {name} ({config.agent})", unit="turn", disable=not show_progress)
    info: dict[str, Any] = {}
    detour: _Detour | None = None

    def flush(upto: int) -> None:
        # Frames before an open detour's start are final: write them and free the memory.
        count = upto - (len(rows) - len(pending))
        for frame in pending[:count]:
            if config.scale > 1:
                frame = np.repeat(np.repeat(frame, config.scale, 0), config.scale, 1)
            writer.append_data(frame)
        del pending[:count]

    try:
        observation, info = env.reset(seed=seed)
        agent.reset(env, seed=seed)
        while True:
            if (
                detour is None
                and explore
                and stats["undone_detours"] < MAX_UNDONE_DETOURS
                and rng.random() < explore
            ):
                turns = rng.randint(1, config.explore_turns)
                # Without save states a detour cannot be undone; it is still taken.
                state = env.save_state() if env.supports_save_state else b""
                detour = _Detour(state, len(rows), observation, info, turns)
                stats["detours"] += 1
            if detour is not None and detour.turns_left > 0:
                action = rng.choice(env.legal_actions)
                next_obs, _, terminated, truncated, next_info = env.step(action)
                stats["detour_turns"] += 1
                detour.turns_left -= 1
                if detour.turns_left == 0:
                    detour.deadline = len(rows) + config.recover_turns
            else:
                index = len(rows)
                state_file = None
                if index % config.state_every == 0 and env.supports_save_state:
                    # Saved before the agent acts: the expert's search moves the emulator around.
                    state_file = f"{states_dir.name}/frame_{index:06d}.state"
                    write_bytes_atomic(out / state_file, env.save_state())
                action = agent.act(env, observation, info)
                pending.append(observation.image)
                next_obs, _, terminated, truncated, next_info = env.step(action)
                buttons = tuple(next_info.get("buttons", ()))
                row = _sidecar_row(level, index, config.fps, info, buttons)
                row["state_file"] = state_file
                rows.append(row)
                bar.update(1)
            if detour is not None and next_info.get("life_lost") and detour.state:
                within = detour.deadline is None or len(rows) <= detour.deadline
                if within:  # the detour led to this death: undo it and let the agent go on
                    for row in rows[detour.rows :]:
                        if row["state_file"]:
                            (out / row["state_file"]).unlink(missing_ok=True)
                    dropped = len(rows) - detour.rows
                    del rows[detour.rows :]
                    del pending[len(pending) - dropped :]
                    env.load_state(detour.state)
                    agent.reset(env)  # its plan was made for the lost line
                    observation, info = detour.observation, detour.info
                    stats["undone_detours"] += 1
                    detour = None
                    continue
            if detour is not None and detour.deadline is not None and len(rows) > detour.deadline:
                detour = None  # the agent recovered: the detour stays
            observation, info = next_obs, next_info
            flush(len(rows) if detour is None else detour.rows)
            if terminated or truncated:
                break
        flush(len(rows))
    finally:
        writer.close()
        bar.close()
        env.close()
    sidecar = out / f"{name}.parquet"
    _write_table(sidecar, rows)
    walkthrough = Walkthrough(
        name=name,
        video=str(video_path.resolve()),
        game=config.game,
        fps=config.fps,
        frame_count=len(rows),
        segments=[{"level": level, "start_s": 0.0, "end_s": len(rows) / config.fps}],
        source=f"record:{config.agent}",
        sidecar=str(sidecar.resolve()),
        level=level,
        extra={
            "goal_reached": bool(info.get("goal_reached")),
            "final_progress": info.get("progress"),
            "max_progress": info.get("max_progress"),
            "scale": config.scale,
            "state_every": config.state_every,
            "episode": episode,
            "seed": seed,
            "explore_prob": explore,
            **stats,
        },
    )
    write_json(out / f"{name}.json", walkthrough.to_json())
    return walkthrough


def record_walkthroughs(
    config: RecordConfig, out_dir: str | Path, *, show_progress: bool = False
) -> list[Walkthrough]:
    """Every level's ``episodes_per_level`` walkthroughs, level by level."""
    return [
        record_walkthrough(config, level, out_dir, episode=episode, show_progress=show_progress)
        for level in config.levels
        for episode in range(config.episodes_per_level)
    ]


def video_info(path: str | Path) -> tuple[float, int]:
    """(fps, frame count) of a video, from the container's metadata."""
    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        meta = reader.get_meta_data()
        fps = float(meta["fps"])
        try:
            count = int(reader.count_frames())  # exact, but decodes; cheap for our sizes
        except Exception:  # some containers refuse; estimate from the duration
            count = round(float(meta.get("duration", 0.0)) * fps)
    finally:
        reader.close()
    return fps, count


def import_video(config: ImportConfig, out_dir: str | Path) -> Walkthrough:
    """Register a user video with level time ranges (validated against its duration)."""
    from odyssey_core.envs.pyboy.levels import MARIO_LEVELS, ODLAND_LEVELS

    source = Path(config.video)
    if not source.is_file():
        raise FileNotFoundError(f"video not found: {source}")
    known = ODLAND_LEVELS if config.game == "odland" else MARIO_LEVELS
    fps, count = video_info(source)
    duration = count / fps if fps else 0.0
    segments = sorted(config.segments, key=lambda s: s.start_s)
    for segment in segments:
        if segment.level not in known:
            raise ValueError(f"unknown {config.game} level {segment.level!r}; known: {known}")
        if segment.end_s > duration + 1e-6:
            raise ValueError(
                f"segment {segment.level} ends at {segment.end_s}s, "
                f"after the end of the video ({duration:.2f}s)"
            )
    for before, after in itertools.pairwise(segments):
        if after.start_s < before.end_s:
            raise ValueError(f"segments {before.level} and {after.level} overlap")
    out = Path(out_dir)
    name = config.name or source.stem
    video = copy_file(source, out / f"{name}{source.suffix}") if config.copy_video else source
    walkthrough = Walkthrough(
        name=name,
        video=str(Path(video).resolve()),
        game=config.game,
        fps=fps,
        frame_count=count,
        segments=[s.model_dump() for s in segments],
        source=f"import:{source.name}",
        level=segments[0].level if len(segments) == 1 else None,
    )
    write_json(out / f"{name}.json", walkthrough.to_json())
    return walkthrough


def load_walkthroughs(directory: str | Path) -> list[Walkthrough]:
    """Every walkthrough record (``*.json``) in a folder, by name."""
    records = []
    for path in sorted(Path(directory).glob("*.json")):
        payload = read_json(path)
        if isinstance(payload, dict) and {"video", "segments", "fps"} <= payload.keys():
            records.append(Walkthrough.from_json(payload))
    return records
