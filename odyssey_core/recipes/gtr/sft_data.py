"""The SFT data GTR starts from: card episodes annotated by a corrector (GTR App. B).

GTR trains from an SFT-initialised model: one epoch of supervised fine-tuning on the base VLM
before RL, on gym_cards episodes whose labels come from a task solver (the RL4VLM dataset).
:func:`collect_corrector_episodes` makes such a dataset: it plays ``episodes`` episodes of the
card env, asks the corrector at every step for the thought and action a good player would
have (the agent's thought is empty, so every step gets a correction), records the frame, the
turn text and that answer in the agent's format, and plays the corrector's action (or, with
probability ``random_action_prob``, a random legal one, so the data also covers states off
the solver's path). A step without a usable correction (no valid answer, no action, or a
lost deal) ends its episode. Frames that repeat are kept once.

The result is a dataset folder in the SFT contract (:mod:`odyssey_core.data.dataset`), read by
:class:`odyssey_core.sft.trainer.SFTTrainer`; the rows' ``game`` is the card game's name, and
the trainer is given GTR's system prompt for it (``system_prompts``), so SFT trains the very
prompts RL later samples from.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from odyssey_core.common.images import encode_png
from odyssey_core.data.dataset import write_dataset
from odyssey_core.envs.registry import make_env
from odyssey_core.protocol.gtr_format import format_gtr_response
from odyssey_core.recipes.gtr.corrector import Corrector, EpisodeMemory

__all__ = ["SFTEpisodes", "collect_corrector_episodes", "sft_game"]


def sft_game(env_name: str) -> str:
    """The ``game`` a dataset row of this env carries (``cards-points24`` -> ``points24``)."""
    return env_name.removeprefix("cards-")


@dataclass(frozen=True)
class SFTEpisodes:
    """What :func:`collect_corrector_episodes` wrote and counted."""

    dataset_dir: Path
    samples: int
    episodes: int
    counts: dict[str, int]


def collect_corrector_episodes(
    env_name: str,
    env_kwargs: dict[str, Any],
    corrector: Corrector,
    out_dir: str | Path,
    *,
    episodes: int,
    seed: int,
    random_action_prob: float = 0.0,
    val_share: float = 0.05,
    teacher: str | None = None,
) -> SFTEpisodes:
    """Play ``episodes`` episodes (deal seeds ``seed``, ``seed + 1``, ...) annotated by
    ``corrector`` and write them as an SFT dataset folder at ``out_dir``."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if not 0.0 <= random_action_prob <= 1.0:
        raise ValueError(f"random_action_prob must be in [0, 1], got {random_action_prob}")
    out = Path(out_dir)
    staging = out.parent / f".{out.name}-frames"
    staging.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 7])
    game = sft_game(env_name)
    teacher = teacher or corrector.source
    counts: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    env = make_env(env_name, **env_kwargs)
    try:
        for k in range(episodes):
            observation, info = env.reset(seed=seed + k)
            memory = EpisodeMemory()
            for turn in range(10_000):
                correction = corrector.correct(observation, "", None, info, memory)
                legal = list(info["legal_actions"])
                if not correction.valid or not correction.corrected_thought.strip():
                    counts["no_correction"] += 1
                    break
                if correction.action is None or correction.action not in legal:
                    counts["no_action"] += 1  # e.g. a deal that cannot be won
                    break
                png = encode_png(observation.image)
                frame_hash = hashlib.sha256(png).hexdigest()
                if frame_hash in seen:
                    counts["duplicates"] += 1
                else:
                    seen.add(frame_hash)
                    (staging / f"{frame_hash}.png").write_bytes(png)
                    rows.append(
                        {
                            "frame": f"{frame_hash}.png",
                            "frame_hash": frame_hash,
                            "game": game,
                            "level": env_name,
                            "turn_text": observation.text,
                            "response": format_gtr_response(
                                correction.corrected_thought, correction.action
                            ),
                            "buttons": [correction.action],
                            "source": f"gtr-sft:{env_name}:seed-{seed + k}",
                            "frame_index": turn,
                            "timestamp_s": float(k * 10_000 + turn),
                            "teacher": teacher,
                        }
                    )
                explore = random_action_prob > 0 and rng.random() < random_action_prob
                played = legal[int(rng.integers(len(legal)))] if explore else correction.action
                counts["explored"] += int(explore)
                observation, _, terminated, truncated, info = env.step(played)
                if terminated or truncated:
                    break
            counts["episodes"] += 1
    finally:
        env.close()
    if not rows:
        raise RuntimeError(
            f"the corrector annotated no step in {episodes} {env_name} episodes "
            f"({dict(counts)}); check the corrector"
        )
    write_dataset(
        out,
        rows,
        staging,
        val_share=val_share,
        config={"env": env_name, "env_kwargs": env_kwargs, "episodes": episodes, "seed": seed},
        extra_manifest={"teacher": teacher, "counts": dict(counts)},
    )
    for png in staging.glob("*.png"):
        png.unlink()
    staging.rmdir()
    return SFTEpisodes(out, len(rows), episodes, dict(counts))
