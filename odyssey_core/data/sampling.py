"""Sample frames from walkthrough videos: uniform in time per level, then near-duplicate removal.

For each level segment, ``frames_per_level x oversample`` candidate times are spread evenly
(the middle of equal time slots), decoded in one pass (imageio's ffmpeg plugin), and dropped
when their 64-bit DCT perceptual hash is within ``phash_threshold`` bits of a frame already
kept (in any level: a near-duplicate teaches nothing new wherever it comes from). The survivors
are thinned evenly to ``frames_per_level`` (with ``total_frames``, to each level's share of the
total, a level short of distinct frames leaving the rest to the others). Frames are resized to
the native Game Boy size the agent sees (``frame_size``), saved as
``frames/<sha256 of the PNG>.png``, and listed in ``samples.parquet`` with their frame index,
timestamp and, for recorded walkthroughs, the sidecar row of that frame index (``state``, a
JSON string).

With ``target_train_rows`` the sampler also keeps a *reserve* (``reserve.parquet``, its frames
under ``frames/`` too): every other distinct frame of the walkthroughs, the first pass's
unused candidates first, then every remaining frame index, each de-duplicated like the first
draw, in :func:`draw_order`. The annotate stage tops the first draw up from it
(:mod:`~odyssey_core.data.top_up`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import imageio.v2 as imageio
import numpy as np
import pyarrow.parquet as pq
from PIL import Image
from pydantic import Field

from odyssey_core.common.images import encode_png
from odyssey_core.config import StrictModel
from odyssey_core.data.dataset import read_table, write_bytes_atomic, write_table
from odyssey_core.data.walkthroughs import Walkthrough

__all__ = [
    "RESERVE_FILE",
    "SAMPLES_FILE",
    "SampledFrame",
    "SamplingConfig",
    "dct_phash",
    "draw_order",
    "hamming",
    "load_reserve",
    "load_samples",
    "sample_frames",
    "share_out",
    "uniform_indices",
]

SAMPLES_FILE = "samples.parquet"
RESERVE_FILE = "reserve.parquet"


class SamplingConfig(StrictModel):
    frames_per_level: int = Field(default=100, ge=1)
    total_frames: int | None = Field(
        default=None,
        ge=1,
        description="if set, this many in total instead, split evenly over the levels after "
        "de-duplication; a level with fewer distinct frames leaves its unused share to the "
        "others (within their oversampled candidates)",
    )
    oversample: float = Field(default=2.0, ge=1.0, description="candidates per wanted frame")
    phash_threshold: int = Field(default=4, ge=-1, le=64, description="-1 disables dedup")
    frame_size: tuple[int, int] | None = Field(
        default=(160, 144), description="(width, height) frames are resized to; None keeps"
    )
    target_train_rows: int | None = Field(
        default=None,
        ge=1,
        description="if set, curation tops up to exactly this many training rows: after "
        "labelling, quarantine and the validation split, a first draw that falls short is "
        "topped up from the walkthroughs' other distinct frames (labelled in turn) until the "
        "target is met, the surplus trimmed in draw order; walkthroughs that run out first "
        "fail the run (see short_of_target)",
    )
    short_of_target: Literal["error", "warn"] = Field(
        default="error",
        description="walkthroughs exhausted below target_train_rows: fail, or warn and keep "
        "the rows reached",
    )
    show_progress: bool = True


@dataclass(frozen=True)
class SampledFrame:
    frame_hash: str  # sha256 of the PNG bytes
    frame: str  # path relative to the samples folder
    phash: str  # 16 hex digits
    game: str
    level: str
    source: str
    walkthrough: str
    frame_index: int
    timestamp_s: float
    state: str | None = None  # the sidecar row as JSON (recorded walkthroughs only)

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.state is None else json.loads(self.state)


# ------------------------------------------------------------------------------------ pHash
def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II basis as an n x n matrix (row k = frequency k)."""
    k = np.arange(n)[:, None]
    x = np.arange(n)[None, :]
    matrix = np.cos(np.pi * (2 * x + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    matrix[0] /= np.sqrt(2.0)
    return matrix


_DCT32 = _dct_matrix(32)


def dct_phash(image: np.ndarray | Image.Image) -> int:
    """A 64-bit perceptual hash: grey 32x32, 2-D DCT, the 8x8 lowest frequencies compared
    with their median (DC term excluded from the median so brightness alone does not decide)."""
    pil = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
    grey = np.asarray(pil.convert("L").resize((32, 32), Image.Resampling.BILINEAR), np.float64)
    low = (_DCT32 @ grey @ _DCT32.T)[:8, :8].ravel()
    bits = low > np.median(low[1:])
    return int(np.packbits(bits).view(">u8")[0])


def hamming(a: int, b: int) -> int:
    return (int(a) ^ int(b)).bit_count()


class _HashIndex:
    """Kept hashes; answers 'is anything within t bits?' with one vectorised XOR."""

    def __init__(self) -> None:
        self._hashes = np.zeros(0, dtype=np.uint64)

    def near(self, value: int, threshold: int) -> bool:
        if threshold < 0 or not len(self._hashes):
            return False
        distances = np.bitwise_count(self._hashes ^ np.uint64(value))
        return bool(distances.min() <= threshold)

    def add(self, value: int) -> None:
        self._hashes = np.append(self._hashes, np.uint64(value))


# ------------------------------------------------------------------------------------ sampling
def uniform_indices(start_s: float, end_s: float, fps: float, count: int, limit: int) -> list[int]:
    """Frame indices at the middles of ``count`` equal time slots of [start_s, end_s)."""
    first = int(np.ceil(start_s * fps - 1e-9))
    last = min(limit, int(np.ceil(end_s * fps - 1e-9))) - 1
    if last < first or count <= 0:
        return []
    span = end_s - start_s
    times = start_s + (np.arange(count) + 0.5) * span / count
    indices = np.clip(np.floor(times * fps).astype(int), first, last)
    return sorted(set(indices.tolist()))


def _evenly(items: list[Any], count: int) -> list[Any]:
    if len(items) <= count:
        return items
    picks = np.floor((np.arange(count) + 0.5) * len(items) / count).astype(int)
    return [items[i] for i in picks]


def _png_bytes(frame: np.ndarray, size: tuple[int, int] | None) -> tuple[bytes, Image.Image]:
    image = Image.fromarray(np.ascontiguousarray(frame)).convert("RGB")
    if size is not None and image.size != tuple(size):
        # Box filter: an x2 pixel-repeat video averages back to the original pixels.
        image = image.resize(tuple(size), Image.Resampling.BOX)
    return encode_png(image), image


def _stream(
    path: str, wanted: set[int], label: str, show: bool
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (index, frame) for the ``wanted`` frame indices in video order, one at a time
    (a whole video's frames would not fit in memory); decoding stops after the last one."""
    from tqdm.auto import tqdm

    if not wanted:
        return
    last = max(wanted)
    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        with tqdm(total=last + 1, desc=f"decode {label}", unit="frame", disable=not show) as bar:
            for index, frame in enumerate(reader):
                if index in wanted:
                    yield index, np.asarray(frame)
                bar.update(1)
                if index >= last:
                    break
    finally:
        reader.close()


def _bit_reversed(count: int) -> list[int]:
    """0..count-1 in bit-reversed (van der Corput) order: every prefix spreads evenly."""
    if count <= 1:
        return list(range(count))
    bits = (count - 1).bit_length()
    order = (int(format(i, f"0{bits}b")[::-1], 2) for i in range(1 << bits))
    return [i for i in order if i < count]


def draw_order(frames: Sequence[SampledFrame]) -> list[SampledFrame]:
    """The order frames are drawn (and trimmed) in: the levels in turn (round robin, in the
    order they first appear), within a level in bit-reversed order of its frames as given
    (video order), so any prefix is spread evenly over the levels and over time."""
    by_level: dict[tuple[str, str], list[SampledFrame]] = {}
    for frame in frames:
        by_level.setdefault((frame.game, frame.level), []).append(frame)
    queues = [[items[i] for i in _bit_reversed(len(items))] for items in by_level.values()]
    ordered: list[SampledFrame] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        ordered += [q[rank] for q in queues if rank < len(q)]
    return ordered


def _per_level_target(config: SamplingConfig, walkthroughs: Sequence[Walkthrough]) -> int:
    """Frames wanted per level before any redistribution (sizes the candidate lists)."""
    if config.total_frames is None:
        return config.frames_per_level
    levels = {(w.game, s["level"]) for w in walkthroughs for s in w.segments}
    return max(1, -(-config.total_frames // max(1, len(levels))))


def share_out(
    total: int, capacities: Sequence[int], weights: Sequence[float] | None = None
) -> list[int]:
    """Split ``total`` items over bins in proportion to ``weights`` (evenly when None), no bin
    above its capacity: what a full bin cannot take goes to the others (water-filling).
    Integer and deterministic; the sum is ``min(total, sum(capacities))``."""
    n = len(capacities)
    weight = [1.0] * n if weights is None else [max(0.0, float(w)) for w in weights]
    alloc = [0] * n
    open_bins = [i for i in range(n) if capacities[i] > 0]
    remaining = min(total, sum(max(0, c) for c in capacities))
    while remaining > 0 and open_bins:
        mass = sum(weight[i] for i in open_bins)
        share = {
            i: remaining * (weight[i] / mass if mass > 0 else 1 / len(open_bins)) for i in open_bins
        }
        full = [i for i in open_bins if capacities[i] - alloc[i] <= share[i]]
        if full:  # fill these to the brim and share the rest again
            for i in full:
                remaining -= capacities[i] - alloc[i]
                alloc[i] = capacities[i]
            open_bins = [i for i in open_bins if i not in full]
            continue
        floors = {i: int(np.floor(share[i])) for i in open_bins}
        for i in open_bins:
            alloc[i] += floors[i]
        left = remaining - sum(floors.values())
        # The last few items go to the largest remainders (ties: the earlier bin).
        for i in sorted(open_bins, key=lambda i: (floors[i] - share[i], i))[:left]:
            alloc[i] += 1
        remaining = 0
    return alloc


def sample_frames(
    walkthroughs: Sequence[Walkthrough], out_dir: str | Path, config: SamplingConfig
) -> list[SampledFrame]:
    """Sample, dedupe and save frames of all walkthroughs; writes ``samples.parquet``.

    With ``total_frames``, the total is shared out after de-duplication: a level (or one of
    its videos) holding fewer distinct frames than its share leaves the rest to the others,
    as far as their candidates (``oversample``) reach."""
    out = Path(out_dir)
    (out / "frames").mkdir(parents=True, exist_ok=True)
    per_level = _per_level_target(config, walkthroughs)
    # A level spread over several segments/videos shares its budget by segment duration.
    durations: dict[tuple[str, str], float] = {}
    for w in walkthroughs:
        for s in w.segments:
            key = (w.game, s["level"])
            durations[key] = durations.get(key, 0.0) + s["end_s"] - s["start_s"]
    index = _HashIndex()
    seen_sha: set[str] = set()
    pngs: dict[str, bytes] = {}

    def distinct(
        pixels: np.ndarray, w: Walkthrough, level: str, i: int, sidecar: dict[int, Any]
    ) -> tuple[SampledFrame, bytes] | None:
        """The frame and its PNG, unless it (nearly) repeats one already kept."""
        data, image = _png_bytes(pixels, config.frame_size)
        sha = hashlib.sha256(data).hexdigest()
        phash = dct_phash(image)
        if sha in seen_sha or index.near(phash, config.phash_threshold):
            return None
        index.add(phash)
        seen_sha.add(sha)
        row = sidecar.get(i)
        frame = SampledFrame(
            frame_hash=sha,
            frame=f"frames/{sha}.png",
            phash=f"{phash:016x}",
            game=w.game,
            level=level,
            source=w.source,
            walkthrough=w.name,
            frame_index=i,
            timestamp_s=i / w.fps,
            state=None if row is None else json.dumps(row, sort_keys=True),
        )
        return frame, data

    sidecars: dict[str, dict[int, dict[str, Any]]] = {}
    candidates_of: dict[tuple[str, int], set[int]] = {}  # (walkthrough, segment) -> indices
    # Every segment's distinct candidates, in video order: (level key, duration, want, kept).
    segments: list[tuple[tuple[str, str], float, int, list[SampledFrame]]] = []
    for w in walkthroughs:
        sidecar: dict[int, dict[str, Any]] = {}
        if w.sidecar:
            sidecar = {int(r["frame_index"]): r for r in read_table(w.sidecar)}
        sidecars[w.name] = sidecar
        plan: list[tuple[dict[str, Any], int, list[int]]] = []
        for number, s in enumerate(w.segments):
            share = (s["end_s"] - s["start_s"]) / durations[(w.game, s["level"])]
            want = max(1, round(per_level * share))
            candidates = int(np.ceil(want * config.oversample))
            indices = uniform_indices(s["start_s"], s["end_s"], w.fps, candidates, w.frame_count)
            candidates_of[(w.name, number)] = set(indices)
            plan.append((s, want, indices))
        wanted = {i for _, _, indices in plan for i in indices}
        decoded = dict(_stream(w.video, wanted, w.name, config.show_progress))
        for s, want, indices in plan:
            kept: list[SampledFrame] = []
            for i in indices:
                if i not in decoded:  # the container promised more frames than it holds
                    continue
                found = distinct(decoded[i], w, s["level"], i, sidecar)
                if found is not None:
                    kept.append(found[0])
                    pngs[found[0].frame_hash] = found[1]
            segments.append(((w.game, s["level"]), s["end_s"] - s["start_s"], want, kept))
    counts = [want for _, _, want, _ in segments]
    if config.total_frames is not None:
        levels = list(durations)
        capacity = [sum(len(k) for key, _, _, k in segments if key == lv) for lv in levels]
        for level, budget in zip(levels, share_out(config.total_frames, capacity), strict=True):
            mine = [j for j, seg in enumerate(segments) if seg[0] == level]
            split = share_out(
                budget, [len(segments[j][3]) for j in mine], [segments[j][1] for j in mine]
            )
            for j, count in zip(mine, split, strict=True):
                counts[j] = count
    samples: list[SampledFrame] = []
    unused: list[SampledFrame] = []  # distinct candidates the first draw thinned away
    for (_, _, _, kept), count in zip(segments, counts, strict=True):
        drawn = _evenly(kept, count)
        chosen = {sample.frame_hash for sample in drawn}
        unused += [sample for sample in kept if sample.frame_hash not in chosen]
        for sample in drawn:
            _save_png(out / sample.frame, pngs[sample.frame_hash])
            samples.append(sample)
    write_table(out / SAMPLES_FILE, [s.__dict__ for s in samples])
    reserve_path = out / RESERVE_FILE
    if config.target_train_rows is None:
        reserve_path.unlink(missing_ok=True)  # a reserve of an earlier config would mislead
        return samples
    reserve = list(unused)
    for sample in unused:
        _save_png(out / sample.frame, pngs[sample.frame_hash])
    pngs.clear()
    for w in walkthroughs:  # then every frame index the first pass did not look at
        segment_of: dict[int, str] = {}
        for number, s in enumerate(w.segments):
            for i in uniform_indices(s["start_s"], s["end_s"], w.fps, w.frame_count, w.frame_count):
                if i not in candidates_of[(w.name, number)]:
                    segment_of.setdefault(i, s["level"])
        for i, pixels in _stream(w.video, set(segment_of), w.name, config.show_progress):
            found = distinct(pixels, w, segment_of[i], i, sidecars[w.name])
            if found is not None:
                _save_png(out / found[0].frame, found[1])
                reserve.append(found[0])
    # video order within a level (the walkthroughs in turn), then the draw order
    position = {w.name: n for n, w in enumerate(walkthroughs)}
    reserve.sort(key=lambda f: (position[f.walkthrough], f.frame_index))
    write_table(reserve_path, [s.__dict__ for s in draw_order(reserve)])
    return samples


def _save_png(target: Path, data: bytes) -> None:
    if not target.exists():  # content-addressed: an existing file is identical
        write_bytes_atomic(target, data)


def _read_frames(path: Path) -> list[SampledFrame]:
    if not pq.read_metadata(path).num_rows:
        return []
    return [SampledFrame(**row) for row in read_table(path)]


def load_samples(out_dir: str | Path) -> list[SampledFrame]:
    """The first draw (``samples.parquet``)."""
    return _read_frames(Path(out_dir) / SAMPLES_FILE)


def load_reserve(out_dir: str | Path) -> list[SampledFrame]:
    """The reserve in draw order (``reserve.parquet``, written with ``target_train_rows``)."""
    path = Path(out_dir) / RESERVE_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: these samples were drawn without sampling.target_train_rows; "
            "rerun the sample stage (odyssey curate sample) with it set"
        )
    return _read_frames(path)
