"""Value functions V(o_t) for the estimators that read them: ``VALUE_FUNCTIONS``.

- ``cnn``: the turn-level NatureCNN critic on the frame (Odysseus Section 4.1), trained on
  its own optimiser after the advantages are computed (:mod:`odyssey_core.rl.critic`), on
  the device its settings name or the one it is given (the policy's).
- ``vlm_head``: an MLP on the policy's own hidden state at the last prompt token
  (:mod:`odyssey_core.rl.value_head`); its loss joins the policy loss in the same scoring
  forward and backward, weighted by ``value_coef`` (GTR Table 2: 0.5).

The trainer uses one interface for both (:class:`ValueFunction`): ``predict(policy, batch,
bootstrap)`` gives V(o_t) per row and, when asked, V(o_{t+1}) on the truncated rows (from
``batch.next_observations``); ``fit(batch, returns)`` trains a separate network; ``in_graph``
says whether the value loss instead rides on the policy's scoring forward (``scoring``,
``piece_loss``).

A recipe names its value function and hands :func:`make_value_function` what any of them may
be built from (:class:`ValueFunctionInputs`); each entry of ``VALUE_FUNCTIONS`` reads its own
part, so a new value function is one registration, not a branch in every recipe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from odyssey_core.common.registry import Registry
from odyssey_core.rl.critic import CriticTrainer
from odyssey_core.rl.settings import CriticSettings
from odyssey_core.rl.value_head import VLMValueHead, capture_final_hidden
from odyssey_core.rollout.batch import TurnBatch

__all__ = [
    "VALUE_FUNCTIONS",
    "CNNValue",
    "VLMHeadValue",
    "ValueFunction",
    "ValueFunctionInputs",
    "make_value_function",
]


class ValueFunction(Protocol):
    """What the trainer calls on a value function."""

    in_graph: bool  # True: the value loss joins the policy's backward (piece_loss)

    def predict(
        self, policy: Any, batch: TurnBatch, bootstrap: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def fit(self, batch: TurnBatch, returns: torch.Tensor) -> dict[str, float]: ...

    def actor_may_update(self, step: int) -> bool: ...

    def param_groups(self) -> list[dict[str, Any]]: ...

    def scoring(self, policy: Any) -> contextlib.AbstractContextManager[list[torch.Tensor]]: ...

    def piece_loss(
        self, captured: Sequence[torch.Tensor], lengths: Sequence[int], returns: torch.Tensor
    ) -> tuple[torch.Tensor | None, dict[str, float]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ValueFunctionInputs:
    """What a recipe hands the value function it names; each reads its own part: ``cnn`` the
    critic settings and the device, ``vlm_head`` the policy and the ``head_*`` options."""

    policy: Any
    seed: int
    critic: CriticSettings
    device: str | None = None  # the policy's: the CNN critic's unless its settings name one
    head_hidden_dims: Sequence[int] = (1024, 512)
    head_scale: float = 1.0
    head_lr: float | None = None  # None: the policy's learning rate
    value_coef: float = 0.5  # the value loss's weight in the policy's backward
    micro_batch: int = 4  # turns per prompt-only forward when predicting


class CNNValue:
    """The CNN critic: V from the frames, its own optimiser and critic-only warm-up."""

    in_graph = False

    def __init__(
        self, settings: CriticSettings, *, seed: int = 0, device: str | None = None
    ) -> None:
        """On ``settings.device`` when set, else on ``device`` (pass the policy's), else CPU."""
        self.critic = CriticTrainer(settings, seed=seed, device=device)

    @classmethod
    def build(cls, inputs: ValueFunctionInputs) -> CNNValue:
        return cls(inputs.critic, seed=inputs.seed, device=inputs.device)

    @property
    def device(self) -> torch.device:
        return self.critic.device

    def predict(
        self, policy: Any, batch: TurnBatch, bootstrap: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """V(o_t) from the batch's frames, read a chunk at a time (they may be on disk), and
        V(o_{t+1}) from the next observations of the truncated rows."""
        cut = _cut_rows(batch) if bootstrap else []
        values = self.critic.predict(batch.frames)
        after = self.critic.predict([batch.next_observations[k].image for k in cut])  # type: ignore[index]
        return values, _scatter(after, cut, len(batch), bootstrap)

    def fit(self, batch: TurnBatch, returns: torch.Tensor) -> dict[str, float]:
        return self.critic.train_step(batch.frames, returns)

    def actor_may_update(self, step: int) -> bool:
        return self.critic.actor_may_update(step)

    def param_groups(self) -> list[dict[str, Any]]:
        return []  # trained apart from the policy

    def scoring(self, policy: Any) -> contextlib.AbstractContextManager[list[torch.Tensor]]:
        return contextlib.nullcontext([])

    def piece_loss(
        self, captured: Sequence[torch.Tensor], lengths: Sequence[int], returns: torch.Tensor
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        return None, {}

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "cnn", "critic": self.critic.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _same_kind(state, "cnn")
        self.critic.load_state_dict(state["critic"])


class VLMHeadValue:
    """The value head on the VLM's last-prompt-token state, trained inside the PPO backward."""

    in_graph = True

    def __init__(
        self,
        policy: Any,
        *,
        hidden_dims: Sequence[int] = (1024, 512),
        scale: float = 1.0,
        lr: float | None = None,
        value_coef: float = 0.5,
        micro_batch: int = 4,
        seed: int = 0,
    ) -> None:
        with torch.random.fork_rng(devices=[]):  # seeded init, global RNG untouched
            torch.manual_seed(seed)
            hidden = policy.model.config.get_text_config().hidden_size
            self.head = VLMValueHead(hidden, hidden_dims, scale)
        self.head.to(policy.device)
        self.lr, self.value_coef, self.micro_batch = lr, value_coef, micro_batch

    @classmethod
    def build(cls, inputs: ValueFunctionInputs) -> VLMHeadValue:
        return cls(
            inputs.policy,
            hidden_dims=inputs.head_hidden_dims,
            scale=inputs.head_scale,
            lr=inputs.head_lr,
            value_coef=inputs.value_coef,
            micro_batch=inputs.micro_batch,
            seed=inputs.seed,
        )

    def predict(
        self, policy: Any, batch: TurnBatch, bootstrap: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prompt-only forwards: V(o_t) for every row, V(o_{t+1}) for the truncated ones (their
        next observation is encoded like a prompt)."""
        prompts = [list(map(int, p)) for p in batch.prompt_ids]
        values = self.head.predict(policy, prompts, batch.frames, self.micro_batch)
        cut = _cut_rows(batch) if bootstrap else []
        next_prompts, next_frames = [], []
        for k in cut:
            observation = batch.next_observations[k]  # type: ignore[index]
            inputs, _ = policy.encode([observation])
            next_prompts.append(inputs["input_ids"][0][inputs["attention_mask"][0].bool()].tolist())
            next_frames.append(observation.image)
        after = self.head.predict(policy, next_prompts, next_frames, self.micro_batch)
        return values, _scatter(after, cut, len(batch), bootstrap)

    def fit(self, batch: TurnBatch, returns: torch.Tensor) -> dict[str, float]:
        return {}  # trained in the policy's backward (piece_loss)

    def actor_may_update(self, step: int) -> bool:
        return True

    def param_groups(self) -> list[dict[str, Any]]:
        group: dict[str, Any] = {"params": list(self.head.parameters())}
        if self.lr is not None:
            group["lr"] = self.lr
        return [group]

    def scoring(self, policy: Any) -> contextlib.AbstractContextManager[list[torch.Tensor]]:
        return capture_final_hidden(policy.model)

    def piece_loss(
        self, captured: Sequence[torch.Tensor], lengths: Sequence[int], returns: torch.Tensor
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """value_coef * 0.5 * MSE (in return units) of the head on this micro-batch's scoring
        states."""
        predicted = self.head.from_captured(captured, lengths)
        loss = self.head.loss(predicted, returns)
        return self.value_coef * loss, {
            "value_head/loss": loss.item(),
            "value_head/weighted_loss": self.value_coef * loss.item(),
            "value_head/value_mean": predicted.detach().mean().item() * self.head.scale,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "vlm_head", "head": self.head.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _same_kind(state, "vlm_head")
        self.head.load_state_dict(state["head"])


def _cut_rows(batch: TurnBatch) -> list[int]:
    rows = torch.nonzero(batch.truncated, as_tuple=False).flatten().tolist()
    if rows and batch.next_observations is None:
        raise ValueError("bootstrapping truncated turns needs the batch's next_observations")
    return rows


def _scatter(values: torch.Tensor, rows: list[int], n: int, wanted: bool) -> torch.Tensor | None:
    if not wanted:
        return None
    out = torch.zeros(n)
    if rows:
        out[rows] = values.float()
    return out


def _same_kind(state: dict[str, Any], kind: str) -> None:
    saved = state.get("kind")
    if saved != kind:
        raise ValueError(
            f"the checkpoint holds a {saved!r} value function, the settings ask for {kind!r}"
        )


ValueFactory = Callable[[ValueFunctionInputs], ValueFunction]
VALUE_FUNCTIONS: Registry[ValueFactory] = Registry("value function")
VALUE_FUNCTIONS.register("cnn", CNNValue.build)
VALUE_FUNCTIONS.register("vlm_head", VLMHeadValue.build)


def make_value_function(name: str, inputs: ValueFunctionInputs) -> ValueFunction:
    """The value function registered as ``name``, built from ``inputs``; an unknown name is a
    :class:`~odyssey_core.common.registry.RegistryError` listing the known ones."""
    return VALUE_FUNCTIONS.get(name)(inputs)
