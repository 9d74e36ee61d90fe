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
        arms: Sequence[str],
        seeds: int,
        params: Any,
    ) -> CheckpointRun:
        """One run per arm and seed; ``params(arm, seed)`` gives each run's flow parameters."""
        runs = tuple(
            DeploymentRun(arm, seed, params(arm, seed)) for arm in arms for seed in range(seeds)
        )
        return cls(deployment, tuple(decides), needs, reads, runs)

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
