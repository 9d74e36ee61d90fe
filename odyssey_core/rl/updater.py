"""The one optimiser step of the policy update: plain AdamW or a DeepSpeed engine, with its
learning-rate schedule.

The trainer does its own micro-batching: ``backward(loss, boundary)`` is called once per
micro-batch (``boundary`` on the minibatch's last one) and ``step()`` once per minibatch, so
only one micro-batch of autograd graphs is alive at any time. ``end_of_step()`` advances the
schedule once per training step. Across ranks both updaters average the gradients (the plain
one with one all-reduce in ``step()``, DeepSpeed in its backward); the trainer scales each
rank's loss accordingly.

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

from odyssey_core.rl.checkpoint import WeightsOnlyCheckpointEngine
from odyssey_core.rl.distributed import average_gradients, backend_for, init_process_group

__all__ = [
    "DEEPSPEED_DIR",
    "LOW_PRECISION",
    "DeepSpeedUpdater",
    "PlainUpdater",
    "UpdaterSettings",
    "build_updater",
    "lr_at",
]

DEEPSPEED_DIR, DEEPSPEED_TAG = "deepspeed", "state"  # <checkpoint>/deepspeed/state/


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


#: weight dtypes whose small updates round away: the optimiser keeps fp32 masters of them
LOW_PRECISION = (torch.bfloat16, torch.float16)


class PlainUpdater:
    """AdamW on the trainable weights (plus any extra groups), one gradient-norm clip.

    fp32 master weights: a bf16/fp16 weight gets an fp32 copy, and the copy is what AdamW
    updates (its moments are fp32 too); ``step()`` moves the gradients into the copies, steps,
    and writes the copies back, rounded, into the model. An update far below the weight's
    bf16 resolution (lr 1e-6 on weights ~1e-3) is kept in the copy and accumulates, instead
    of rounding away at every step. fp32 weights are updated in place, as they always were.

    Several ranks: ``step()`` first replaces every gradient by its mean over ranks
    (:func:`~odyssey_core.rl.distributed.average_gradients`: one all-reduce of all gradients),
    then clips and steps, so the weights stay identical on every rank. This is DDP's
    reduction done once per optimiser step rather than inside a backward through a DDP
    wrapper: ranks backpropagate different numbers of micro-batches in a minibatch (possibly
    none), which a backward-triggered reduction cannot match up.
    """

    #: whether every rank must call ``backward`` equally often per step (no: one all-reduce
    #: in ``step``)
    equal_backwards = False

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
        self.masters = [_fp32_master(p) for p in self.params]
        master_of = {id(p): m for p, m in zip(self.params, self.masters, strict=True)}
        groups = [{**g, "params": [master_of[id(p)] for p in g["params"]]} for g in groups]
        self.optimizer = torch.optim.AdamW(
            groups, lr=settings.lr, weight_decay=settings.weight_decay
        )
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.steps_done = 0  # training steps (schedule position)

    @property
    def copies(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(weight, fp32 master)`` of every low-precision weight."""
        return [(p, m) for p, m in zip(self.params, self.masters, strict=True) if m is not p]

    def backward(self, loss: torch.Tensor, boundary: bool) -> None:
        loss.backward()

    def step(self) -> float:
        for weight, master in self.copies:
            master.grad = None if weight.grad is None else weight.grad.detach().float()
            weight.grad = None
        average_gradients(self.masters)
        norm = torch.nn.utils.clip_grad_norm_(self.masters, self.settings.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            for weight, master in self.copies:
                weight.copy_(master)
        return float(norm)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for weight, _ in self.copies:
            weight.grad = None

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def end_of_step(self) -> None:
        self.steps_done += 1
        self._apply_schedule()

    def _apply_schedule(self) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = lr_at(base, self.steps_done, self.settings)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "steps_done": self.steps_done,
        }
        if self.copies:  # the model's weights are their rounded values: keep the exact ones
            state["fp32_masters"] = [m.detach().clone() for _, m in self.copies]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps_done = int(state["steps_done"])
        self._apply_schedule()
        saved = state.get("fp32_masters")
        if self.copies and saved is None:
            raise ValueError("the checkpoint has no fp32 master weights for this bf16/fp16 model")
        with torch.no_grad():
            for (weight, master), value in zip(self.copies, saved or [], strict=True):
                master.copy_(value)
                weight.copy_(value)

    def save_engine(self, folder: Path) -> None:
        """Write engine state beside the trainer state (the plain optimiser has none)."""

    def load_engine(self, checkpoint: Path) -> None:
        """Read what :meth:`save_engine` wrote (nothing here)."""


