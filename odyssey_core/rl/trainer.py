"""The Odysseus RL training loop (paper Sections 4-6, Appendix C), one step at a time.

One training step:

    1. rollout      ``num_trajectories`` complete episodes, levels drawn from the curriculum
    2. values       V(o_t) from the CNN critic (only for the estimators that read values)
    3. advantages   ESTIMATORS[estimator](rewards, values, episode_ids, gamma) and returns R_t
    4. critic       one epoch of SmoothL1 regression on R_t (every step, warm-up included)
    5. actor        unless in critic warm-up: drop turns with A_t == 0 exactly, recompute the
                    old log-probs with the current weights (the paper recomputes them; the
                    behaviour log-probs are only a metric), then ``epochs`` passes of shuffled
                    minibatches of the PPO clip loss, AdamW at a constant lr, grad clip
    6. curriculum   s_k = 1 / mean episode length of level k
    7. metrics      one JSON line per step in ``<out>/metrics.jsonl`` and every callback

Minibatches are counted in turns (a CPU preset's 4 turns, Table 4's 1024, Table 9's 4096);
within a minibatch, turns are scored ``rollout.score_micro_batch`` at a time and their losses
are weighted by token count, so the accumulated gradient is exactly that of the minibatch's
token-mean loss. Everything random is seeded from ``settings.seed`` and saved in checkpoints,
so a resumed run continues bit-for-bit like an uninterrupted one (CPU, float32).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.rl.advantages import compute_advantages
from odyssey_core.rl.batch import TurnBatch
from odyssey_core.rl.checkpoint import (
    capture_rng_state,
    latest_checkpoint,
    load_trainer_state,
    policy_dir,
    restore_rng_state,
    save_checkpoint,
)
from odyssey_core.rl.critic import CriticTrainer, explained_variance
from odyssey_core.rl.curriculum import AutoCurriculum
from odyssey_core.rl.losses import (
    actor_loss,
    broadcast_turn_advantages,
    pad_ragged,
    select_nonzero_advantage_turns,
)
from odyssey_core.rl.train_settings import RLTrainSettings

__all__ = ["MetricsCallback", "RLTrainer", "build_policy", "build_vector_env", "collection_seed"]

log = logging.getLogger(__name__)
MetricsCallback = Callable[[int, dict[str, float]], None]
METRICS_FILE = "metrics.jsonl"
BASE_MODEL_DIR = "base-model"


def collection_seed(run_seed: int, step: int) -> int:
    """The rollout seed of training step ``step``: a pure function, so a resume needs only
    the step counter to replay the same env seeds and sampling seeds."""
    return int(np.random.SeedSequence([run_seed % 2**32, step, 0x0D]).generate_state(1)[0])


def _chunks(index: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    for start in range(0, index.numel(), size):
        yield index[start : start + size]


# -- building the pieces ---------------------------------------------------------------------------


def resolve_base_model(settings: RLTrainSettings, out_dir: Path) -> Path:
    """The base checkpoint; with ``model.path: null`` a tiny Qwen3-VL is built into the run."""
    if settings.model.path is not None:
        return Path(settings.model.path)
    path = out_dir / BASE_MODEL_DIR
    if not (path / "config.json").is_file():
        from odyssey_core.models.tiny import build_tiny_model

        build_tiny_model(path, seed=0)  # fixed seed: the same tiny model for every run
    return path


def build_policy(settings: RLTrainSettings, out_dir: Path, checkpoint: Path | None = None) -> Any:
    """An HFPolicy on the base model (+ fresh LoRA), or on a checkpoint's weights/adapter."""
    from odyssey_core.models.loading import load_model, load_processor
    from odyssey_core.models.lora import apply_lora, load_adapter
    from odyssey_core.policy.hf import HFPolicy

    m = settings.model
    base = resolve_base_model(settings, out_dir)
    kwargs = {"dtype": m.dtype, "device": m.device, "attn_implementation": m.attn_implementation}
    if checkpoint is None:
        model = load_model(base, **kwargs)
        if settings.lora is not None:
            model = apply_lora(model, settings.lora)
    elif settings.lora is not None:
        model = load_adapter(
            base, policy_dir(checkpoint), dtype=m.dtype, device=m.device, trainable=True
        )
    else:
        model = load_model(policy_dir(checkpoint), **kwargs)
    processor = load_processor(base if checkpoint is None else policy_dir(checkpoint))
    model.eval()  # RL runs without dropout, so old and new log-probs come from one function
    return HFPolicy(
        model, processor, game=m.game, image_scale=m.image_scale, image_size=m.image_size
    )


