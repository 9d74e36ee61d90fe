"""Generated SmartSpot-like datasets, their folders, and a loader for real SmartSpot-style data.

Generation: :func:`generate_episodes` draws one user per episode (:func:`sample_user`), builds
the app (:class:`PersonaApp`) and records the demonstrator's episode. Every episode has its
own seeded :class:`random.Random` (from the seed, the channel and its number), so dropping a
channel leaves the other episodes as they were. Presets (:data:`PRESETS`):

* ``tiny``: two episodes per channel (14), 224 x 448 screens, for the CPU and CI;
* ``smartspot_like``: SmartSpot's 122 episodes (food, hotel, flight, movie and medicine 20
  each, the two travel scenarios 12 and 10) on 448 x 896 screens, each channel within 15% of
  SmartSpot's per-episode GUI steps, recommend steps and instruction and intent lengths
  (:mod:`~odyssey_core.envs.persona.statistics`); 1,940 steps with seed 0.
  ``exclude_channels=("medicine",)`` leaves 102 episodes and 1,709 steps, the paper's 102
  and 1,713 (the paper does not say which 20 it left out; without food: 1,690 steps).

Splits are 8:1:1 by episode (:func:`assign_splits`), spread over the channels. Where several
moves are optimal the gold action is the demonstrator's first (a field is focused, then typed
into: ``type_directly_p`` 0), and every user accepts the :data:`~.users.TOP_M` best items, so
gold actions and labels carry no coin flip; detours stay, flagged on their steps.

A dataset folder (:func:`write_dataset`, :func:`read_dataset`): ``episodes.jsonl`` (one
:meth:`EpisodeRecord.to_json` a line, sorted keys), ``screens/<episode>/<step>.png`` and
``manifest.json`` (preset, seed, counts per split and channel, mean steps per channel and a
content hash of everything else). PNGs are written with fixed parameters and nothing carries
a timestamp, so the same episodes give a byte-identical folder.

SmartSpot-style input (:func:`load_smartspot`): a folder with ``episodes.json``::

    {"episodes": [
      {"episode_id": "ep-001", "channel": "hotel",
       "request": "I am going to New York, any hotels?",
       "intent": "...",                  (optional: else the pool step's input_text)
       "intent_slots": {"city": "New York"},           (optional)
       "split": "train",                 (optional: else assigned 8:1:1)
       "steps": [
         {"screenshot": "shots/ep-001-0.png", "action": "click",
          "point": [540, 1210], "bbox": [60, 1150, 1020, 1270]},
         {"screenshot": "shots/ep-001-1.png", "action": "type", "point": [540, 400],
          "input_text": "New York"},
         {"screenshot": "...", "action": "pool_found", "input_text": "4-star hotel ..."},
         {"screenshot": "...", "action": "recommendation", "candidate": "hotel-3",
          "label": "Yes"}]}]}

Screenshots may have any size; ``point`` and ``bbox`` (inclusive corners) are in that
screenshot's pixels. A click or type needs a point or a bbox (a missing point is the box's
centre; a missing box is a small square around the point). ``stage`` may be given; it must
agree with the action (``pool_found`` is the pool step, ``recommendation`` a recommend step,
the rest search). The loader resizes every screenshot to the requested size and rescales
every point and box corner with :func:`~odyssey_core.protocol.gui.rescale_point`.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from odyssey_core.common.images import encode_png
from odyssey_core.envs.persona.app import PersonaApp
from odyssey_core.envs.persona.catalog import CHANNELS
from odyssey_core.envs.persona.demonstrator import record_demonstration
from odyssey_core.envs.persona.episode import SPLITS, EpisodeRecord, StepRecord
from odyssey_core.envs.persona.render import FastRenderer, Renderer
from odyssey_core.envs.persona.screen import Element, Screen
from odyssey_core.envs.persona.users import AMBIGUITY_LEVELS, sample_user
from odyssey_core.protocol.gui import (
    ACTION_TYPES,
    ALIASES,
    NO_POINT,
    NO_TEXT,
    POINTED_ACTIONS,
    GuiAction,
    rescale_point,
)

__all__ = [
    "DATASET_FORMAT",
    "PRESETS",
    "DatasetPreset",
    "SmartSpotFormatError",
    "assign_splits",
    "content_hash",
    "generate_episodes",
    "load_smartspot",
    "load_step_image",
    "read_dataset",
    "read_manifest",
    "write_dataset",
]

DATASET_FORMAT = "odyssey-persona/1"
SPLIT_RATIOS: tuple[int, int, int] = (8, 1, 1)  # train : val : test, by episode


@dataclass(frozen=True)
class DatasetPreset:
    name: str
    episodes_per_channel: dict[str, int]
    width: int
    height: int
    detour_p: float = 0.1  # chance of a detour at each search step
    max_detours: int = 2
    popup_p: float = 0.2  # chance that an episode has a pop-up
    # over AMBIGUITY_LEVELS: every request leaves something implicit, as SmartSpot's do; a
    # positive first weight adds fully specified requests
    ambiguity_weights: tuple[float, ...] = (0.0, 0.5, 0.5)
    # chance that a field is typed into without the click that focuses it (both are optimal):
    # 0 makes the demonstrated (gold) action the demonstrator's first optimal move, so a step
    # reward and Step SR never score a coin flip
    type_directly_p: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[str, DatasetPreset] = {
    "tiny": DatasetPreset("tiny", dict.fromkeys(CHANNELS, 2), 224, 448),
    "smartspot_like": DatasetPreset(
        "smartspot_like",
        {
            "food": 20,
            "hotel": 20,
            "flight": 20,
            "movie": 20,
            "medicine": 20,
            "travel": 12,
            "travel_dining": 10,
        },
        448,
        896,
    ),
}


def assign_splits(
    channels: Sequence[str], ratios: tuple[int, int, int] = SPLIT_RATIOS
) -> list[str]:
    """The split of each episode (given in order by its channel), train:val:test = ``ratios``.

    n_val = round(n * val / total) and n_test likewise; train takes the rest. Val takes each
    channel's last episode in turn (round-robin over the channels), then each channel's second
    to last ..., and test continues where val stopped, so both spread over the channels."""
    n, total = len(channels), sum(ratios)
    n_val, n_test = round(n * ratios[1] / total), round(n * ratios[2] / total)
    order = sorted(range(n), key=lambda i: (channels[i + 1 :].count(channels[i]), channels[i]))
    # ^ an episode's rank from the end of its channel, channels in name order within a rank
    splits = ["train"] * n
    for rank, i in enumerate(order[: n_val + n_test]):
        splits[i] = "val" if rank < n_val else "test"
    return splits


def generate_episodes(
    preset: str | DatasetPreset = "tiny",
    seed: int = 0,
    *,
    drop_channel: str | None = None,
    exclude_channels: Sequence[str] = (),
) -> list[EpisodeRecord]:
    """The preset's episodes from ``seed`` (records only; :func:`write_dataset` renders),
    without the channels in ``exclude_channels`` (``drop_channel``: one more)."""
    p = PRESETS[preset] if isinstance(preset, str) else preset
    excluded = {*exclude_channels, *([drop_channel] if drop_channel is not None else [])}
    unknown = sorted(excluded - set(p.episodes_per_channel))
    if unknown:
        raise ValueError(
            f"cannot drop {', '.join(map(repr, unknown))}: the preset has "
            f"{list(p.episodes_per_channel)}"
        )
    plan = [
        (channel, k)
        for channel, count in p.episodes_per_channel.items()
        if channel not in excluded
        for k in range(count)
    ]
    splits = assign_splits([channel for channel, _ in plan])
    episodes = []
    for (channel, k), split in zip(plan, splits, strict=True):
        rng = random.Random(f"episode:{seed}:{channel}:{k}")
        ambiguity = rng.choices(AMBIGUITY_LEVELS, weights=p.ambiguity_weights)[0]
        user = sample_user(channel, rng, ambiguity)
        popup = rng.choice(("search", "results")) if rng.random() < p.popup_p else None
        scenario = {
            "channel": channel,
            "catalog_seed": seed,
            "user": user.to_json(),
            "popup": popup,
        }
        app = PersonaApp(scenario, p.width, p.height)
        episodes.append(
            record_demonstration(
                app,
                f"{channel}-{k:03d}",
                rng,
                detour_p=p.detour_p,
                max_detours=p.max_detours,
                type_directly_p=p.type_directly_p,
                split=split,
            )
        )
    return episodes


# ------------------------------------------------------------------------------ the folder
def content_hash(folder: str | Path) -> str:
    """sha256 over ``episodes.jsonl`` and ``screens/``: each file's relative path and bytes,
    in path order."""
    root = Path(folder)
    digest = hashlib.sha256()
    files = [root / "episodes.jsonl", *sorted((root / "screens").rglob("*.png"))]
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def write_dataset(
    folder: str | Path,
    episodes: Sequence[EpisodeRecord],
    *,
    renderer: Renderer | None = None,
    images: Mapping[str, np.ndarray] | None = None,
    preset: str | None = None,
    seed: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``episodes`` to ``folder``: each step's screenshot is ``images[step.image]`` when
    given (loaded real data), else ``renderer`` (default :class:`FastRenderer`) draws its
    screen. ``overwrite`` replaces a dataset already there (only the files a dataset has)."""
    root = Path(folder)
    if (root / "episodes.jsonl").exists():
        if not overwrite:
            raise FileExistsError(f"{root} already holds a dataset (pass overwrite=True)")
        shutil.rmtree(root / "screens", ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    renderer = renderer or FastRenderer()
    lines = []
    for episode in episodes:
        for step in episode.steps:
            image = images[step.image] if images and step.image in images else None
            if image is None:
                image = renderer.render(step.screen)
            if image.shape != (episode.height, episode.width, 3) or image.dtype != np.uint8:
                raise ValueError(
                    f"{episode.episode_id} step {step.index}: screenshot is {image.dtype} "
                    f"{image.shape}, expected uint8 {(episode.height, episode.width, 3)}"
                )
            path = root / step.image
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_png(image))
        lines.append(json.dumps(episode.to_json(), sort_keys=True, separators=(",", ":")))
    (root / "episodes.jsonl").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    channels = Counter(e.channel for e in episodes)
    steps = Counter()
    for e in episodes:
        steps[e.channel] += len(e.steps)
    manifest = {
        "format": DATASET_FORMAT,
        "preset": preset,
        "seed": seed,
        "renderer": "given images" if images else type(renderer).__name__,
        "episodes": len(episodes),
        "steps": sum(steps.values()),
        "splits": {s: sum(e.split == s for e in episodes) for s in SPLITS},
        "channels": dict(sorted(channels.items())),
        "mean_steps": {c: round(steps[c] / channels[c], 2) for c in sorted(channels)},
        "sizes": sorted({f"{e.width}x{e.height}" for e in episodes}),
        "content_hash": content_hash(root),
    }
    (root / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return root


def read_manifest(folder: str | Path) -> dict[str, Any]:
    return json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))


