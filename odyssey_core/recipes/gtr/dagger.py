"""The DAgger buffer of corrected thoughts that GTR clones (GTR Section 4, Algorithm 1).

Every turn the corrector rewrites the agent's thought; each valid correction becomes one
teacher-forced example: the turn's prompt (frame + task), the corrected thought, then an action.
DAgger aggregates: the buffer keeps every batch's examples, so the SFT loss keeps seeing states
the agent visited earlier in training. With ``aggregate=False`` (the no-DAgger ablation) only
the latest batch is sampled, although older examples stay stored (cheap, and it keeps the
growth metric comparable).

Frames are stored PNG-compressed: card tables are flat colours, so a 480x320 frame shrinks from
~460 KB to a few KB, which matters because the buffer grows for the whole run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from odyssey_core.common.images import decode_image, encode_png
from odyssey_core.recipes.gtr.corrector import Correction

__all__ = ["DaggerBuffer", "DaggerExample"]


@dataclass(frozen=True)
class DaggerExample:
    """One cloning target: the prompt the agent saw, the corrected thought and two actions."""

    frame_png: bytes
    prompt_ids: tuple[int, ...]
    thought: str  # the corrector's thought
    action: str  # the action the agent played (thought cloning keeps the agent's action)
    corrector_action: str | None  # the corrector's action (used by full-response cloning)
    batch: int  # the training step whose rollout produced it

    @property
    def frame(self) -> np.ndarray:
        return decode_image(self.frame_png)


class DaggerBuffer:
    """Aggregated (DAgger) or latest-batch-only store of corrected thoughts."""

    def __init__(self, aggregate: bool = True) -> None:
        self.aggregate = aggregate
        self.examples: list[DaggerExample] = []
        self.rejected = 0  # corrections that were not usable (invalid or empty)

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def latest_batch(self) -> int | None:
        return self.examples[-1].batch if self.examples else None

    def add(
        self,
        frame: np.ndarray,
        prompt_ids: Sequence[int],
        correction: Correction | None,
        action: str,
        batch: int,
    ) -> bool:
        """Store one example if the correction is valid and has a thought; True when stored."""
        if correction is None or not correction.valid or not correction.corrected_thought.strip():
            self.rejected += 1
            return False
        if self.examples and batch < self.examples[-1].batch:
            raise ValueError("examples must be added in batch order")
        self.examples.append(
            DaggerExample(
                frame_png=encode_png(frame),
                prompt_ids=tuple(int(i) for i in prompt_ids),
                thought=correction.corrected_thought,
                action=str(action),
                corrector_action=correction.action,
                batch=int(batch),
            )
        )
        return True

    def pool(self) -> list[int]:
        """Indices sampling draws from: everything (DAgger) or the latest batch only."""
        if self.aggregate or not self.examples:
            return list(range(len(self.examples)))
        latest = self.examples[-1].batch
        first = len(self.examples)
        while first > 0 and self.examples[first - 1].batch == latest:
            first -= 1
        return list(range(first, len(self.examples)))

    def sample(self, n: int, rng: np.random.Generator) -> list[DaggerExample]:
        """``n`` examples uniformly from the pool, without replacement when it is big enough."""
        pool = self.pool()
        if not pool or n <= 0:
            return []
        picks = rng.choice(len(pool), size=n, replace=n > len(pool))
        return [self.examples[pool[int(i)]] for i in picks]

    def metrics(self) -> dict[str, float]:
        return {
            "dagger/size": float(len(self.examples)),
            "dagger/pool": float(len(self.pool())),
            "dagger/rejected": float(self.rejected),
        }

    def state_dict(self) -> dict[str, Any]:
        # Plain containers (bytes, lists, str) only, so torch.load(weights_only=True) reads it.
        return {
            "aggregate": self.aggregate,
            "rejected": self.rejected,
            "examples": [
                {
                    "frame_png": e.frame_png,
                    "prompt_ids": list(e.prompt_ids),
                    "thought": e.thought,
                    "action": e.action,
                    "corrector_action": e.corrector_action,
                    "batch": e.batch,
                }
                for e in self.examples
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.aggregate = bool(state["aggregate"])
        self.rejected = int(state["rejected"])
        self.examples = [
            DaggerExample(
                frame_png=bytes(e["frame_png"]),
                prompt_ids=tuple(e["prompt_ids"]),
                thought=e["thought"],
                action=e["action"],
                corrector_action=e["corrector_action"],
                batch=int(e["batch"]),
            )
            for e in state["examples"]
        ]
