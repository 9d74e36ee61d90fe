"""The smallest run on a GPU with a real checkpoint that would decide what a CPU comparison
cannot, where the paper's effect rests on a pretrained model's priors.

A :class:`CheckpointRun` names the claims it decides, the prior they need and what to read
afterwards, and lists its runs: one ``prefect deployment run`` of a recipe's as-published
deployment per arm and training seed. Each run has its own run folder and registered model, so
the runs share no stage cache and no promotion gate, and the checkpoint is the one
setting a user fills in.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odyssey_core.config import deep_merge

__all__ = ["CheckpointRun", "DeploymentRun", "deployment_command"]


def deployment_command(deployment: str, params: Mapping[str, Any]) -> str:
    """``prefect deployment run <flow>/<deployment> --params '<JSON>'`` (the parameters given
    replace the deployment's own of the same name)."""
    encoded = json.dumps(params, separators=(",", ":"), sort_keys=True)
    return f"prefect deployment run {deployment} --params {shlex.quote(encoded)}"


@dataclass(frozen=True)
class DeploymentRun:
    """One arm at one training seed: the flow parameters its deployment run takes."""

    arm: str
    seed: int
    params: Mapping[str, Any]


@dataclass(frozen=True)
class CheckpointRun:
    """The runs that would decide ``decides`` (claims as the paper makes them) with a real
    checkpoint: ``needs`` says which prior the effect rests on, ``reads`` what to compare."""

    deployment: str  # <flow>/<deployment>, as prefect.yaml names it
    decides: tuple[str, ...]
    needs: str
    reads: str
    runs: tuple[DeploymentRun, ...]

    @classmethod
    def per_arm_and_seed(
        cls,
        deployment: str,
        *,
        decides: Sequence[str],
        needs: str,
        reads: str,
        arms: Mapping[str, Mapping[str, Any]],
        seeds: int,
        checkpoint: str,
        run_dir: str,
        game: str,
    ) -> CheckpointRun:
        """One run per arm and seed: the arm's own flow parameters (``arms[arm]``) over what
        every run sets, its folder ``<run_dir>-<arm>-s<seed>`` and registered model
        ``<game>-<arm>-s<seed>``, the seed of its SFT and training, and ``checkpoint`` as the
        training preset's model."""
        runs = []
        for arm, own in arms.items():
            for seed in range(seeds):
                tag = f"{arm}-s{seed}"
                common = {
                    "overrides": {
                        "run_dir": f"{run_dir}-{tag}",
                        "game": f"{game}-{tag}",
                        "sft": {"settings": {"seed": seed}},
                        "train": {"overrides": {"seed": seed, "model": {"path": checkpoint}}},
                    }
                }
                runs.append(DeploymentRun(arm, seed, deep_merge(common, dict(own))))
        return cls(deployment, tuple(decides), needs, reads, tuple(runs))

    @property
    def commands(self) -> list[str]:
        return [deployment_command(self.deployment, run.params) for run in self.runs]

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment,
            "decides": list(self.decides),
            "needs": self.needs,
            "reads": self.reads,
            "runs": [{"arm": r.arm, "seed": r.seed, "params": r.params} for r in self.runs],
            "commands": self.commands,
        }