def read_dataset(folder: str | Path, split: str | None = None) -> list[EpisodeRecord]:
    """The episodes of a dataset folder (of one split when ``split`` is given)."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; splits: {SPLITS}")
    path = Path(folder) / "episodes.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: not a persona dataset folder")
    episodes = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            episode = EpisodeRecord.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{number}: not an episode record: {err}") from err
        if split is None or episode.split == split:
            episodes.append(episode)
    return episodes


def load_step_image(folder: str | Path, step: StepRecord) -> np.ndarray:
    """A step's screenshot from a dataset folder, ``uint8[H, W, 3]``."""
    with Image.open(Path(folder) / step.image) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8).copy()


# --------------------------------------------------------------------- SmartSpot-style input
class SmartSpotFormatError(ValueError):
    """A SmartSpot-style file that does not follow the documented layout."""


def _pair(value: Any, size: int, what: str, where: str) -> tuple[float, ...]:
    if not isinstance(value, list | tuple) or len(value) != size:
        raise SmartSpotFormatError(
            f"{where}: {what} must be a list of {size} numbers, got {value!r}"
        )
    try:
        return tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise SmartSpotFormatError(f"{where}: {what} must hold numbers, got {value!r}") from None


def _stage_of(action: str) -> str:
    return {"pool_found": "pool", "recommendation": "recommend"}.get(action, "search")


