"""Small file-system helpers with no heavy imports (the artifact store uses them too).

Where a rename publishes something (a file, a checkpoint folder, a model folder), what it
publishes is synced to disk first and the folder that holds the new name is synced after:
otherwise a power loss can leave the new name pointing at data that never reached the disk.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
from pathlib import Path

__all__ = [
    "atomic_write",
    "exchange_paths",
    "fsync_dir",
    "fsync_tree",
    "replace_folder",
]

log = logging.getLogger(__name__)

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# What renameat2 answers where a kernel, a filesystem or a C library has no RENAME_EXCHANGE.
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Sync a folder's entries (the names created, renamed or removed in it) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EINVAL:  # a filesystem that cannot sync folders at all
            raise
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """Sync every file and folder under ``root`` (``root`` included) to disk, as written by
    writers that do not sync (``save_pretrained``, ``torch.save``)."""
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(dirpath)


def atomic_write(path: Path, data: str | bytes, tmp: Path | None = None) -> None:
    """Write ``data`` through ``tmp`` (default ``.<name>.tmp`` beside it), synced, then renamed
    over ``path`` and the folder synced: readers see the old file or the new one, never half of
    it, and so does the disk after a power loss. A failed write leaves no temp file behind."""
    tmp = tmp if tmp is not None else path.with_name(f".{path.name}.tmp")
    payload = data.encode() if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _renameat2() -> object | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not glibc >= 2.28 (or not Linux)
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _renameat2()


def exchange_paths(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``).

    Returns False, having changed nothing, where the system or the filesystem cannot; raises
    ``OSError`` for any other failure."""
    if _RENAMEAT2 is None:
        return False
    result = _RENAMEAT2(  # type: ignore[operator]
        _AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))


def replace_folder(staged: Path, final: Path) -> None:
    """Publish the complete folder ``staged`` under the name ``final`` (same filesystem).

    ``staged`` is synced first. Where ``final`` already exists the two are swapped atomically
    and the old one is deleted after, so a reader (or a crash) sees the old folder or the new
    one at ``final``, never no folder. Where the filesystem cannot swap, the old folder is
    renamed aside, the new one renamed in, and the old one deleted: a crash between those two
    renames leaves the old folder beside it as ``<staged name>.replaced``."""
    fsync_tree(staged)
    parent = final.parent
    if not final.exists():
        try:
            os.rename(staged, final)  # also replaces an empty folder
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        else:
            fsync_dir(parent)
            return
    if exchange_paths(staged, final):
        fsync_dir(parent)
        shutil.rmtree(staged, ignore_errors=True)
        return
    log.debug("%s cannot swap folders atomically; renaming the old one aside", parent)
    aside = staged.with_name(f"{staged.name}.replaced")
    os.rename(final, aside)
    os.rename(staged, final)
    fsync_dir(parent)
    shutil.rmtree(aside, ignore_errors=True)
