"""The GTR recipe on the one trainer (GTR paper Section 4, Algorithm 1): PPO plus thought
cloning from a corrector, with DAgger.

It configures the engine and plugs hooks into it; the loop itself is
:class:`odyssey_core.rl.trainer.Trainer`:

- envs: each card / ALFWorld env is wrapped in
  :class:`~odyssey_core.recipes.gtr.rewards.GTRWrapper`,
  so every turn the corrector judges the agent's thought, the format reward is added and
  hopeless or looping episodes are truncated;
- budget: ``turns_per_step`` turns over ``n_envs`` envs (auto-reset); the episodes still
  running at the end of the step are truncated and bootstrapped;
- value function: the value head on the VLM's last prompt token (the paper's default), whose
  loss joins the PPO backward weighted by ``ppo.value_coef`` (0.5), or the CNN critic on the
  frames (``value.source: cnn``);
- estimator: GAE(gamma, lambda), advantages standardised over the batch (``advantage:``; any
  estimator in ESTIMATORS by name);
- objective: turn-level PPO (eq. 2) on log pi(a_t) = lambda * sum log pi(thought) + sum log
  pi(action), with the exact-entropy bonus of Table 2;
- :class:`ThoughtCloning`: each valid correction joins the :class:`DaggerBuffer`, and every
  minibatch adds ``sft.coef`` * eq. 4's thought-cloning loss on examples sampled from it;
- updater: AdamW with a cosine decay to ``final_lr`` over ``lr_steps`` steps, then held.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.envs.registry import make_env
from odyssey_core.envs.vector import SyncVectorEnv
from odyssey_core.protocol.gtr_format import format_gtr_response
from odyssey_core.recipes.gtr.corrector import Correction, Corrector, build_corrector
from odyssey_core.recipes.gtr.dagger import DaggerBuffer, DaggerExample
from odyssey_core.recipes.gtr.evaluation import gtr_collapse_metrics
from odyssey_core.recipes.gtr.prompts import gtr_system_prompt
from odyssey_core.recipes.gtr.rewards import GTRRewardConfig, GTRWrapper
from odyssey_core.recipes.gtr.settings import GTRSettings
from odyssey_core.rl.build import ppo_objective, ppo_trainer_config, ppo_updater, rollout_collector
from odyssey_core.rl.checkpoint import latest_checkpoint
from odyssey_core.rl.hooks import CollapseMonitor
from odyssey_core.rl.policy import build_policy
from odyssey_core.rl.trainer import ExtraLoss, MetricsCallback, Trainer, TrainerConfig, TrainerHook
from odyssey_core.rl.value_functions import ValueFunctionInputs, make_value_function
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import TurnBudget, default_info_extras

__all__ = [
    "END_OF_TURN",
    "ThoughtCloning",
    "build_sft_example",
    "build_trainer",
    "gtr_info_extras",
    "sft_loss_pieces",
    "trainer_config",
]

END_OF_TURN = "<|im_end|>"


# -- thought cloning (eq. 4) ----------------------------------------------------------------------


def build_sft_example(
    tokenizer: Any, example: DaggerExample, target: str = "thought"
) -> tuple[list[int], list[int]]:
    """(response_ids, labels) for one buffer example; labels are -100 where no loss applies.

    ``thought``: the corrected thought, then the agent's action, then end of turn; loss on the
    thought tokens only. ``full_response``: the corrector's whole answer (its own action when it
    has one), loss on every token. Pieces are tokenised apart so the thought/action boundary
    falls exactly on a token boundary.
    """
    action = example.action
    if target == "full_response" and example.corrector_action is not None:
        action = example.corrector_action
    full = format_gtr_response(example.thought, action)
    body = example.thought.strip().rstrip(",").strip()
    tail = full[len(body) :]
    thought_ids = tokenizer.encode(body, add_special_tokens=False)
    tail_ids = tokenizer.encode(tail, add_special_tokens=False)
    tail_ids += [tokenizer.convert_tokens_to_ids(END_OF_TURN)]
    ids = list(thought_ids) + list(tail_ids)
    if target == "full_response":
        labels = list(ids)
    elif target == "thought":
        labels = list(thought_ids) + [-100] * len(tail_ids)
    else:
        raise ValueError(f"unknown SFT target {target!r}")
    return ids, labels


def sft_loss_pieces(
    policy: Any,
    examples: Sequence[DaggerExample],
    *,
    target: str = "thought",
    coef: float = 1.0,
    micro_batch: int = 4,
    temperature: float = 1.0,
) -> list[ExtraLoss]:
    """Eq. 4, L_SFT = -sum_t log P(th_t | s, th_<t), summed over each example's labelled tokens
    and averaged over the examples, times ``coef``: one deferred piece per micro-batch.

    The per-example sum (not a token mean) keeps the paper's weighting against the PPO term,
    which is itself a sum of token log-probs per turn (eq. 2). Each piece returns its share
    (its examples / all examples), so the pieces' gradients add up to the whole loss's.
    """
    tok = policy.tokenizer
    encoded = [build_sft_example(tok, e, target) for e in examples]
    n = len(examples)

    def piece(rows: list[int]) -> ExtraLoss:
        def run() -> tuple[torch.Tensor, dict[str, float]]:
            logprobs = policy.score(
                [list(examples[i].prompt_ids) for i in rows],
                [encoded[i][0] for i in rows],
                [examples[i].frame for i in rows],
                temperature,
                len(rows),
            )
            total = logprobs[0].new_zeros(())
            tokens = 0
            for i, lp in zip(rows, logprobs, strict=True):
                mask = torch.tensor([lab != -100 for lab in encoded[i][1]], device=lp.device)
                total = total - torch.where(mask, lp, 0.0).sum()
                tokens += int(mask.sum())
            per_example = total / len(rows)
            return coef * per_example * (len(rows) / n), {
                "sft/loss": per_example.item(),  # eq. 4: per example, summed over its tokens
                "sft/loss_per_token": total.item() / max(1, tokens),
                "sft/tokens_per_example": tokens / len(rows),
            }

        return run

    return [piece(list(range(s, min(n, s + micro_batch)))) for s in range(0, n, micro_batch)]


class ThoughtCloning(TrainerHook):
    """GTR's DAgger buffer and thought-cloning loss as a trainer hook."""

    name = "thought_cloning"

    def __init__(
        self,
        *,
        coef: float,
        batch_size: int,
        aggregate: bool,
        target: str,
        micro_batch: int,
        seed: int,
    ) -> None:
        self.buffer = DaggerBuffer(aggregate=aggregate)
        self.coef, self.batch_size, self.target = coef, batch_size, target
        self.micro_batch = micro_batch
        self.rng = np.random.default_rng(seed)

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        added = 0
        verdicts, kept = [], []
        for frame, prompt, extras in zip(batch.frames, batch.prompt_ids, batch.extras, strict=True):
            data = extras.get("correction")
            correction = None if data is None else Correction(**data)
            if correction is not None and correction.valid:
                verdicts.append(correction.agrees)
                kept.append(correction.thought_kept)
            # a thought judged correct is cloned as the agent wrote it (thought_kept)
            added += self.buffer.add(
                frame, prompt.tolist(), correction, str(extras.get("played")), trainer.step
            )
        return {
            "dagger/added": float(added),
            **self.buffer.metrics(),
            "corrector/agree_frac": float(np.mean(verdicts)) if verdicts else float("nan"),
            "corrector/kept_frac": float(np.mean(kept)) if kept else float("nan"),
        }

    def extra_losses(self, trainer: Trainer) -> list[ExtraLoss]:
        if self.coef == 0 or not len(self.buffer):
            return []
        examples = self.buffer.sample(self.batch_size, self.rng)
        return sft_loss_pieces(
            trainer.policy,
            examples,
            target=self.target,
            coef=self.coef,
            micro_batch=self.micro_batch,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"dagger": self.buffer.state_dict(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["dagger"])
        self.rng.bit_generator.state = state["rng"]


class EpisodeStats(TrainerHook):
    """GTR's rollout summary: turns, mean reward, invalid answers, finished episodes' returns."""

    name = "episode_stats"

    def on_batch(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        finished = [
            float(batch.rewards[part].sum())
            for part in batch.episode_slices()
            if bool(batch.terminated[part.stop - 1]) or batch.extras[part.stop - 1].get("truncated")
        ]
        metrics = {
            "rollout/turns": float(len(batch)),
            "rollout/reward_mean": float(batch.rewards.mean()),
            "rollout/invalid_frac": float(np.mean([e["invalid_action"] for e in batch.extras])),
            "rollout/episodes": float(len(finished)),
        }
        if finished:
            metrics["rollout/episode_return"] = float(np.mean(finished))
        return metrics


# -- wiring ---------------------------------------------------------------------------------------


def gtr_info_extras(before: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """A GTR turn's facts: the common ones, the legal actions the agent chose from, the action
    played, and the wrapper's correction, format reward and truncation reason."""
    extras = info.get("gtr", {})
    correction = extras.get("correction")
    if correction is not None:
        correction = {k: v for k, v in asdict(correction).items() if k != "details"}
    return {
        **default_info_extras(before, info),
        "legal_actions": list(before.get("legal_actions", ())),
        "played": None if info.get("action") is None else str(info.get("action")),
        "correction": correction,
        "format_reward": float(extras.get("format_reward", 0.0)),
        "truncation": extras.get("truncation"),
    }


def make_gtr_env(
    name: str, kwargs: dict[str, Any], corrector: Corrector | None, rewards: GTRRewardConfig
) -> GTRWrapper:
    return GTRWrapper(make_env(name, **kwargs), corrector, rewards)


def _gtr_collapse(batch: TurnBatch) -> Any:
    return gtr_collapse_metrics(
        [e.get("response", "") for e in batch.extras],
        batch.frames,
        [e.get("legal_actions", []) for e in batch.extras],
    )


def trainer_config(settings: GTRSettings) -> TrainerConfig:
    s = settings
    return ppo_trainer_config(
        s,
        TurnBudget(s.rollout.turns_per_step),
        "turn_ppo",
        ppo_objective(s.ppo, thought_weight=s.ppo.thought_weight),
        policy_loss=s.ppo.enabled,
    )


def build_trainer(
    settings: GTRSettings,
    out_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence[MetricsCallback] = (),
    corrector: Corrector | None = None,
    policy: Any = None,
) -> Trainer:
    """Everything of one GTR run (``model.path: null`` builds the tiny model); with ``resume``,
    continue from the latest complete checkpoint under ``out_dir``. ``policy`` replaces the
    one built from ``settings.model`` (tests), ``corrector`` the one ``rollout.corrector``
    names. A preset with ``requires_base_model`` and no ``model.path`` fails first; then the
    corrector is resolved: a missing setting (a model, an API root, an unset key variable)
    fails here, naming it, before any model is built or any env runs."""
    s, r = settings, settings.rollout
    if policy is None:  # a paper preset trains its base model, never the tiny one
        s.check_base_model()
    if corrector is None:
        corrector = build_corrector(r.corrector, r.corrector_kwargs, where="rollout.corrector")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(out) if resume else None
    if policy is None:
        prompt = gtr_system_prompt(r.env, r.env_kwargs)
        policy = build_policy(s.model, s.lora, out, checkpoint, system_prompt=prompt)
    factory = functools.partial(make_gtr_env, r.env, r.env_kwargs, corrector, r.rewards)
    collector, sync_hooks = rollout_collector(
        r.backend,
        policy,
        out,
        SyncVectorEnv([factory] * r.n_envs),
        r.generation,
        max_turns=r.turns_per_step,  # an episode never outlasts the step's budget
        response_format="gtr",
        info_extras=gtr_info_extras,
    )
    value = make_value_function(
        s.value.source,
        ValueFunctionInputs(
            policy,
            seed=s.seed,
            critic=s.critic,
            device=s.model.device,
            head_hidden_dims=s.value.head_hidden_dims,
            head_scale=s.value.scale,
            head_lr=s.value.head_lr or s.ppo.lr,
            value_coef=s.ppo.value_coef,
            micro_batch=r.score_micro_batch,
        ),
    )
    updater = ppo_updater(
        s,
        policy,
        value.param_groups(),
        schedule="cosine",
        final_lr=s.ppo.final_lr,
        lr_steps=s.ppo.lr_steps,
    )
    hooks: list[TrainerHook] = [
        EpisodeStats(),
        CollapseMonitor(_gtr_collapse),
        ThoughtCloning(
            coef=s.sft.coef,
            batch_size=s.sft.batch_size,
            aggregate=s.sft.dagger,
            target=s.sft.target,
            micro_batch=r.score_micro_batch,
            seed=s.seed,
        ),
        *sync_hooks,
    ]
    trainer = Trainer(
        trainer_config(s), policy, collector, value, updater, out, hooks=hooks, callbacks=callbacks
    )
    if resume:
        trainer.resume()
    return trainer