def _load_step(
    raw: Any, k: int, root: Path, episode_id: str, size: tuple[int, int], where: str
) -> tuple[StepRecord, np.ndarray, str | None]:
    """One step: the record, its resized screenshot and its label (recommend steps)."""
    where = f"{where} step {k}"
    if not isinstance(raw, dict):
        raise SmartSpotFormatError(f"{where}: a step must be an object")
    for key in ("screenshot", "action"):
        if key not in raw:
            raise SmartSpotFormatError(f"{where}: missing {key!r}")
    action = ALIASES.get(str(raw["action"]).strip().lower(), str(raw["action"]).strip().lower())
    if action not in ACTION_TYPES:
        raise SmartSpotFormatError(f"{where}: unknown action {raw['action']!r}; {ACTION_TYPES}")
    stage = _stage_of(action)
    if raw.get("stage", stage) != stage:
        raise SmartSpotFormatError(
            f"{where}: stage {raw['stage']!r} does not fit action {action!r}"
        )
    shot = root / str(raw["screenshot"])
    try:
        with Image.open(shot) as opened:
            source = opened.size
            resized = opened.convert("RGB").resize(size, Image.Resampling.BILINEAR)
    except (OSError, ValueError) as err:
        raise SmartSpotFormatError(f"{where}: cannot read screenshot {shot}: {err}") from err
    width, height = size
    text = str(raw.get("input_text") or NO_TEXT)
    label = None
    elements: tuple[Element, ...] = ()
    point, target = NO_POINT, None
    if action in POINTED_ACTIONS:
        if raw.get("point") is None and raw.get("bbox") is None:
            raise SmartSpotFormatError(f"{where}: a {action} needs a 'point' or a 'bbox'")
        if raw.get("bbox") is not None:
            x0, y0, x1, y1 = _pair(raw["bbox"], 4, "bbox", where)
            if x0 > x1 or y0 > y1:
                raise SmartSpotFormatError(f"{where}: bbox {raw['bbox']} is not [x0, y0, x1, y1]")
            bx0, by0 = rescale_point((x0, y0), source, size)
            bx1, by1 = rescale_point((x1, y1), source, size)
            box = (bx0, by0, bx1, by1)
        if raw.get("point") is not None:
            px, py = _pair(raw["point"], 2, "point", where)
            if not (0 <= px < source[0] and 0 <= py < source[1]):
                raise SmartSpotFormatError(
                    f"{where}: point {raw['point']} is off the {source} screenshot"
                )
            point = rescale_point((px, py), source, size)
        else:
            point = ((box[0] + box[2]) // 2, (box[1] + box[3]) // 2)
        if raw.get("bbox") is None:  # a small square around the point stands in for the box
            r = max(1, round(0.02 * width))
            box = (
                max(0, point[0] - r),
                max(0, point[1] - r),
                min(width - 1, point[0] + r),
                min(height - 1, point[1] + r),
            )
        elements, target = (Element("target", "button", box, command="target"),), "target"
        if action == "type" and text == NO_TEXT:
            raise SmartSpotFormatError(f"{where}: a type needs 'input_text'")
    elif action == "recommendation":
        label = str(raw.get("label", text)).strip().capitalize()
        if label not in ("Yes", "No"):
            raise SmartSpotFormatError(
                f"{where}: a recommendation's label must be Yes or No, got {label!r}"
            )
        if not raw.get("candidate"):
            raise SmartSpotFormatError(f"{where}: a recommendation needs its 'candidate'")
        text = label
    elif action == "pool_found" and text == NO_TEXT:
        raise SmartSpotFormatError(
            f"{where}: the pool step needs 'input_text' (the intent summary)"
        )
    step = StepRecord(
        index=k,
        stage=stage,
        screen=Screen(stage, width, height, elements),
        image=f"screens/{episode_id}/{k:02d}.png",
        gold=GuiAction(action, point, text),
        target_id=target,
        optimal=((action, target),),
        candidate=str(raw["candidate"]) if action == "recommendation" else None,
    )
    return step, np.asarray(resized, dtype=np.uint8).copy(), label


def load_smartspot(
    folder: str | Path, width: int, height: int
) -> tuple[list[EpisodeRecord], dict[str, np.ndarray]]:
    """Read ``folder/episodes.json`` (the layout in this module's docstring) into episode
    records on ``width x height`` screenshots, with the resized screenshots by image path
    (hand both to :func:`write_dataset` to make a dataset folder)."""
    root = Path(folder)
    path = root / "episodes.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SmartSpotFormatError(f"{path} not found") from None
    except json.JSONDecodeError as err:
        raise SmartSpotFormatError(f"{path}: not JSON: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("episodes"), list):
        raise SmartSpotFormatError(f"{path}: expected an object with an 'episodes' list")
    loaded, images = [], {}
    for i, raw in enumerate(data["episodes"]):
        where = f"{path}: episode {i}"
        if not isinstance(raw, dict):
            raise SmartSpotFormatError(f"{where}: an episode must be an object")
        for key in ("episode_id", "channel", "request", "steps"):
            if key not in raw:
                raise SmartSpotFormatError(f"{where}: missing {key!r}")
        episode_id = str(raw["episode_id"])
        where = f"{where} ({episode_id})"
        if not isinstance(raw["steps"], list) or not raw["steps"]:
            raise SmartSpotFormatError(f"{where}: 'steps' must be a non-empty list")
        steps, labels = [], {}
        for k, raw_step in enumerate(raw["steps"]):
            step, image, label = _load_step(raw_step, k, root, episode_id, (width, height), where)
            steps.append(step)
            images[step.image] = image
            if label is not None:
                labels[step.candidate] = label
        pools = [s for s in steps if s.stage == "pool"]
        if len(pools) != 1:
            raise SmartSpotFormatError(
                f"{where}: needs exactly one pool_found step, has {len(pools)}"
            )
        loaded.append((raw, episode_id, steps, labels, pools[0].gold.text, where))
    splits = assign_splits([str(raw["channel"]) for raw, *_ in loaded])
    episodes = []
    for (raw, episode_id, steps, labels, summary, where), split in zip(loaded, splits, strict=True):
        try:
            episodes.append(
                EpisodeRecord(
                    episode_id=episode_id,
                    channel=str(raw["channel"]),
                    request=str(raw["request"]),
                    intent=str(raw.get("intent") or summary),
                    intent_slots={
                        str(k): str(v) for k, v in (raw.get("intent_slots") or {}).items()
                    },
                    yes_items=tuple(c for c, label in labels.items() if label == "Yes"),
                    width=width,
                    height=height,
                    steps=tuple(steps),
                    ambiguity=str(raw.get("ambiguity", "vague")),
                    split=str(raw.get("split") or split),
                )
            )
        except ValueError as err:
            raise SmartSpotFormatError(f"{where}: {err}") from err
    return episodes, images
