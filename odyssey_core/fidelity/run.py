"""What a comparison is given to run: its folders, seeds, budget and size, and a result cache.

Each (method, seed) result is written to ``work_dir/results/<key>.json`` the moment it exists,
so a killed comparison rerun with the same folders starts where it stopped and loses nothing
but the run it was in the middle of.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FidelityRun:
    out_dir: Path  # the report goes here
    work_dir: Path  # checkpoints, datasets and the result cache
    seeds: int = 3
    budget: float | None = None  # None: the comparison's default (its unit is its own)
    quick: bool = False
    command: str = ""
    log: Callable[[str], None] = field(default=print)
    cache_hits: int = 0  # results read back from an earlier run
    cache_misses: int = 0  # results computed by this one

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.work_dir = Path(self.work_dir)
        if self.seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {self.seeds}")
        if self.budget is not None and self.budget <= 0:
            raise ValueError(f"--budget must be positive, got {self.budget}")

    def seed_list(self) -> list[int]:
        return list(range(self.seeds))

    def budget_or(self, default: float, quick: float) -> float:
        """The budget asked for, else the comparison's quick or default size."""
        if self.budget is not None:
            return self.budget
        return quick if self.quick else default

    def cache_path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        return self.work_dir / "results" / f"{safe}.json"

    def cached(self, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``compute()``'s JSON-able result, from the cache when an earlier run stored it.

        The key should name everything the result depends on (method, seed, budget, size)."""
        path = self.cache_path(key)
        if path.is_file():
            self.log(f"[fidelity] {key}: from {path}")
            self.cache_hits += 1
            return json.loads(path.read_text(encoding="utf-8"))
        result = compute()
        self.cache_misses += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(result), encoding="utf-8")
        os.replace(partial, path)  # atomic: a kill never leaves half a result behind
        return result


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one intra-op thread, restored after. On a small CPU machine a tiny model gains
    nothing from more, and its threads fight the emulators and the envs for the cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