def build_vector_env(settings: RLTrainSettings) -> Any:
    """``rollout.n_envs`` envs on the configured levels (the collector resets them per episode)."""
    from odyssey_core.envs.vector import SubprocVectorEnv, SyncVectorEnv

    env_config = settings.env.model_copy(update={"max_turns": settings.rollout.max_turns})
    names = [settings.levels[i % len(settings.levels)] for i in range(settings.rollout.n_envs)]
    kind = SubprocVectorEnv if settings.rollout.vector == "subproc" else SyncVectorEnv
    return kind(names, env_kwargs={"config": env_config})


# -- the optimiser step, plain or under DeepSpeed ---------------------------------------------


class _PlainUpdater:
    """AdamW on the trainable weights with gradient-norm clipping."""

    def __init__(self, model: torch.nn.Module, lr: float, weight_decay: float, clip: float):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)
        self.clip = clip

    def backward(self, loss: torch.Tensor, boundary: bool) -> None:
        loss.backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)


def deepspeed_config(settings: RLTrainSettings, world_size: int = 1) -> dict[str, Any]:
    """The preset's DeepSpeed JSON with its ``"auto"`` values filled for the policy update.

    The trainer does its own micro-batching and token weighting, so DeepSpeed sees one
    "sample" per backward and no accumulation of its own; the optimiser is ours (AdamW).
    """
    assert settings.deepspeed is not None
    config = json.loads(Path(settings.deepspeed).read_text())
    config.pop("optimizer", None)
    config.pop("scheduler", None)
    fills = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world_size,
        "gradient_clipping": settings.ppo.grad_clip,
    }
    for key, value in fills.items():
        if config.get(key, "auto") == "auto":
            config[key] = value
    for precision, dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        section = config.get(precision)
        if isinstance(section, dict) and section.get("enabled") == "auto":
            section["enabled"] = settings.model.dtype == dtype
    return config


class _DeepSpeedUpdater:
    """The same update under a DeepSpeed engine (ZeRO-2: optimiser states and gradients
    partitioned across ranks). Launch with ``deepspeed``; on CPU it runs on gloo."""

    def __init__(self, model: torch.nn.Module, settings: RLTrainSettings) -> None:
        try:
            import deepspeed
        except ImportError as err:
            raise RuntimeError(
                "the preset sets `deepspeed:` but DeepSpeed is not installed "
                "(pip install 'odyssey-core[deepspeed]'), or set `deepspeed: null`"
            ) from err
        import torch.distributed as dist

        if not dist.is_initialized():
            backend = "nccl" if settings.model.device.startswith("cuda") else "gloo"
            deepspeed.init_distributed(dist_backend=backend)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(
            params, lr=settings.ppo.lr, weight_decay=settings.actor_weight_decay
        )
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            model_parameters=params,
            config=deepspeed_config(settings, dist.get_world_size()),
        )

    def backward(self, loss: torch.Tensor, boundary: bool) -> None:
        # Reduce (and let ZeRO partition) gradients only after the minibatch's last piece.
        self.engine.set_gradient_accumulation_boundary(boundary)
        self.engine.backward(loss)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float("nan") if norm is None else float(norm)

    def state_dict(self) -> dict[str, Any]:
        import torch.distributed as dist

        if dist.get_world_size() > 1:  # each rank holds only its partition of the state
            raise NotImplementedError(
                "checkpoints of multi-rank DeepSpeed runs are not implemented yet (the ZeRO-2 "
                "optimiser state is partitioned per rank); use world size 1 or no checkpoints"
            )
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)


