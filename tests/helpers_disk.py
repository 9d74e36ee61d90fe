"""A full disk for the tests: a size-limited tmpfs where this process may mount one, and a way
to fill it. Where mounting is refused, callers make writes fail with ENOSPC themselves."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int) -> Iterator[bool]:
    """A tmpfs of ``size_mb`` at ``path`` if this process may mount one (yields True), else
    a plain folder (yields False: the caller makes writes fail with ENOSPC itself)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = False
    if os.geteuid() == 0 and shutil.which("mount"):
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
            capture_output=True,
        )
        mounted = result.returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path, leave_bytes: int) -> Path:
    """Fill the filesystem of ``folder`` until about ``leave_bytes`` are free."""
    filler = folder / "filler.bin"
    free = shutil.disk_usage(folder).free
    with open(filler, "wb") as handle, contextlib.suppress(OSError):
        handle.write(b"\0" * max(0, free - leave_bytes))
    return filler


def enospc(*args: object, **kwargs: object) -> None:
    """A stand-in for a write that finds the disk full."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
