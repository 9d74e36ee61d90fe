"""The lightweight turn-level CNN critic V(o_t) (Odysseus paper Section 4.1, Appendix E.1).

One value per turn, read from the frame the agent saw. The network is the Nature DQN backbone
(Mnih et al. 2015) with a 512-unit hidden layer (Table 7); it is trained on its own AdamW
optimiser, apart from the VLM, with

    L_V(phi) = E_t[ SmoothL1( V_phi(o_t) - R_t / value_scale ) ]          (Appendix C.1)

where R_t = sum_{i>=t} gamma^(i-t) r_i is the discounted return-to-go. The network predicts
returns divided by ``value_scale`` so its outputs stay near 1; :meth:`CriticTrainer.predict`
multiplies back, so everything outside this module sees values in return units.

The network runs on any torch device (``CriticSettings.device``, else the device the recipe
passes, which is the policy's). Frames travel as uint8, ``predict_chunk`` or
``minibatch_size`` at a time, and become floats on that device; they may be a list or an
on-disk :class:`~odyssey_core.rollout.frames.FrameView`, so only one chunk is ever stacked.
State dicts hold CPU tensors and load onto whatever device the critic is on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from odyssey_core.rl.advantages import discounted_return_to_go
from odyssey_core.rl.settings import CriticSettings
from odyssey_core.rollout.batch import TurnBatch

Frames = Sequence[np.ndarray] | np.ndarray | torch.Tensor  # uint8 [N, H, W, 3] or a list of them
_LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601 weights, as the Atari wrappers use


def _layer(module: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    # CleanRL / SB3 initialisation: orthogonal weights, zero bias.
    nn.init.orthogonal_(module.weight, gain)
    nn.init.zeros_(module.bias)
    return module


class NatureCNN(nn.Module):
    """uint8 frames [B, H, W, 3] -> values [B] (in scaled units)."""

    def __init__(
        self,
        input_size: tuple[int, int] = (84, 84),
        grayscale: bool = False,
        hidden_dim: int = 512,
    ) -> None:
        super().__init__()
        self.input_size = tuple(input_size)
        self.grayscale = grayscale
        channels = 1 if grayscale else 3
        self.features = nn.Sequential(
            _layer(nn.Conv2d(channels, 32, 8, stride=4)),
            nn.ReLU(),
            _layer(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            _layer(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():  # the flattened size depends on the input size
            flat = self.features(torch.zeros(1, channels, *self.input_size)).shape[1]
        self.head = nn.Sequential(
            _layer(nn.Linear(flat, hidden_dim)),
            nn.ReLU(),
            _layer(nn.Linear(hidden_dim, 1), gain=1.0),
        )

    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [B, H, W, 3] -> float [B, C, h, w] in [0, 1] at the configured size."""
        if frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"expected frames [B, H, W, 3], got {tuple(frames.shape)}")
        x = frames.permute(0, 3, 1, 2).float() / 255.0
        if self.grayscale:
            luma = x.new_tensor(_LUMA).view(1, 3, 1, 1)
            x = (x * luma).sum(dim=1, keepdim=True)
        if tuple(x.shape[-2:]) != self.input_size:
            x = F.interpolate(x, size=self.input_size, mode="bilinear", align_corners=False)
        return x

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(self.preprocess(frames))).squeeze(-1)


def stack_frames(frames: Frames, index: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
    """Gather frames (a list of HxWx3 arrays or one array/tensor) into uint8 [B, H, W, 3].

    Stacking only the rows asked for keeps a large batch of frames from ever being copied whole.
    """
    rows = range(len(frames)) if index is None else torch.as_tensor(index).tolist()
    if isinstance(frames, torch.Tensor):
        return frames[list(rows)]
    return torch.from_numpy(np.stack([np.asarray(frames[i]) for i in rows]))


def resolve_device(name: str | torch.device) -> torch.device:
    """A torch device that exists here, or a ValueError saying what to change."""
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch build has no CUDA"
                if torch.version.cuda is None
                else "no CUDA device is visible"
            )
            raise ValueError(
                f"the critic was asked to run on {str(device)!r}, but {why} "
                f"(torch {torch.__version__}); set critic.device to 'cpu' or run on a GPU machine"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"the critic was asked to run on {str(device)!r}, but only "
                f"{torch.cuda.device_count()} CUDA device(s) are visible"
            )
    return device


def to_cpu(value: Any) -> Any:
    """``value`` (tensors inside dicts, lists and tuples) with every tensor copied to the CPU:
    a snapshot, never sharing storage with the live network or optimiser."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R) with population variances; NaN when Var(R) is 0."""
    var_target = target.var(correction=0)
    if var_target == 0:
        return float("nan")
    return float(1.0 - (target - predicted).var(correction=0) / var_target)


