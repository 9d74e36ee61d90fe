"""TurnBatch: the one currency between rollout, advantage estimation and the trainer.

One row per turn; the turns of an episode are contiguous and in time order. Token-level
fields (prompt and response ids, thought/action masks, behaviour log-probs) are ragged, one
1-D tensor per turn; turn-level fields are 1-D tensors of length N. Persisted as a Parquet
table with each frame as a PNG file beside it.

``frames`` is a list of uint8 ``[H, W, 3]`` arrays, or, for a large batch, a
:class:`~odyssey_core.rollout.frames.FrameView` of frames kept on disk that indexes the same
way and reads a frame only when it is indexed (:meth:`TurnBatch.spill_frames`; automatic above
``ODYSSEY_FRAMES_ON_DISK`` frames). ``select`` and ``concat`` keep on-disk frames on disk.

How an episode's last row ended is kept in two flags, as Gymnasium does: ``terminated`` (the
task is over: no future to bootstrap) and ``truncated`` (cut by a turn limit or the end of a
turn budget: the value of the next observation, ``bootstrap_values``, stands in for the
rest). A row with neither flag has its episode continuing on the next row.

Grouped estimators (GRPO-style, ESPO) read the optional ``group_id`` (episodes that share a
prompt or start state), ``sample_index`` (which sample of its group an episode is) and
``stage`` (the task stage a turn belongs to).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

from odyssey_core.rollout.frames import (
    FrameView,
    concat_frames,
    spill_threshold,
    store_frames,
)

TABLE_FILE = "turns.parquet"
FRAMES_DIR = "frames"
_RAGGED = ("prompt_ids", "response_ids", "thought_mask", "action_mask", "behaviour_logprobs")
_OPTIONAL = ("values", "bootstrap_values", "advantages", "returns")
_OPTIONAL_LONG = ("group_id", "sample_index")
_TRANSIENT = ("next_observations",)  # kept in memory for bootstrapping, never persisted


@dataclass
class TurnBatch:
    episode_ids: torch.Tensor  # long [N]
    turn_index: torch.Tensor  # long [N], 0 at each episode's first turn
    levels: list[str]  # task / level id per turn, e.g. "odland-1-1"
    frames: Sequence[np.ndarray]  # uint8 [H, W, 3] per turn: what the agent saw (list/FrameView)
    prompt_ids: list[torch.Tensor]  # long, per turn
    response_ids: list[torch.Tensor]  # long, per turn
    thought_mask: list[torch.Tensor]  # bool over response tokens
    action_mask: list[torch.Tensor]  # bool over response tokens
    behaviour_logprobs: list[torch.Tensor]  # float, log pi_behaviour per response token
    rewards: torch.Tensor  # float [N]
    terminated: torch.Tensor  # bool [N]: the episode's task ended after this turn
    truncated: torch.Tensor  # bool [N]: the episode was cut after this turn (bootstrap)
    values: torch.Tensor | None = None  # float [N], V(o_t)
    bootstrap_values: torch.Tensor | None = None  # float [N], V(o_{t+1}) on truncated rows
    advantages: torch.Tensor | None = None  # float [N]
    returns: torch.Tensor | None = None  # float [N]
    group_id: torch.Tensor | None = None  # long [N]: episodes compared with each other
    sample_index: torch.Tensor | None = None  # long [N]: the episode's index in its group
    stage: list[str] | None = None  # per turn, e.g. "search" / "pool" / "recommend"
    # Per-turn facts for metrics (response text, progress, invalid answer ...): JSON-able.
    extras: list[dict[str, Any]] = field(default_factory=list)
    # The observation after a truncated row (None elsewhere): what bootstrap values are
    # computed from. Memory only; a saved batch keeps ``bootstrap_values`` instead.
    next_observations: list[Any] | None = None

    def __post_init__(self) -> None:
        if not self.extras:
            self.extras = [{} for _ in range(len(self.levels))]
        self.validate()
        threshold = spill_threshold()
        if threshold is not None:
            self.spill_frames(above=threshold)

    def spill_frames(self, directory: str | Path | None = None, above: int = 0) -> TurnBatch:
        """Move the frames into a :class:`~odyssey_core.rollout.frames.FrameStore` on disk when
        there are more than ``above`` of them (in place: the list is dropped; returns this
        batch).

        The store's folder is made under ``directory`` (default ``ODYSSEY_FRAMES_DIR`` or the
        temp folder) and removed once no batch or view refers to it any more."""
        if isinstance(self.frames, FrameView) or len(self.frames) <= above:
            return self
        self.frames = store_frames(self.frames, directory)
        return self

    @property
    def frames_on_disk(self) -> bool:
        return isinstance(self.frames, FrameView)

    @property
    def dones(self) -> torch.Tensor:
        """bool [N]: the episode ended after this turn, either way."""
        return self.terminated | self.truncated

    def __len__(self) -> int:
        return int(self.episode_ids.numel())

    # -- invariants ------------------------------------------------------------------------------

    def validate(self) -> None:
        n = len(self)
        for name in ("turn_index", "rewards", "terminated", "truncated"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"TurnBatch.{name} must have shape ({n},)")
        for name in ("levels", "frames", "extras", *_RAGGED):
            if len(getattr(self, name)) != n:
                raise ValueError(f"TurnBatch.{name} must have {n} entries")
        for name in (*_OPTIONAL, *_OPTIONAL_LONG):
            value = getattr(self, name)
            if value is not None and value.shape != (n,):
                raise ValueError(f"TurnBatch.{name} must have shape ({n},) or be None")
        for name in ("stage", "next_observations"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"TurnBatch.{name} must have {n} entries or be None")
        if bool((self.terminated & self.truncated).any()):
            raise ValueError("a turn is terminated or truncated, not both")
        for i in range(n):
            length = self.response_ids[i].numel()
            for name in ("thought_mask", "action_mask", "behaviour_logprobs"):
                if getattr(self, name)[i].numel() != length:
                    raise ValueError(f"turn {i}: {name} must match its {length} response tokens")
        if n:
            starts = torch.ones(n, dtype=torch.bool)
            starts[1:] = self.episode_ids[1:] != self.episode_ids[:-1]
            if torch.unique(self.episode_ids).numel() != int(starts.sum()):
                raise ValueError("the turns of each episode must be contiguous")
            expected = torch.zeros(n, dtype=torch.long)
            for i in range(1, n):
                expected[i] = 0 if starts[i] else expected[i - 1] + 1
            if not torch.equal(self.turn_index, expected):
                raise ValueError("turn_index must count 0, 1, 2 ... inside each episode")
            last = torch.ones(n, dtype=torch.bool)
            last[:-1] = starts[1:]
            if bool((self.dones & ~last).any()):
                raise ValueError("only an episode's last turn may be terminated or truncated")

    # -- views -----------------------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        return int(torch.unique_consecutive(self.episode_ids).numel())

    def episode_slices(self) -> Iterator[slice]:
        """One slice per episode, in batch order."""
        _, counts = torch.unique_consecutive(self.episode_ids, return_counts=True)
        start = 0
        for count in counts.tolist():
            yield slice(start, start + count)
            start += count

    def select(self, indices: Sequence[int] | torch.Tensor) -> TurnBatch:
        """The given turns, in the given order (the trainer's minibatches, filtered turns).

        The result is a bag of turns for the update; it skips episode validation."""
        index = torch.as_tensor(indices, dtype=torch.long)
        picked: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                picked[f.name] = value[index]
            elif isinstance(value, FrameView):
                picked[f.name] = value.select(index.numpy())
            elif isinstance(value, list):
                picked[f.name] = [value[i] for i in index.tolist()]
            else:
                picked[f.name] = value
        batch = object.__new__(TurnBatch)
        batch.__dict__.update(picked)
        return batch

    def with_fields(self, **changes: Any) -> TurnBatch:
        return replace(self, **changes)

    @staticmethod
    def concat(batches: Sequence[TurnBatch]) -> TurnBatch:
        """Join batches; episode ids are renumbered so they stay distinct."""
        if not batches:
            raise ValueError("nothing to concatenate")
        merged: dict[str, Any] = {}
        offset, ids = 0, []
        for batch in batches:
            _, local = torch.unique_consecutive(batch.episode_ids, return_inverse=True)
            ids.append(local + offset)
            offset += int(local.max()) + 1 if len(batch) else 0
        merged["episode_ids"] = torch.cat(ids)
        for f in fields(TurnBatch):
            if f.name == "episode_ids":
                continue
            values = [getattr(b, f.name) for b in batches]
            if f.name == "frames":
                merged[f.name] = concat_frames(values)
            elif f.name in (*_OPTIONAL, *_OPTIONAL_LONG):
                merged[f.name] = None if any(v is None for v in values) else torch.cat(values)
            elif f.name in ("stage", *_TRANSIENT):
                merged[f.name] = (
                    None if any(v is None for v in values) else [x for v in values for x in v]
                )
            elif isinstance(values[0], torch.Tensor):
                merged[f.name] = torch.cat(values)
            else:
                merged[f.name] = [item for value in values for item in value]
        return TurnBatch(**merged)

    # -- persistence -----------------------------------------------------------------------------

    def save(self, directory: str | Path) -> Path:
        """Write ``turns.parquet`` and ``frames/<row>.png`` under ``directory``."""
        directory = Path(directory)
        (directory / FRAMES_DIR).mkdir(parents=True, exist_ok=True)
        frame_paths = []
        for row, frame in enumerate(self.frames):
            relative = f"{FRAMES_DIR}/{row:07d}.png"
            Image.fromarray(frame).save(directory / relative)
            frame_paths.append(relative)
        columns: dict[str, Any] = {
            "episode_id": self.episode_ids.tolist(),
            "turn_index": self.turn_index.tolist(),
            "level": self.levels,
            "frame": frame_paths,
            "reward": self.rewards.tolist(),
            "terminated": self.terminated.tolist(),
            "truncated": self.truncated.tolist(),
            "extras": [_json(e) for e in self.extras],
            "stage": self.stage,
        }
        for name in _RAGGED:
            columns[name] = [t.tolist() for t in getattr(self, name)]
        for name in (*_OPTIONAL, *_OPTIONAL_LONG):
            value = getattr(self, name)
            columns[name] = None if value is None else value.tolist()
        table = pa.table({k: v for k, v in columns.items() if v is not None})
        pq.write_table(table, directory / TABLE_FILE)
        return directory

    @classmethod
    def load(cls, directory: str | Path, frames_on_disk: bool = False) -> TurnBatch:
        """Read a saved batch; with ``frames_on_disk`` the PNGs are decoded one at a time into
        a :class:`FrameStore`, so a large batch never holds its frames in memory."""
        directory = Path(directory)
        path = directory / TABLE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no TurnBatch at {directory}: {TABLE_FILE} is missing")
        table = pq.read_table(path).to_pydict()
        dtypes = {
            "prompt_ids": torch.long,
            "response_ids": torch.long,
            "thought_mask": torch.bool,
            "action_mask": torch.bool,
            "behaviour_logprobs": torch.float32,
        }
        pngs = (np.asarray(Image.open(directory / p).convert("RGB")) for p in table["frame"])
        return cls(
            episode_ids=torch.tensor(table["episode_id"], dtype=torch.long),
            turn_index=torch.tensor(table["turn_index"], dtype=torch.long),
            levels=list(table["level"]),
            frames=store_frames(pngs) if frames_on_disk else list(pngs),
            rewards=torch.tensor(table["reward"], dtype=torch.float32),
            terminated=torch.tensor(table["terminated"], dtype=torch.bool),
            truncated=torch.tensor(table["truncated"], dtype=torch.bool),
            extras=[_unjson(e) for e in table["extras"]],
            stage=list(table["stage"]) if "stage" in table else None,
            **{n: [torch.tensor(v, dtype=dtypes[n]) for v in table[n]] for n in _RAGGED},
            **{
                n: torch.tensor(table[n], dtype=torch.float32) if n in table else None
                for n in _OPTIONAL
            },
            **{
                n: torch.tensor(table[n], dtype=torch.long) if n in table else None
                for n in _OPTIONAL_LONG
            },
        )


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, default=_jsonable)


def _unjson(text: str) -> dict[str, Any]:
    return json.loads(text)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, set)):
        return list(value)
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value.tolist()
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot store {type(value).__name__} in TurnBatch.extras")
