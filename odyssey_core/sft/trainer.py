"""Supervised fine-tuning of a Qwen-VL policy on teacher answers (the paper's light SFT stage).

One optimizer step takes ``batch_size`` samples from a seeded shuffle of the train split,
splits them into ``grad_accum_steps`` micro-batches, and minimises the token-mean
cross-entropy over every response token of the step (prompt and image tokens are masked by
:class:`~odyssey_core.sft.data.SFTCollator`). Then: gradient clipping, AdamW, and a cosine
schedule with linear warm-up. Metrics go to ``out/metrics.jsonl`` and to any callbacks.

Checkpoints are written every ``checkpoint_every`` steps to ``out/checkpoints/step-XXXXXXXXX/``
(staged in a temporary folder, synced, then renamed, so a crash never leaves a half-written one) and
``out/checkpoints/latest`` names the newest. A checkpoint holds everything a resumed run
needs to continue bit-for-bit: weights (or the LoRA adapter) with the processor, optimizer
and scheduler state, the python/numpy/torch RNG states, the step and the position in the
data order. The data order of each epoch is a permutation seeded by ``seed + epoch``, so the
position (epoch, index) is enough to rebuild it.

Rare answers can be up-weighted (``answer_balance``): ``sampler`` replaces the permutation by
draws with replacement, still seeded by ``seed + epoch`` (so resuming is unchanged), and
``loss`` weights each row's response tokens; both use the per-answer weights of
:func:`~odyssey_core.sft.data.answer_weights`.

Under a launcher (``torchrun``, ``deepspeed``) each rank takes rows ``rank::world`` of every
step's ``batch_size`` and the loss is the token mean over all ranks' tokens; the gradients are
averaged over ranks (DeepSpeed's engine, or one all-reduce before clipping in the plain path).
Rank 0 writes the weights, metrics and its state; every other rank adds its RNG state as a
shard of the checkpoint, before rank 0 writes its own state file last. A process without a
launcher that uses DeepSpeed becomes rank 0 of a world of one first. Every checkpoint file is
read back with ``weights_only=True`` (DeepSpeed's through its engine, allow-listed).
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from odyssey_core.common.checkpointing import capture_rng_state, restore_rng_state
from odyssey_core.common.files import replace_folder
from odyssey_core.common.metrics_log import MetricsLog
from odyssey_core.common.run_folder import (
    CHECKPOINTS_DIR,
    STATE_FILE,
    checkpoint_name,
    latest_checkpoint,
    point_latest,
    publish_step_folder,
    step_folders,
)
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.rl.checkpoint import WeightsOnlyCheckpointEngine, load_weights_only, shard_file
from odyssey_core.rl.distributed import (
    average_gradients,
    barrier,
    current_world,
    init_process_group,
    rank_device,
)
from odyssey_core.sft.data import IGNORE_INDEX, SFTCollator, SFTDataset, answer_weights
from odyssey_core.sft.settings import SFTSettings

__all__ = [
    "DEEPSPEED_HINT",
    "MetricsCallback",
    "SFTResult",
    "SFTTrainer",
    "cosine_schedule",
    "latest_checkpoint",
    "read_sft_result",
]

log = logging.getLogger(__name__)

MetricsCallback = Callable[[dict[str, Any]], None]
DEEPSPEED_HINT = (
    "settings.deepspeed is set but DeepSpeed is not installed; install the GPU extra with "
    "`pip install 'odyssey-core[deepspeed]'` (or unset `deepspeed` to train without it)"
)


@dataclass(frozen=True)
class SFTResult:
    final_dir: Path
    steps: int
    train_loss: float | None
    eval_loss: float | None


def cosine_schedule(
    total_steps: int, warmup_steps: int, min_ratio: float = 0.0, cosine: bool = True
) -> Callable[[int], float]:
    """LR multiplier per step, as HF's ``get_cosine_schedule_with_warmup`` (the paper's
    trainer): linear from 0 over the warm-up, then a half cosine down to ``min_ratio``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        if not cosine:
            return 1.0
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return min_ratio + (1 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return factor


class SFTTrainer:
    """Fine-tunes the checkpoint in ``model_dir`` on the dataset folder ``dataset_dir``.

    ``system_prompts`` (game -> prompt) replaces the registered system prompt of those games'
    rows, for a recipe whose policy runs with its own (GTR's card games)."""

    def __init__(
        self,
        settings: SFTSettings,
        dataset_dir: str | Path,
        model_dir: str | Path,
        out_dir: str | Path,
        *,
        resume: bool = False,
        callbacks: Sequence[MetricsCallback] = (),
        system_prompts: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.dataset_dir = Path(dataset_dir)
        self.model_dir = Path(model_dir)
        self.out = Path(out_dir)
        self.callbacks = list(callbacks)
        self.ckpt_root = self.out / CHECKPOINTS_DIR
        self.metrics_log = MetricsLog(self.out)
        self.metrics_path = self.metrics_log.path
        if settings.deepspeed is not None:
            try:
                import deepspeed  # noqa: F401
            except ImportError as err:
                raise ImportError(DEEPSPEED_HINT) from err

        self.train_set = SFTDataset(self.dataset_dir, split="train")
        self.val_set = SFTDataset(self.dataset_dir, split="val")
        if len(self.train_set) == 0:
            raise ValueError(f"{self.dataset_dir}: the train split is empty")
        # Per-row weights of the rare-answer balancing (None: every row weighs 1).
        self.row_weights: np.ndarray | None = None
        if settings.answer_balance != "none":
            self.row_weights = answer_weights(self.train_set.samples, settings.answer_balance_power)
        expected = settings.expected_dataset_size
        if expected is not None and expected != len(self.train_set):
            log.warning(
                "preset expects %d train rows, the dataset has %d", expected, len(self.train_set)
            )

        world = current_world()  # the launcher's, or a world of one
        self.world_size, self.rank = world.size, world.rank
        if settings.batch_size % (settings.grad_accum_steps * self.world_size):
            raise ValueError("batch_size must divide into grad_accum_steps x world size")
        self.device = self._pick_device()
        if self.world_size > 1 or settings.deepspeed is not None:
            init_process_group(self.device)
        self.autocast = settings.precision == "bf16" or (
            settings.precision == "auto" and self.device.type == "cuda"
        )

        resume_from = latest_checkpoint(self.out) if resume else None
        if resume and resume_from is None:
            log.warning("--resume: no checkpoint under %s, starting from scratch", self.ckpt_root)
        self.model, self.processor = self._load_model(resume_from)
        self.policy = HFPolicy(
            self.model,
            self.processor,
            image_scale=settings.image_scale,
            image_size=settings.image_size,
        )
        self.collator = SFTCollator(
            self.processor, settings.image_scale, settings.image_size, system_prompts
        )

        steps_per_epoch = math.ceil(len(self.train_set) / settings.batch_size)
        self.total_steps = steps_per_epoch * settings.epochs
        if settings.max_steps is not None:
            self.total_steps = min(self.total_steps, settings.max_steps)
        self.warmup_steps = math.ceil(settings.warmup_ratio * self.total_steps)
        self.optimizer = torch.optim.AdamW(
            self._param_groups(),
            lr=settings.lr,
            betas=settings.adam_betas,
            eps=settings.adam_eps,
            weight_decay=settings.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            cosine_schedule(
                self.total_steps,
                self.warmup_steps,
                settings.min_lr_ratio,
                cosine=settings.lr_scheduler == "cosine",
            ),
        )
        self.engine: Any = None
        if settings.deepspeed is not None:
            self._init_deepspeed()

        self.step, self.epoch, self.index = 0, 0, 0
        if resume_from is not None:
            self._load_state(resume_from)
        else:
            random.seed(settings.seed)
            np.random.seed(settings.seed)
            torch.manual_seed(settings.seed)

    # ----------------------------------------------------------------------------- setup
    def _pick_device(self) -> torch.device:
        """``auto``: CUDA when there is one; CUDA means this rank's GPU (``cuda:LOCAL_RANK``)."""
        name = self.settings.device
        if name == "auto":
            name = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.device(rank_device(name))

    def _load_model(self, checkpoint: Path | None) -> tuple[Any, Any]:
        from odyssey_core.models import apply_lora, load_adapter, load_model, load_processor

        s = self.settings
        kwargs = {"dtype": s.model_dtype, "device": str(self.device)}
        attn = s.attn_implementation
        if s.lora is not None and checkpoint is not None:
            model = load_adapter(self.model_dir, checkpoint / "adapter", trainable=True, **kwargs)
        elif s.lora is not None:
            model = apply_lora(
                load_model(self.model_dir, attn_implementation=attn, **kwargs), s.lora
            )
        else:
            source = checkpoint / "model" if checkpoint is not None else self.model_dir
            model = load_model(source, attn_implementation=attn, **kwargs)
        if s.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            if s.lora is not None:
                model.enable_input_require_grads()  # frozen embeddings still need grad flow
        model.train()
        source = self.model_dir if checkpoint is None else self._proc_dir(checkpoint)
        return model, load_processor(source)

    def _param_groups(self) -> list[dict[str, Any]]:
        """The language model (group 0, whose lr is logged) and, unless frozen by
        ``vision_lr_scale: 0``, the vision encoder with its merger at ``vision_lr_scale x lr``."""
        scale = self.settings.vision_lr_scale
        text, vision = [], []
        for name, param in self.model.named_parameters():
            if not param.requires_grad:
                continue
            if ".visual." in f".{name}":  # Qwen-VL names: model.visual.* (LoRA: ...model.visual.*)
                if scale == 0:
                    param.requires_grad_(False)  # frozen: no gradients, no optimizer state
                else:
                    vision.append(param)
            else:
                text.append(param)
        groups: list[dict[str, Any]] = [{"params": text}]
        if vision:
            groups.append({"params": vision, "lr": self.settings.lr * scale})
        return [g for g in groups if g["params"]]

    def _proc_dir(self, checkpoint: Path) -> Path:
        return checkpoint / ("adapter" if self.settings.lora is not None else "model")

    def _init_deepspeed(self) -> None:
        import deepspeed

        s = self.settings
        config = json.loads(s.deepspeed_config().read_text())  # type: ignore[union-attr]
        # Fill the "auto" entries from our settings (HF's integration does the same).
        fill = {
            "train_batch_size": s.batch_size,
            "train_micro_batch_size_per_gpu": self.micro_batch_size,
            "gradient_accumulation_steps": s.grad_accum_steps,
            "gradient_clipping": s.max_grad_norm or 0.0,
        }
        for key, value in fill.items():
            if config.get(key, "auto") == "auto":
                config[key] = value
        if config.get("bf16", {}).get("enabled") == "auto":
            config["bf16"]["enabled"] = self.autocast
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=self.model, optimizer=self.optimizer, lr_scheduler=self.scheduler, config=config
        )
        self.engine.checkpoint_engine = WeightsOnlyCheckpointEngine(self.engine.checkpoint_engine)

    @property
    def micro_batch_size(self) -> int:
        s = self.settings
        return s.batch_size // (s.grad_accum_steps * self.world_size)

    # ----------------------------------------------------------------------------- data
    def epoch_order(self, epoch: int) -> np.ndarray:
        """The train order of ``epoch`` (depends only on seed and epoch): a permutation, or
        with ``answer_balance: sampler`` as many weighted draws with replacement."""
        rng = np.random.default_rng([self.settings.seed, epoch])
        n = len(self.train_set)
        if self.settings.answer_balance == "sampler" and self.row_weights is not None:
            return rng.choice(n, size=n, replace=True, p=self.row_weights / self.row_weights.sum())
        return rng.permutation(n)

    def _next_indices(self) -> tuple[list[int], int]:
        """This rank's share of the next optimizer step's train rows (rows ``rank::world``),
        and how many rows the step has on all ranks; advances the position."""
        order = self.epoch_order(self.epoch)
        chosen = order[self.index : self.index + self.settings.batch_size]
        self.index += len(chosen)
        if self.index >= len(order):
            self.epoch, self.index = self.epoch + 1, 0
        return [int(i) for i in chosen[self.rank :: self.world_size]], len(chosen)

    def _micro_batches(self, rows: int) -> int:
        """How many micro-batches a rank with ``rows`` rows of the step runs."""
        return min(self.settings.grad_accum_steps, max(1, rows))

    def _loss_weights(self, indices: Sequence[int]) -> torch.Tensor | None:
        """Per-row token weights of ``answer_balance: loss`` (None: unweighted)."""
        if self.settings.answer_balance != "loss" or self.row_weights is None:
            return None
        return torch.tensor(self.row_weights[list(indices)], dtype=torch.float32)

    # ----------------------------------------------------------------------------- model
    def _loss_sums(
        self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, float]:
        """Summed response-token cross-entropy of a collated batch, and its token count;
        with per-row ``weights`` both are weighted (each token counts as its row's weight)."""
        keep = int(batch["max_response_len"]) + 1
        inputs = {k: v.to(self.device) for k, v in batch.items() if k != "max_response_len"}
        labels = inputs.pop("labels")
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            # Left padding puts every response at the end: only the last logits are needed.
            out = self.policy._forward(inputs, use_cache=False, logits_to_keep=keep)
        logits = out.logits[:, :-1].float()  # position t predicts token t + 1
        targets = labels[:, -(keep - 1) :]
        if weights is None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                targets.reshape(-1),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            return loss, int((targets != IGNORE_INDEX).sum())
        per_token = F.cross_entropy(
            logits.transpose(1, 2), targets, ignore_index=IGNORE_INDEX, reduction="none"
        )  # [batch, positions], 0 where ignored
        weights = weights.to(per_token.device)
        counts = (targets != IGNORE_INDEX).sum(dim=1).to(per_token.dtype)
        return (per_token.sum(dim=1) * weights).sum(), float((counts * weights).sum())

    def _token_count(self, n_local: float) -> float:
        """``n_local`` summed over ranks: the step's (possibly weighted) token count, or its
        loss sum."""
        if self.world_size == 1:
            return n_local
        count = torch.tensor(float(n_local), device=self.device, dtype=torch.float64)
        torch.distributed.all_reduce(count)
        return float(count)

    def train_step(self) -> dict[str, Any]:
        s = self.settings
        start = time.perf_counter()
        indices, step_rows = self._next_indices()
        samples = [self.train_set[i] for i in indices]
        n_chunks = self._micro_batches(len(samples))
        chunks = [list(c) for c in np.array_split(np.arange(len(samples)), n_chunks)]
        chunks = [c for c in chunks if len(c)]
        batches = [self.collator([samples[i] for i in c]) for c in chunks]
        backwards = len(batches)
        if self.engine is not None and self.world_size > 1:
            # ZeRO-2 reduces in every backward, so every rank runs as many as the rank with
            # the most micro-batches (the last step of an epoch may leave a rank short)
            backwards = max(
                self._micro_batches(len(range(r, step_rows, self.world_size)))
                for r in range(self.world_size)
            )
        weights = [self._loss_weights([indices[i] for i in c]) for c in chunks]
        # Token-mean over the whole step: each micro-batch is divided by the step's count
        # (weighted by the rows' answer weights under `answer_balance: loss`).
        counts = [(b["labels"] != IGNORE_INDEX).sum(dim=1) for b in batches]
        n_plain = int(self._token_count(sum(int(c.sum()) for c in counts)))
        n_tokens = n_plain
        if any(w is not None for w in weights):
            n_tokens = self._token_count(
                sum(
                    float((c.float() * (1.0 if w is None else w)).sum())
                    for c, w in zip(counts, weights, strict=True)
                )
            )
        seen_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
        total = 0.0
        for index, (batch, weight) in enumerate(zip(batches, weights, strict=True)):
            loss_sum, _ = self._loss_sums(batch, weight)
            loss = loss_sum / max(1, n_tokens)
            if self.engine is not None:
                # DeepSpeed divides by its accumulation count and averages ranks: undo both.
                self.engine.set_gradient_accumulation_boundary(index == backwards - 1)
                self.engine.backward(loss * s.grad_accum_steps * self.world_size)
            elif self.world_size > 1:
                # the gradients are averaged over ranks below: times the world size, the sum
                # of every rank's share of the step's token mean
                (loss * self.world_size).backward()
            else:
                loss.backward()
            total += float(loss_sum.detach())
        for index in range(len(batches), backwards):  # a zero loss through a real forward
            loss_sum, _ = self._loss_sums(self.collator([self.train_set[0]]))
            self.engine.set_gradient_accumulation_boundary(index == backwards - 1)
            self.engine.backward(loss_sum * 0.0)
        total = self._token_count(total)  # the loss over every rank's tokens
        lr = self.optimizer.param_groups[0]["lr"]
        if self.engine is not None:
            self.engine.step()  # at the boundary set above: one optimizer and scheduler step
            grad_norm = float(self.engine.get_global_grad_norm() or 0.0)
        else:
            params = [p for p in self.model.parameters() if p.requires_grad]
            average_gradients(params)
            clip = s.max_grad_norm if s.max_grad_norm is not None else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        elapsed = time.perf_counter() - start
        return {
            "step": self.step,
            "epoch": self.epoch,
            "loss": total / max(1, n_tokens),
            "lr": lr,
            "grad_norm": grad_norm,
            "response_tokens": n_plain,
            "tokens_per_s": seen_tokens / max(elapsed, 1e-9),
            "time_s": elapsed,
        }

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Token-mean response cross-entropy on the val split (None when it is empty)."""
        samples = self.val_set.samples[: self.settings.eval_max_samples]
        if not samples:
            return None
        size = self.settings.eval_batch_size or self.micro_batch_size
        was_training = self.model.training
        self.model.eval()
        total, count = 0.0, 0
        try:
            for i in range(0, len(samples), size):
                loss_sum, n = self._loss_sums(self.collator(samples[i : i + size]))
                total, count = total + float(loss_sum), count + n
        finally:
            self.model.train(was_training)
        return total / max(1, count)

    # ----------------------------------------------------------------------------- loop
    def train(self) -> SFTResult:
        s = self.settings
        self.out.mkdir(parents=True, exist_ok=True)
        self._trim_metrics()
        train_loss = eval_loss = None
        while self.step < self.total_steps:
            record = self.train_step()
            train_loss = record["loss"]
            if self.step % s.log_every == 0 or self.step == self.total_steps:
                self._emit(record)
            last = self.step == self.total_steps
            if (s.eval_every and self.step % s.eval_every == 0) or last:
                eval_loss = self.evaluate()
                if eval_loss is not None:
                    self._emit({"step": self.step, "eval_loss": eval_loss})
            if self.step % s.checkpoint_every == 0 or last:
                self.save_checkpoint()
        if self.step == self.total_steps and eval_loss is None:  # resumed at the very end
            eval_loss = self.evaluate()
        final = self.save_final()
        return SFTResult(final, self.step, train_loss, eval_loss)

    def _emit(self, record: dict[str, Any]) -> None:
        if self.rank != 0:
            return
        self.metrics_log.append(record)
        for callback in self.callbacks:
            callback(record)

    def _trim_metrics(self) -> None:
        # After a crash, drop records past the checkpoint we resumed from (they are redone)
        # and any line the crash tore; the log is rewritten atomically.
        if self.rank == 0:
            self.metrics_log.keep_through(self.step)

    # ----------------------------------------------------------------------------- saving
    def _save_weights(self, folder: Path) -> None:
        from odyssey_core.models import save_adapter

        model = self.engine.module if self.engine is not None else self.model
        target = folder / ("adapter" if self.settings.lora is not None else "model")
        if self.settings.lora is not None:
            save_adapter(model, target)
        else:
            model.save_pretrained(target, safe_serialization=True)
        self.processor.save_pretrained(target)

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-XXXXXX`` atomically, then point ``latest`` at it."""
        name = checkpoint_name(self.step)
        final = self.ckpt_root / name
        staging = self.ckpt_root / f".tmp-{name}"
        if self.rank == 0:
            self.ckpt_root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
        barrier()  # (the folders of all ranks are one shared file system)
        state: dict[str, Any] = {"step": self.step, "epoch": self.epoch, "index": self.index}
        if self.rank != 0:  # this rank's RNG streams
            torch.save({"rng": capture_rng_state()}, staging / shard_file(self.rank))
        if self.engine is not None:
            # ZeRO shards the optimizer state over ranks: every rank writes its own part.
            self.engine.save_checkpoint(str(staging / "deepspeed"), tag="state")
        else:
            state["optimizer"] = self.optimizer.state_dict()
            state["scheduler"] = self.scheduler.state_dict()
        barrier()  # every rank's part is written
        if self.rank == 0:
            self._publish(staging, final, state)
        barrier()  # published when any rank returns
        return final

    def _publish(self, staging: Path, final: Path, state: dict[str, Any]) -> None:
        """Rank 0: the weights, its state and the run's settings into ``staging``, then the
        rename and the ``latest`` pointer."""
        self._save_weights(staging)
        state["rng"] = capture_rng_state()
        torch.save(state, staging / STATE_FILE)
        meta = {
            "settings": self.settings.model_dump(mode="json"),
            "dataset": str(self.dataset_dir),
            "model": str(self.model_dir),
            "step": self.step,
            "total_steps": self.total_steps,
        }
        (staging / "config.json").write_text(json.dumps(meta, indent=2))
        publish_step_folder(staging, final)  # a re-save of a step swaps, never removes first
        point_latest(self.out, final)
        self._prune()

    def _prune(self) -> None:
        keep = self.settings.keep_checkpoints
        if keep is None:
            return
        for old in step_folders(self.ckpt_root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)

    def _load_state(self, checkpoint: Path) -> None:
        state = load_weights_only(checkpoint / STATE_FILE)
        if self.rank != 0:  # this rank's own RNG streams, where the checkpoint has them
            shard = checkpoint / shard_file(self.rank)
            if shard.is_file():
                state["rng"] = load_weights_only(shard)["rng"]
        if self.engine is not None:
            self.engine.load_checkpoint(str(checkpoint / "deepspeed"), tag="state")
        else:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.epoch, self.index = state["step"], state["epoch"], state["index"]
        restore_rng_state(state["rng"])
        log.info("resumed from %s (step %d)", checkpoint, self.step)

    def save_final(self) -> Path:
        """``out/final``: a plain checkpoint (LoRA merged) that ``load_model`` reads."""
        from odyssey_core.models import merge_and_save

        final = self.out / "final"
        if self.rank != 0:
            return final
        # Written beside it and swapped in whole: a crash never leaves a half-written final/
        # that read_sft_result would take for a finished run.
        staging = self.out / ".tmp-final"
        shutil.rmtree(staging, ignore_errors=True)
        model = self.engine.module if self.engine is not None else self.model
        try:
            if self.settings.lora is not None:
                merge_and_save(model, staging, self.processor)
            else:
                model.save_pretrained(staging, safe_serialization=True)
                self.processor.save_pretrained(staging)
            replace_folder(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return final


def read_sft_result(out_dir: str | Path) -> SFTResult:
    """The result of a finished run in ``out_dir`` from what rank 0 wrote (its metrics and
    ``final/``): how a caller that launched the run in other processes learns it."""
    out = Path(out_dir)
    final = out / "final"
    if not (final / "config.json").is_file():
        raise FileNotFoundError(f"{out}: no finished SFT run (no {final}/config.json)")
    steps, train_loss, eval_loss = 0, None, None
    for record in MetricsLog(out).records():
        steps = max(steps, int(record.get("step", 0)))
        train_loss = record.get("loss", train_loss)
        eval_loss = record.get("eval_loss", eval_loss)
    return SFTResult(final, steps, train_loss, eval_loss)
