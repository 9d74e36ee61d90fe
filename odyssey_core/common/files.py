"""Small file-system helpers with no heavy imports (the artifact store uses them too)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: Path, data: str | bytes, tmp: Path | None = None) -> None:
    """Write ``data`` through ``tmp`` (default ``.<name>.tmp`` beside it), synced, then renamed
    over ``path``: readers see the old file or the new one, never half of it. A failed write
    leaves no temp file behind."""
    tmp = tmp if tmp is not None else path.with_name(f".{path.name}.tmp")
    payload = data.encode() if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