# -- the trainer ------------------------------------------------------------------------------


class RLTrainer:
    """Owns the policy, critic, curriculum and optimiser of one run; ``train()`` runs it."""

    def __init__(
        self,
        settings: RLTrainSettings,
        policy: Any,
        vector_env: Any,
        out_dir: str | Path,
        callbacks: Sequence[MetricsCallback] = (),
    ) -> None:
        from odyssey_core.rollout.collector import RolloutCollector

        self.settings, self.policy, self.vector_env = settings, policy, vector_env
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.callbacks = list(callbacks)
        s = settings
        self.critic = CriticTrainer(s.critic, seed=s.seed)
        self.curriculum = AutoCurriculum(s.levels, floor=s.curriculum.floor, seed=s.seed)
        self.collector = RolloutCollector(
            vector_env, policy, s.rollout.generation, max_turns=s.rollout.max_turns
        )
        if s.deepspeed is not None:
            self.updater: Any = _DeepSpeedUpdater(policy.model, s)
        else:
            self.updater = _PlainUpdater(
                policy.model, s.ppo.lr, s.actor_weight_decay, s.ppo.grad_clip
            )
        self.generator = torch.Generator().manual_seed(s.seed)  # actor minibatch shuffling
        self.step = 0  # training steps completed

    # -- construction from a preset -------------------------------------------------------------

    @classmethod
    def from_settings(
        cls,
        settings: RLTrainSettings,
        out_dir: str | Path,
        *,
        resume: bool = False,
        callbacks: Sequence[MetricsCallback] = (),
    ) -> RLTrainer:
        """Build everything; with ``resume`` continue from the latest complete checkpoint."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        checkpoint = latest_checkpoint(out) if resume else None
        policy = build_policy(settings, out, checkpoint)
        trainer = cls(settings, policy, build_vector_env(settings), out, callbacks)
        if checkpoint is not None:
            trainer.load_state_dict(load_trainer_state(checkpoint))
            log.info("resumed from %s (step %d)", checkpoint, trainer.step)
        trainer._truncate_metrics()
        return trainer

    # -- one training step ----------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        s, step = self.settings, self.step
        timing: dict[str, float] = {}
        started = time.perf_counter()

        levels = self.curriculum.sample(s.rollout.num_trajectories)
        batch, rollout = self.collector.collect(
            s.rollout.num_trajectories, levels=levels, seed=collection_seed(s.seed, step)
        )
        timing["rollout_s"] = time.perf_counter() - started

        t0 = time.perf_counter()
        values = self.critic.predict(batch.frames) if s.needs_values else None
        timing["critic_predict_s"] = time.perf_counter() - t0
        advantages, returns = compute_advantages(
            s.estimator, batch.rewards.float(), values, batch.episode_ids, s.ppo.gamma
        )
        batch = batch.with_fields(values=values, advantages=advantages, returns=returns)

        metrics: dict[str, float] = {"step": float(step + 1)}
        metrics.update(rollout.as_dict())
        metrics.update(self._collapse_metrics(batch))
        if values is not None:  # how well the critic knew this batch before training on it
            metrics["critic/explained_variance_pre"] = explained_variance(values, returns)
        metrics["adv/mean"] = float(advantages.mean())
        metrics["adv/std"] = float(advantages.std(correction=0))
        metrics["adv/nonzero_frac"] = float((advantages != 0).float().mean())

        t0 = time.perf_counter()
        metrics.update(self.critic.train_on_batch(batch, s.ppo.gamma))
        timing["critic_train_s"] = time.perf_counter() - t0

        actor_may_update = self.critic.actor_may_update(step)
        metrics["actor/updated"] = float(actor_may_update)
        if actor_may_update:
            metrics.update(self._policy_update(batch, timing))

        by_level: dict[str, list[int]] = {}
        for part in batch.episode_slices():
            by_level.setdefault(batch.levels[part.start], []).append(part.stop - part.start)
        if s.curriculum.enabled:
            self.curriculum.update(by_level)
        metrics.update(self.curriculum.metrics())

        critic_s = timing["critic_predict_s"] + timing["critic_train_s"]
        update_s = critic_s + timing.get("old_logprob_s", 0.0) + timing.get("actor_update_s", 0.0)
        timing["critic_share_of_update"] = critic_s / update_s if update_s > 0 else float("nan")
        timing["step_s"] = time.perf_counter() - started
        metrics.update({f"time/{k}": v for k, v in timing.items()})
        self.step += 1
        return metrics

    def _collapse_metrics(self, batch: TurnBatch) -> dict[str, float]:
        """GTR's thought-collapse signals on this batch's answers; crossed thresholds warn."""
        from odyssey_core.eval.collapse import collapse_metrics

        report = collapse_metrics([e.get("response", "") for e in batch.extras], batch.frames)
        for warning in report.warnings():
            log.warning("step %d thought collapse: %s", self.step + 1, warning)
        return {f"collapse/{key}": value for key, value in report.metrics.items()}

    def _policy_update(self, batch: TurnBatch, timing: dict[str, float]) -> dict[str, float]:
        """PPO-clip over the turns with non-zero advantage; returns the actor metrics."""
        s = self.settings
        assert batch.advantages is not None
        if s.ppo.skip_zero_advantage:
            kept = select_nonzero_advantage_turns(batch.advantages)
        else:
            kept = torch.arange(len(batch))
        metrics = {"actor/skipped_turn_frac": 1.0 - kept.numel() / max(1, len(batch))}
        if kept.numel() == 0:
            return metrics
        turns = batch.select(kept)
        temperature = s.rollout.generation.temperature
        micro = s.rollout.score_micro_batch

        # Old log-probs: the current weights, before any update of this step (the paper
        # recomputes them rather than trusting the sampler's numbers).
        t0 = time.perf_counter()
        with torch.no_grad():
            old = self.policy.score(
                turns.prompt_ids, turns.response_ids, turns.frames, temperature, micro
            )
            old = [o.detach().float().cpu() for o in old]
            ref = self._reference_logprobs(turns) if s.ppo.kl_coef > 0 else None
        behaviour = turns.behaviour_logprobs
        gaps = torch.cat([(o - b).abs() for o, b in zip(old, behaviour, strict=True)])
        metrics["actor/old_vs_behaviour_logprob_abs"] = float(gaps.mean())
        timing["old_logprob_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        sums: dict[str, float] = {}
        tokens_seen, grad_norms = 0, []
        for _ in range(s.ppo.epochs):
            order = torch.randperm(kept.numel(), generator=self.generator)
            for minibatch in _chunks(order, s.ppo.minibatch_size):
                total = sum(turns.response_ids[i].numel() for i in minibatch.tolist())
                pieces = list(_chunks(minibatch, micro))
                for j, piece in enumerate(pieces):
                    rows = piece.tolist()
                    loss, piece_metrics, n_tokens = self._piece_loss(turns, rows, old, ref)
                    # Token-weighted so the accumulated gradient is the minibatch token-mean.
                    self.updater.backward(loss * (n_tokens / total), j == len(pieces) - 1)
                    for key, value in piece_metrics.items():
                        sums[key] = sums.get(key, 0.0) + value * n_tokens
                    tokens_seen += n_tokens
                grad_norms.append(self.updater.step())
        timing["actor_update_s"] = time.perf_counter() - t0
        metrics.update({k: v / max(1, tokens_seen) for k, v in sums.items()})
        metrics["actor/grad_norm"] = float(np.mean(grad_norms))
        metrics["actor/turns"] = float(kept.numel())
        metrics["actor/tokens"] = float(tokens_seen / s.ppo.epochs)
        return metrics

    def _piece_loss(
        self,
        turns: TurnBatch,
        rows: list[int],
        old: list[torch.Tensor],
        ref: list[torch.Tensor] | None,
    ) -> tuple[torch.Tensor, dict[str, float], int]:
        """Token-mean PPO loss of a few turns, scored with gradients."""
        s = self.settings
        with torch.enable_grad():
            new = self.policy.score(
                [turns.prompt_ids[i] for i in rows],
                [turns.response_ids[i] for i in rows],
                [turns.frames[i] for i in rows],
                s.rollout.generation.temperature,
                len(rows),
            )
            new_padded, mask = pad_ragged(new)
            old_padded, _ = pad_ragged([old[i] for i in rows])
            ref_padded = None if ref is None else pad_ragged([ref[i] for i in rows])[0]
            assert turns.advantages is not None
            advantages = broadcast_turn_advantages(turns.advantages[rows].float(), mask)
            loss, metrics = actor_loss(
                new_padded,
                old_padded.to(new_padded.device),
                advantages.to(new_padded.device),
                mask.to(new_padded.device),
                eps_low=s.ppo.eps_low,
                eps_high=s.ppo.eps_high,
                ref_logprobs=None if ref_padded is None else ref_padded.to(new_padded.device),
                kl_coef=s.ppo.kl_coef,
            )
        return loss, metrics, int(mask.sum())

    def _reference_logprobs(self, turns: TurnBatch) -> list[torch.Tensor]:
        """log pi_ref for the KL penalty: the base model (the LoRA adapter switched off)."""
        model = self.policy.model
        if not hasattr(model, "disable_adapter"):
            raise ValueError("kl_coef > 0 is supported with LoRA only (the base is the reference)")
        with model.disable_adapter():
            ref = self.policy.score(
                turns.prompt_ids,
                turns.response_ids,
                turns.frames,
                self.settings.rollout.generation.temperature,
                self.settings.rollout.score_micro_batch,
            )
        return [r.detach().float().cpu() for r in ref]

    # -- the loop -------------------------------------------------------------------------------

    def train(self, steps: int | None = None) -> list[dict[str, float]]:
        """Run until ``steps`` (default: the preset's) steps are done, checkpointing on the way."""
        total = self.settings.steps if steps is None else steps
        history = []
        while self.step < total:
            metrics = self.train_step()
            self._log(metrics)
            history.append(metrics)
            if self.step % self.settings.checkpoint_every == 0 or self.step == total:
                self.save()
        return history

    def _log(self, metrics: dict[str, float]) -> None:
        with open(self.out_dir / METRICS_FILE, "a") as f:
            f.write(json.dumps(metrics, sort_keys=True) + "\n")
        for callback in self.callbacks:
            callback(self.step, metrics)

    def _truncate_metrics(self) -> None:
        """Forget metric lines of steps after the checkpoint we resumed from (a killed run may
        have logged a step it never checkpointed; it will be logged again)."""
        path = self.out_dir / METRICS_FILE
        if not path.is_file():
            return
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        kept = [ln for ln in lines if json.loads(ln).get("step", 0) <= self.step]
        path.write_text("".join(ln + "\n" for ln in kept))

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "seed": self.settings.seed,
            "next_collection_seed": collection_seed(self.settings.seed, self.step),
            "critic": self.critic.state_dict(),
            "policy_optimizer": self.updater.state_dict(),
            "curriculum": self.curriculum.state_dict(),
            "generator": self.generator.get_state(),
            "rng": capture_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.critic.load_state_dict(state["critic"])
        self.updater.load_state_dict(state["policy_optimizer"])
        self.curriculum.load_state_dict(state["curriculum"])
        self.generator.set_state(state["generator"])
        restore_rng_state(state["rng"])

    def save(self) -> Path:
        model = self.policy.model
        path = save_checkpoint(
            self.out_dir,
            self.step,
            model=model,
            processor=self.policy.processor,
            trainer_state=self.state_dict(),
            config=self.settings.model_dump(mode="json"),
        )
        log.info("checkpoint %s", path)
        return path

    def close(self) -> None:
        close = getattr(self.vector_env, "close", None)
        if close is not None:
            close()
