"""What a training run's folder holds and how its checkpoints are named, found and published.
No torch here: the pipeline stages and the launcher read run folders too.

Layout: ``<out>/checkpoints/step-XXXXXXXXX/`` (nine digits; older runs wrote six, and both
load) and ``<out>/checkpoints/latest``, a one-line pointer replaced atomically last. Steps are
compared as numbers, never as names, so ``step-1000000`` comes after ``step-999999``.

Writing a file of the run folder can fail (a full disk, a quota, a read-only folder);
:func:`run_write_error` turns that ``OSError`` into one that says what could not be written,
where, which checkpoint is still intact and what to do.
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

from odyssey_core.common.files import atomic_write, replace_folder

__all__ = [
    "CHECKPOINTS_DIR",
    "LATEST",
    "STATE_FILE",
    "STEP_DIGITS",
    "CheckpointWriteError",
    "RunWriteError",
    "checkpoint_name",
    "checkpoint_step",
    "checkpoint_write_error",
    "latest_checkpoint",
    "point_latest",
    "publish_step_folder",
    "run_write_error",
    "step_folders",
]

CHECKPOINTS_DIR = "checkpoints"
LATEST = "latest"
STATE_FILE = "trainer_state.pt"
STEP_DIGITS = 9
_STEP_NAME = re.compile(r"^step-(\d+)$")


class RunWriteError(OSError):
    """A file of a run folder could not be written (full disk, quota, read-only folder, ...).

    Keeps the ``errno`` of the failed write; ``folder`` is where it was written. The message
    says which checkpoint is still intact and what to do."""

    folder: Path


class CheckpointWriteError(RunWriteError):
    """A checkpoint could not be written. Nothing half-written is left behind."""


def run_write_error(
    error: OSError,
    out_dir: str | Path,
    what: str,
    *,
    folder: str | Path | None = None,
    kind: type[RunWriteError] = RunWriteError,
) -> RunWriteError:
    """A ``kind`` explaining ``error`` raised while writing ``what`` into ``folder`` (default:
    the run's checkpoints folder) of the run in ``out_dir``."""
    where = Path(folder) if folder is not None else Path(out_dir) / CHECKPOINTS_DIR
    previous = latest_checkpoint(out_dir)
    kept = (
        f"the previous checkpoint {previous} is intact"
        if previous is not None
        else "there is no earlier complete checkpoint"
    )
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        cause, fix = "the disk is full", f"free space on the disk that holds {where}"
    else:
        cause = error.strerror or type(error).__name__
        fix = f"make {where} writable"
    message = (
        f"could not write {what} under {where}: {cause} ({error}). Training stopped; {kept}. "
        f"To continue, {fix} (or move the run folder to a larger disk) and run again with "
        "resume: it continues from the last complete checkpoint."
    )
    wrapped = kind(error.errno or errno.EIO, message)
    wrapped.folder = where
    return wrapped


def checkpoint_write_error(error: OSError, out_dir: str | Path, what: str) -> CheckpointWriteError:
    """A :class:`CheckpointWriteError` explaining ``error`` raised while writing ``what``."""
    wrapped = run_write_error(error, out_dir, what, kind=CheckpointWriteError)
    assert isinstance(wrapped, CheckpointWriteError)
    return wrapped


def checkpoint_name(step: int) -> str:
    """The folder name of checkpoint ``step``."""
    return f"step-{step:0{STEP_DIGITS}d}"


def checkpoint_step(name: str) -> int | None:
    """The step a checkpoint folder's name stands for (any zero padding), or None."""
    match = _STEP_NAME.match(name)
    return int(match.group(1)) if match else None


def _order(path: Path) -> tuple[int, int]:
    # by step; of two names for one step, the wider (current) spelling is the newer
    return checkpoint_step(path.name) or 0, len(path.name)


def step_folders(root: str | Path, *, complete: bool = False) -> list[Path]:
    """The ``step-*`` folders in the checkpoints folder ``root``, oldest step first;
    ``complete``: only those holding their trainer state (the file written last)."""
    found = [
        path
        for path in Path(root).glob("step-*")
        if checkpoint_step(path.name) is not None
        and path.is_dir()
        and (not complete or (path / STATE_FILE).is_file())
    ]
    return sorted(found, key=_order)


def point_latest(out_dir: str | Path, checkpoint: Path) -> None:
    atomic_write(Path(out_dir) / CHECKPOINTS_DIR / LATEST, checkpoint.name + "\n")


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None.

    A crash between renaming a finished checkpoint into place and updating the pointer leaves
    a complete ``step-*`` newer than the pointer; step folders only ever appear complete, so
    the newest one (by step number) wins.
    """
    root = Path(out_dir) / CHECKPOINTS_DIR
    candidates = step_folders(root, complete=True)
    pointer = root / LATEST
    if pointer.is_file():
        named = root / pointer.read_text().strip()
        if (
            checkpoint_step(named.name) is not None
            and (named / STATE_FILE).is_file()
            and (not candidates or _order(named) >= _order(candidates[-1]))
        ):
            return named
    return candidates[-1] if candidates else None


def publish_step_folder(staged: Path, final: Path) -> None:
    """Rename the complete checkpoint folder ``staged`` to ``final`` (synced first). A re-save
    of the same step swaps the new folder in for the old one, so the step never disappears;
    a folder of the same step under an older spelling of its name goes after."""
    replace_folder(staged, final)
    step = checkpoint_step(final.name)
    for other in step_folders(final.parent):
        if other != final and checkpoint_step(other.name) == step:
            aside = other.with_name(f".tmp-superseded-{other.name}")  # gone in one rename
            other.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