def _fp32_master(weight: torch.Tensor) -> torch.Tensor:
    """The tensor AdamW updates for ``weight``: an fp32 copy of a bf16/fp16 weight, else the
    weight itself."""
    if weight.dtype not in LOW_PRECISION:
        return weight
    return weight.detach().float().clone().requires_grad_(True)


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
    partitioned across ranks; with ``bf16`` enabled in its config, DeepSpeed keeps the fp32
    master partitions itself). Launched by ``deepspeed`` or ``torchrun``; a process that no
    launcher started becomes rank 0 of a world of one first. On CPU it runs on gloo.

    Its state is DeepSpeed's own checkpoint (``save_checkpoint`` / ``load_checkpoint``: every
    rank writes and reads its optimiser partition), read back with ``weights_only=True``.
    """

    def __init__(self, model: torch.nn.Module, settings: UpdaterSettings) -> None:
        try:
            import deepspeed
        except ImportError as err:
            raise RuntimeError(
                "the preset sets `deepspeed:` but DeepSpeed is not installed "
                "(pip install 'odyssey-core[deepspeed]'), or set `deepspeed: null`"
            ) from err

        assert settings.deepspeed is not None
        self.settings = settings
        world = init_process_group(settings.device)
        deepspeed.init_distributed(dist_backend=backend_for(settings.device))
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
        config = deepspeed_config(
            settings.deepspeed,
            grad_clip=settings.grad_clip,
            dtype=settings.dtype,
            world_size=world.size,
        )
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, model_parameters=params, config=config
        )
        self.engine.checkpoint_engine = WeightsOnlyCheckpointEngine(self.engine.checkpoint_engine)
        self.params = self.masters = params
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.steps_done = 0
        # ZeRO-2 reduces gradients in every backward: every rank must run as many
        self.equal_backwards = world.size > 1  # type: ignore[misc]

    def backward(self, loss: torch.Tensor, boundary: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(boundary)
        self.engine.backward(loss)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float("nan") if norm is None else float(norm)

    def zero_grad(self) -> None:
        self.engine.zero_grad()

    def state_dict(self) -> dict[str, Any]:
        return {"steps_done": self.steps_done}  # the optimiser is in the engine's checkpoint

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps_done = int(state["steps_done"])
        self._apply_schedule()

    def save_engine(self, folder: Path) -> None:
        """DeepSpeed's checkpoint under ``folder/deepspeed`` (collective: every rank writes its
        optimiser partition, rank 0 the module)."""
        self.engine.save_checkpoint(
            str(Path(folder) / DEEPSPEED_DIR), tag=DEEPSPEED_TAG, save_latest=False
        )

    def load_engine(self, checkpoint: Path) -> None:
        """Load this rank's partition (and the fp32 masters) of a :meth:`save_engine` folder."""
        folder = Path(checkpoint) / DEEPSPEED_DIR
        if not (folder / DEEPSPEED_TAG).is_dir():
            raise FileNotFoundError(
                f"{checkpoint} has no DeepSpeed state ({folder / DEEPSPEED_TAG}); it was not "
                "written by a DeepSpeed run"
            )
        self.engine.load_checkpoint(
            str(folder),
            tag=DEEPSPEED_TAG,
            load_optimizer_states=True,
            load_lr_scheduler_states=False,
        )
        self._apply_schedule()


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