class CriticTrainer:
    """The critic network, its optimiser, and its update once per training step."""

    def __init__(
        self,
        settings: CriticSettings | None = None,
        seed: int = 0,
        device: str | torch.device | None = None,
    ) -> None:
        """The device is ``settings.device`` when set, else ``device``, else the CPU."""
        self.settings = settings or CriticSettings()
        s = self.settings
        self.device = resolve_device(s.device or device or "cpu")
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
            torch.manual_seed(seed)
            self.network = NatureCNN((s.input_height, s.input_width), s.grayscale, s.hidden_dim)
        self.network.to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.network.parameters(), lr=s.lr, weight_decay=s.weight_decay
        )
        self.generator = torch.Generator().manual_seed(seed)  # minibatch shuffling only
        self.steps_done = 0

    # -- schedule --------------------------------------------------------------------------------

    def actor_may_update(self, step: int | None = None) -> bool:
        """False during the first ``warmup_steps`` training steps (critic-only warm-up)."""
        return (self.steps_done if step is None else step) >= self.settings.warmup_steps

    # -- inference -------------------------------------------------------------------------------

    @torch.no_grad()
    def predict(self, frames: Frames) -> torch.Tensor:
        """V(o_t) in return units, float32 [N] on the CPU, in chunks of ``predict_chunk``."""
        self.network.eval()
        chunk = self.settings.predict_chunk
        out = [
            self.network(
                stack_frames(frames, range(i, min(i + chunk, len(frames)))).to(
                    self.device, non_blocking=True
                )
            ).cpu()
            for i in range(0, len(frames), chunk)
        ]
        values = torch.cat(out) if out else torch.zeros(0)
        return values.float() * self.settings.value_scale

    # -- training --------------------------------------------------------------------------------

    def _loss(self, predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.settings.loss == "smooth_l1":
            return F.smooth_l1_loss(predicted, target, beta=self.settings.smooth_l1_beta)
        return F.mse_loss(predicted, target)

    def train_step(self, frames: Frames, returns: torch.Tensor) -> dict[str, float]:
        """``epochs`` passes regressing V(o_t) on R_t / value_scale: per epoch, one optimiser
        step per shuffled minibatch (``update: minibatches``), or one step on the mean loss
        over every turn, its gradient summed ``minibatch_size`` turns at a time
        (``update: full_batch``, the public release's update).

        Metrics: mean loss per optimiser step (scaled units), mean pre-clip gradient norm,
        the optimiser steps taken, and the explained variance and mean of the values predicted
        in the last epoch's forward passes (each taken before its step), in return units.
        """
        s = self.settings
        started = time.perf_counter()
        returns = torch.as_tensor(returns, dtype=torch.float32).flatten()
        if returns.numel() != len(frames):
            raise ValueError(f"{len(frames)} frames but {returns.numel()} returns")
        targets = returns / s.value_scale
        self.network.train()
        losses, grad_norms = [], []
        seen_values = torch.zeros_like(returns)
        for _ in range(s.epochs):
            order = torch.randperm(len(frames), generator=self.generator)
            chunks = [
                order[start : start + s.minibatch_size]
                for start in range(0, len(frames), s.minibatch_size)
            ]
            steps = [chunks] if s.update == "full_batch" else [[chunk] for chunk in chunks]
            for step_chunks in steps:
                if not step_chunks:
                    continue
                turns = sum(len(chunk) for chunk in step_chunks)
                self.optimizer.zero_grad(set_to_none=True)
                step_loss = 0.0
                for index in step_chunks:
                    predicted = self.network(
                        stack_frames(frames, index).to(self.device, non_blocking=True)
                    )
                    # the chunk's mean loss weighted by its share: the step's mean over turns
                    loss = self._loss(predicted, targets[index].to(self.device))
                    (loss * (len(index) / turns)).backward()
                    step_loss += loss.item() * len(index) / turns
                    seen_values[index] = predicted.detach().float().cpu() * s.value_scale
                norm = nn.utils.clip_grad_norm_(self.network.parameters(), s.grad_clip)
                self.optimizer.step()
                losses.append(step_loss)
                grad_norms.append(float(norm))
        self.steps_done += 1
        return {
            "critic/loss": float(np.mean(losses)) if losses else float("nan"),
            "critic/explained_variance": explained_variance(seen_values, returns),
            "critic/value_mean": float(seen_values.mean()) if len(frames) else float("nan"),
            "critic/return_mean": float(returns.mean()) if len(frames) else float("nan"),
            "critic/grad_norm": float(np.mean(grad_norms)) if grad_norms else float("nan"),
            "critic/optimizer_steps": float(len(losses)),
            "critic/time_s": time.perf_counter() - started,
        }

    def train_on_batch(self, batch: TurnBatch, gamma: float) -> dict[str, float]:
        """Train on a TurnBatch; its ``returns`` are used when set, else recomputed with gamma."""
        returns = batch.returns
        if returns is None:
            returns = discounted_return_to_go(batch.rewards.float(), batch.episode_ids, gamma)
        return self.train_step(batch.frames, returns)

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs, as CPU tensors (loadable on any device)."""
        return {
            "network": to_cpu(self.network.state_dict()),
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "generator": self.generator.get_state(),
            "steps_done": self.steps_done,
            "settings": self.settings.model_dump(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("settings", {}).get("value_scale", self.settings.value_scale) != (
            self.settings.value_scale
        ):  # the weights would mean different returns
            raise ValueError("checkpoint was trained with a different value_scale")
        self.network.load_state_dict(state["network"])  # copied onto the network's device
        self.optimizer.load_state_dict(state["optimizer"])  # moments follow their parameters
        self.generator.set_state(state["generator"])
        self.steps_done = int(state["steps_done"])
