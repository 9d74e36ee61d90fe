"""The one optimiser step of the policy update: plain AdamW or a DeepSpeed engine, with its
learning-rate schedule.

The trainer does its own micro-batching: ``backward(loss, boundary)`` is called once per
micro-batch (``boundary`` on the minibatch's last one) and ``step()`` once per minibatch, so
only one micro-batch of autograd graphs is alive at any time. ``end_of_step()`` advances the
schedule once per training step.

Schedules (``lr`` at training step t, T = ``lr_steps``):
- ``constant``: lr (the Odysseus tables);
- ``cosine``: final + (lr - final) * (1 + cos(pi * min(t, T) / T)) / 2, so it decays to
  ``final_lr`` over T steps and then **holds** there (GTR Table 2: 1e-5 -> 1e-9 over 25).
  Every parameter group decays from its own base lr to the same ``final_lr``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

__all__ = ["DeepSpeedUpdater", "PlainUpdater", "UpdaterSettings", "build_updater", "lr_at"]


@dataclass(frozen=True)
class UpdaterSettings:
    lr: float
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    schedule: Literal["constant", "cosine"] = "constant"
    final_lr: float = 0.0  # cosine: the floor it holds after lr_steps
    lr_steps: int = 1  # cosine: steps of decay
    deepspeed: Path | None = None  # a DeepSpeed JSON; None: plain AdamW
    dtype: str = "float32"  # the policy's dtype (fills DeepSpeed's "auto" precision)
    device: str = "cpu"


def lr_at(base: float, step: int, s: UpdaterSettings) -> float:
    """The learning rate of a group with base lr ``base`` at training step ``step``."""
    if s.schedule == "constant":
        return base
    progress = min(step, s.lr_steps) / s.lr_steps
    return s.final_lr + (base - s.final_lr) * (1.0 + math.cos(math.pi * progress)) / 2.0


class PlainUpdater:
    """AdamW on the trainable weights (plus any extra groups), one gradient-norm clip."""

    def __init__(
        self,
        model: torch.nn.Module,
        settings: UpdaterSettings,
        extra_groups: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> None:
        self.settings = settings
        groups: list[dict[str, Any]] = [
            {"params": [p for p in model.parameters() if p.requires_grad]}
        ]
        groups += [dict(g) for g in extra_groups]
        self.params = [p for g in groups for p in g["params"]]
        self.optimizer = torch.optim.AdamW(
            groups, lr=settings.lr, weight_decay=settings.weight_decay
        )
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.steps_done = 0  # training steps (schedule position)

    def backward(self, loss: torch.Tensor, boundary: bool) -> None:
        loss.backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.settings.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def end_of_step(self) -> None:
        self.steps_done += 1
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = lr_at(base, self.steps_done, self.settings)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps_done = int(state["steps_done"])
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = lr_at(base, self.steps_done, self.settings)


def deepspeed_config(
    path: Path, *, grad_clip: float, dtype: str, world_size: int = 1
) -> dict[str, Any]:
    """The DeepSpeed JSON at ``path`` with its ``"auto"`` values filled for the policy update.

    The trainer does its own micro-batching and weighting, so DeepSpeed sees one "sample" per
    backward and no accumulation of its own; the optimiser is ours (AdamW).
    """
    config = json.loads(Path(path).read_text())
    config.pop("optimizer", None)
    config.pop("scheduler", None)
    fills = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world_size,
        "gradient_clipping": grad_clip,
    }
    for key, value in fills.items():
        if config.get(key, "auto") == "auto":
            config[key] = value
    for precision, name in (("bf16", "bfloat16"), ("fp16", "float16")):
        section = config.get(precision)
        if isinstance(section, dict) and section.get("enabled") == "auto":
            section["enabled"] = dtype == name
    return config


class DeepSpeedUpdater(PlainUpdater):
    """The same update under a DeepSpeed engine (ZeRO-2: optimiser states and gradients
    partitioned across ranks). Launch with ``deepspeed``; on CPU it runs on gloo."""

    def __init__(self, model: torch.nn.Module, settings: UpdaterSettings) -> None:
        try:
            import deepspeed
        except ImportError as err:
            raise RuntimeError(
                "the preset sets `deepspeed:` but DeepSpeed is not installed "
                "(pip install 'odyssey-core[deepspeed]'), or set `deepspeed: null`"
            ) from err
        import torch.distributed as dist

        assert settings.deepspeed is not None
        self.settings = settings
        if not dist.is_initialized():
            backend = "nccl" if settings.device.startswith("cuda") else "gloo"
            deepspeed.init_distributed(dist_backend=backend)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
        config = deepspeed_config(
            settings.deepspeed,
            grad_clip=settings.grad_clip,
            dtype=settings.dtype,
            world_size=dist.get_world_size(),
        )
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, model_parameters=params, config=config
        )
        self.params = params
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.steps_done = 0

    def backward(self, loss: torch.Tensor, boundary: bool) -> None:
        # Reduce (and let ZeRO partition) gradients only after the minibatch's last piece.
        self.engine.set_gradient_accumulation_boundary(boundary)
        self.engine.backward(loss)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float("nan") if norm is None else float(norm)

    def zero_grad(self) -> None:
        self.engine.zero_grad()

    def state_dict(self) -> dict[str, Any]:
        import torch.distributed as dist

        if dist.get_world_size() > 1:  # each rank holds only its partition of the state
            raise NotImplementedError(
                "checkpoints of multi-rank DeepSpeed runs are not implemented yet (the ZeRO-2 "
                "optimiser state is partitioned per rank); use world size 1 or no checkpoints"
            )
        return super().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # A ZeRO optimiser loads a list of per-rank state dicts; its fp32 master partitions
        # come back from the saved state, not from the (possibly lower precision) weights.
        self.optimizer.load_state_dict([state["optimizer"]], load_from_fp32_weights=True)
        self.steps_done = int(state["steps_done"])
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = lr_at(base, self.steps_done, self.settings)


def build_updater(
    model: torch.nn.Module,
    settings: UpdaterSettings,
    extra_groups: list[dict[str, Any]] | None = None,
) -> PlainUpdater:
    """Plain AdamW, or DeepSpeed when ``settings.deepspeed`` names a config."""
    if settings.deepspeed is None:
        return PlainUpdater(model, settings, extra_groups or [])
    if extra_groups:
        raise ValueError(
            "DeepSpeed updates the policy model only; a value head trained in the same "
            "backward (value.source: vlm_head) needs deepspeed: null, or use the cnn critic"
        )
    return DeepSpeedUpdater(model, settings)
