"""Walkthrough videos: recorded by an agent (with a privileged-state sidecar) or imported.

Recorded walkthroughs (:func:`record_walkthrough`), one per level, in ``out_dir``:

* ``<game>-<level>.mp4``: one video frame per game turn, the observation the agent acted on
  (the terminal observation after the last action is not written, so every frame has a "next
  action"). Frames are upscaled x2 by pixel repetition (``scale``): each Game Boy pixel stays a
  2x2 block, so H.264's 4:2:0 chroma subsampling cannot smear colour across pixel edges;
  :mod:`~odyssey_core.data.sampling` shrinks frames back to the native 160x144 the agent sees.
* ``<game>-<level>.parquet``: the sidecar, one row per video frame (:data:`SIDECAR_COLUMNS`),
  joined to sampled frames by ``frame_index``. ``objects`` is the game's nearby-object table as
  a JSON string; ``buttons_next`` is what the agent pressed after seeing the frame.
* ``<game>-<level>.states/frame_<index>.state``: the env's ``save_state()`` bytes every
  ``state_every`` frames (``state_file`` in the sidecar is the path relative to ``out_dir``,
  null in between). Separate files keep the sidecar small and let a state be loaded directly.
* ``<game>-<level>.json``: the :class:`Walkthrough` record.

Imported walkthroughs (:func:`import_video`) are any MP4 plus user-given level time ranges;
they have no sidecar, so only teachers that look at pixels can annotate them.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
from pydantic import Field, model_validator

from odyssey_core.config import GameName, StrictModel
from odyssey_core.data.dataset import copy_file, read_json, write_bytes_atomic, write_json
from odyssey_core.data.dataset import write_table as _write_table

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


class RecordConfig(StrictModel):
    """Record walkthroughs by playing levels with an agent."""

    game: GameName = "odland"
    levels: list[str] = Field(default_factory=lambda: ["1-1"])
    agent: str = Field(default="expert", description="a name in odyssey_core.agents.AGENTS")
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = Field(default=400, ge=1)
    fps: float = Field(default=8.0, gt=0, description="video frames (= game turns) per second")
    scale: int = Field(default=2, ge=1, le=8, description="pixel-repeat upscaling of the video")
    state_every: int = Field(default=20, ge=1, description="save a state every K frames")
    seed: int = 0
    env_overrides: dict[str, Any] = Field(default_factory=dict)


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


def record_walkthrough(
    config: RecordConfig, level: str, out_dir: str | Path, *, show_progress: bool = False
) -> Walkthrough:
    """Play ``level`` with the configured agent, writing the MP4, sidecar and states."""
    from tqdm.auto import tqdm

    from odyssey_core.agents import make_agent
    from odyssey_core.envs import make_env

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{config.game}-{level}"
    video_path = out / f"{name}.mp4"
    states_dir = out / f"{name}.states"
    env = make_env(name, max_turns=config.max_turns, **config.env_overrides)
    agent = make_agent(config.agent, **config.agent_kwargs)
    rows: list[dict[str, Any]] = []
    writer = imageio.get_writer(
        video_path, format="FFMPEG", fps=config.fps, codec="libx264", quality=9, macro_block_size=1
    )
    bar = tqdm(desc=f"record {name} ({config.agent})", unit="turn", disable=not show_progress)
    info: dict[str, Any] = {}
    try:
        observation, info = env.reset(seed=config.seed)
        agent.reset(env, seed=config.seed)
        while True:
            index = len(rows)
            state_file = None
            if index % config.state_every == 0 and env.supports_save_state:
                # Saved before the agent acts: the expert's search moves the emulator around.
                state = env.save_state()
                state_file = f"{states_dir.name}/frame_{index:06d}.state"
                write_bytes_atomic(out / state_file, state)
            action = agent.act(env, observation, info)
            frame = observation.image
            if config.scale > 1:
                frame = np.repeat(np.repeat(frame, config.scale, 0), config.scale, 1)
            writer.append_data(frame)
            next_obs, _, terminated, truncated, next_info = env.step(action)
            row = _sidecar_row(level, index, config.fps, info, tuple(next_info.get("buttons", ())))
            row["state_file"] = state_file
            rows.append(row)
            bar.update(1)
            observation, info = next_obs, next_info
            if terminated or truncated:
                break
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
        },
    )
    write_json(out / f"{name}.json", walkthrough.to_json())
    return walkthrough


def record_walkthroughs(
    config: RecordConfig, out_dir: str | Path, *, show_progress: bool = False
) -> list[Walkthrough]:
    return [
        record_walkthrough(config, level, out_dir, show_progress=show_progress)
        for level in config.levels
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
