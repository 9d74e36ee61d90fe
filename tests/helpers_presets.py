"""Small training presets on the test model, written to YAML files the way a user would."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def odysseus_preset(tmp_path: Path, model_dir: Path, name: str = "preset.yaml", **changes) -> Path:
    """The resume test's run: tiny model, 2 envs, 2 trajectories, 3 turns, 8 tokens, 3 steps."""
    data = {
        "seed": 3,
        "steps": 3,
        "checkpoint_every": 1,
        "model": {"path": str(model_dir)},
        "levels": ["odland-1-1", "odland-1-2"],
        "rollout": {
            "num_trajectories": 2,
            "max_turns": 3,
            "n_envs": 2,
            "generation": {"temperature": 1.0, "max_new_tokens": 8},
            "score_micro_batch": 2,
        },
        "advantage": {"estimator": "ppo_critic_pos"},
        "ppo": {"minibatch_size": 4, "lr": 1e-3},
        "critic": {"input_height": 36, "input_width": 40, "minibatch_size": 4},
        **changes,
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def gtr_preset(tmp_path: Path, tiny_model_dir: Path, name: str = "gtr.yaml", **changes) -> Path:
    """The tiny preset on the test model: 3 steps, a checkpoint after each."""
    data = {
        "inherit": str(REPO / "configs" / "gtr" / "tiny.yaml"),
        "steps": 3,
        "checkpoint_every": 1,
        "model": {"path": str(tiny_model_dir)},
        **changes,
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path
