"""Frames kept on disk: a TurnBatch's frames without holding them in host memory.

A Table-9 rollout (1024 trajectories of up to 400 turns) is ~400k frames, ~28 GB as arrays.
:class:`FrameStore` writes each frame once, appended to one file in a folder it owns, and
reads a frame back (one ``preadv`` into a fresh array) only when it is indexed;
:class:`FrameView` is the list-like face a TurnBatch holds: ``frames[i]`` is a uint8
``[H, W, 3]`` array, ``frames[a:b]`` a list of them, ``len``/iteration as for a list, and
``select(rows)`` another view without reading anything. The readers (the CNN critic's chunks,
the policy's scoring micro-batches) index a few frames at a time, so at most those few are in
memory; the operating system's page cache does the rest.

The folder is created under ``ODYSSEY_FRAMES_DIR`` (default: the system's temp folder) and
removed when the store is closed or garbage collected (once the last view of it is gone). Put
it on a disk, not a tmpfs such as ``/dev/shm``, where the frames would occupy memory again.
Within one host a view survives ``fork``; pickling a view (to another process or host) sends
the frames themselves, as a list.

``ODYSSEY_FRAMES_ON_DISK=N`` makes every TurnBatch built with more than N frames move them
into a store (:func:`spill_threshold`; 0: always, unset: never).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

__all__ = [
    "FRAMES_DIR_ENV",
    "SPILL_ENV",
    "FrameStore",
    "FrameView",
    "concat_frames",
    "spill_threshold",
    "store_frames",
    "take_frames",
]

FRAMES_DIR_ENV = "ODYSSEY_FRAMES_DIR"  # where stores create their folders
SPILL_ENV = "ODYSSEY_FRAMES_ON_DISK"  # batches with more frames than this keep them on disk
DATA_FILE = "frames.u8"


def spill_threshold() -> int | None:
    """``ODYSSEY_FRAMES_ON_DISK`` as a frame count: batches with more frames than this keep
    them on disk; None (unset or empty) keeps every batch's frames in memory."""
    text = os.environ.get(SPILL_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{SPILL_ENV} must be a whole number of frames, got {text!r}") from None
    if value < 0:
        raise ValueError(f"{SPILL_ENV} must be >= 0, got {value}")
    return value


def _release(fd: int, folder: str, owner: int) -> None:
    os.close(fd)
    if os.getpid() == owner:  # a forked child that exits leaves its parent's frames alone
        shutil.rmtree(folder, ignore_errors=True)


class FrameStore:
    """uint8 frames appended to one file in a folder this store owns.

    ``append`` writes a frame and returns its row; ``read(row)`` returns a fresh array. Frames
    may differ in shape. The folder goes away with :meth:`close` or when the store is garbage
    collected.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        root = directory if directory is not None else os.environ.get(FRAMES_DIR_ENV) or None
        if root is not None:
            Path(root).mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="odyssey-frames-", dir=root))
        self.path = self.folder / DATA_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._offsets = array("q")  # byte offset of each frame in the file
        self._shapes = array("q")  # three numbers per frame: its shape
        self._end = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, _release, self._fd, str(self.folder), os.getpid())

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def nbytes(self) -> int:
        """Bytes of frame data written so far."""
        return self._end

    @property
    def closed(self) -> bool:
        return self._closed

    def append(self, frame: np.ndarray) -> int:
        """Write one uint8 [H, W, C] frame; its row number."""
        self._check_open()
        array_ = np.asarray(frame)
        if array_.dtype != np.uint8 or array_.ndim != 3:
            raise ValueError(
                f"frames are uint8 [H, W, C] arrays, got {array_.dtype} {tuple(array_.shape)}"
            )
        data = np.ascontiguousarray(array_)
        view = memoryview(data).cast("B")
        written = 0
        while written < len(view):  # os.pwrite may write less than asked
            written += os.pwrite(self._fd, view[written:], self._end + written)
        self._offsets.append(self._end)
        self._shapes.extend(data.shape)
        self._end += data.nbytes
        return len(self._offsets) - 1

    def extend(self, frames: Iterable[np.ndarray]) -> None:
        for frame in frames:
            self.append(frame)

    def shape(self, row: int) -> tuple[int, int, int]:
        h, w, c = self._shapes[3 * row : 3 * row + 3]
        return h, w, c

    def read(self, row: int) -> np.ndarray:
        """Frame ``row`` as a new uint8 array (nothing else stays in memory)."""
        self._check_open()
        if not 0 <= row < len(self._offsets):
            raise IndexError(f"frame {row} of a store of {len(self._offsets)}")
        out = np.empty(self.shape(row), dtype=np.uint8)
        got = os.preadv(self._fd, [out], self._offsets[row])
        if got != out.nbytes:
            raise OSError(f"{self.path}: frame {row} is cut short ({got} of {out.nbytes} bytes)")
        return out

    def view(self, rows: Sequence[int] | np.ndarray | None = None) -> FrameView:
        """A list-like view of ``rows`` (default: every frame written so far)."""
        return FrameView(self, np.arange(len(self)) if rows is None else rows)

    def close(self) -> None:
        """Delete the folder now; views of this store can no longer be read."""
        self._closed = True
        self._finalizer()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"frame store {self.folder} is closed")

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._end / 2**20:.1f} MiB"
        return f"FrameStore({str(self.folder)!r}, {len(self)} frames, {state})"


class FrameView(Sequence[np.ndarray]):
    """Rows of a :class:`FrameStore`, indexed like a list of uint8 arrays; reads on access.

    Holds its store (and so its folder) alive."""

    def __init__(self, store: FrameStore, rows: Sequence[int] | np.ndarray) -> None:
        self.store = store
        self.rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if self.rows.size and (self.rows.min() < 0 or self.rows.max() >= len(store)):
            raise IndexError(f"rows outside a store of {len(store)} frames")

    def __len__(self) -> int:
        return int(self.rows.size)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> list[np.ndarray]: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(index, slice):
            return [self.store.read(int(r)) for r in self.rows[index]]
        return self.store.read(int(self.rows[index]))

    def __iter__(self) -> Iterator[np.ndarray]:
        for row in self.rows.tolist():
            yield self.store.read(row)

    def select(self, indices: Sequence[int] | np.ndarray) -> FrameView:
        """The frames at ``indices`` of this view, as a view (nothing is read)."""
        return FrameView(self.store, self.rows[np.asarray(indices, dtype=np.int64)])

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))  # another process gets the frames, not a path

    def __repr__(self) -> str:
        return f"FrameView({len(self)} frames of {self.store!r})"


Frames = list[np.ndarray] | FrameView


def store_frames(frames: Iterable[np.ndarray], directory: str | Path | None = None) -> FrameView:
    """Write ``frames`` one at a time into a new store; a view of all of them."""
    store = FrameStore(directory)
    store.extend(frames)
    return store.view()


def take_frames(frames: Sequence[np.ndarray], rows: Sequence[int]) -> Sequence[np.ndarray]:
    """``[frames[i] for i in rows]`` that reads nothing yet when ``frames`` is on disk."""
    if isinstance(frames, FrameView):
        return frames.select(list(rows))
    return [frames[i] for i in rows]


def concat_frames(
    parts: Sequence[Sequence[np.ndarray]], directory: str | Path | None = None
) -> Frames:
    """Frames of several batches in order: a list when all are lists, else one new store
    (filled one frame at a time, so joining on-disk batches stays out of memory)."""
    if all(isinstance(part, list) for part in parts):
        return [frame for part in parts for frame in part]
    return store_frames((frame for part in parts for frame in part), directory)
