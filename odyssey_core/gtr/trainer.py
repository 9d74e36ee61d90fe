"""GTR training (GTR paper Section 4, Algorithm 1): PPO plus thought cloning from a corrector.

One training step:

    1. rollout     ``turns_per_step`` turns on ``n_envs`` card envs (one batched ``generate``
                   per turn; envs reset themselves when an episode ends). Each env is wrapped in
                   :class:`~odyssey_core.gtr.rewards.GTRWrapper`, so every turn the corrector
                   judges the agent's thought, the format reward is added and hopeless or
                   looping episodes are truncated.
    2. dagger      each valid correction joins the :class:`DaggerBuffer` (DAgger aggregation).
    3. values      V(o_t) (``value.source``): the CNN critic on the frames, or the value head on
                   the VLM's last-prompt-token state (:mod:`odyssey_core.gtr.value_head`);
                   GAE(gamma, lambda) advantages, bootstrapped with V(o_{t+1}) at truncations
                   and at the end of the rollout.
    4. critic      (cnn only) regression on the GAE returns, on the critic's own optimiser.
    5. policy      ``epochs`` passes of minibatches: the turn-level PPO clip loss on
                   log pi(a_t) = lambda * sum log pi(thought) + sum log pi(action), minus an
                   entropy bonus, plus ``sft.coef`` * the cross-entropy of corrected thoughts
                   sampled from the buffer, plus (vlm_head) ``ppo.value_coef`` * the head's value
                   loss, read from the same scoring forward. Cosine learning-rate decay, one
                   step per update.

Every step also logs the thought-collapse metrics of its rollout (``collapse/*``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.envs.base import Observation
from odyssey_core.gtr.corrector import Correction, Corrector, make_corrector
from odyssey_core.gtr.dagger import DaggerBuffer, DaggerExample
from odyssey_core.gtr.evaluation import gtr_collapse_metrics
from odyssey_core.gtr.prompts import cards_system_prompt
from odyssey_core.gtr.rewards import GTRRewardConfig, GTRWrapper
from odyssey_core.gtr.settings import GTRSettings
from odyssey_core.gtr.value_head import VLMValueHead, capture_final_hidden
from odyssey_core.protocol.gtr_format import format_gtr_response, parse_gtr_response
from odyssey_core.rl.checkpoint import (
    latest_checkpoint,
    load_trainer_state,
    policy_dir,
    save_checkpoint,
)
from odyssey_core.rl.critic import CriticTrainer, explained_variance
from odyssey_core.rl.losses import combine_thought_action_logprobs, pad_ragged, ppo_clip_loss

__all__ = [
    "GTRTrainer",
    "Turn",
    "build_sft_example",
    "gae",
    "response_token_masks",
    "sft_loss",
]

log = logging.getLogger(__name__)
METRICS_FILE = "metrics.jsonl"
END_OF_TURN = "<|im_end|>"


@dataclass
class Turn:
    """One agent turn, with what the update needs to score it again."""

    env_index: int
    frame: np.ndarray
    next_frame: np.ndarray
    prompt_ids: list[int]
    response_ids: list[int]
    text: str
    reward: float
    terminated: bool
    ended: bool  # the episode (or, for the last turn of an env, the rollout) stops here
    played: str
    correction: Correction | None
    extra: dict[str, Any] = field(default_factory=dict)


# -- pieces with no state (tested on their own) ---------------------------------------------------


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    ended: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over one env's turns in time order: (advantages, returns = advantages + values).

    ``next_values`` is V(o_{t+1}); it is ignored after a termination (no future) but used after
    a truncation, and ``ended`` stops the lambda-sum from leaking into the next episode.
    """
    advantages = torch.zeros_like(rewards)
    running = torch.zeros((), dtype=rewards.dtype)
    for t in range(rewards.numel() - 1, -1, -1):
        bootstrap = 0.0 if bool(terminated[t]) else gamma * float(next_values[t])
        delta = rewards[t] + bootstrap - values[t]
        carry = 0.0 if bool(ended[t]) else gamma * lam
        running = delta + carry * running
        advantages[t] = running
    return advantages, advantages + values


def response_token_masks(
    tokenizer: Any, response_ids: Sequence[int], text: str, legal_actions: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(thought_mask, action_mask) over the response tokens.

    Tokens that start before the ``"action"`` key are thought; the key, its value, the closing
    punctuation and the end-of-turn token are the action. With no key at all, every token is
    thought (the env then plays a random action, which the text did not choose).
    """
    n = len(response_ids)
    parsed = parse_gtr_response(text, legal_actions)
    if parsed.action_span is None:
        boundary = len(text)
    else:  # the thought ends where its span ends; with no thought, the answer is all action
        boundary = parsed.thought_span[1] if parsed.thought_span is not None else 0
    starts = []
    for k in range(n):  # char offset where token k starts in the decoded text
        starts.append(len(tokenizer.decode(list(response_ids[:k]), skip_special_tokens=True)))
    thought = torch.tensor([s < boundary for s in starts], dtype=torch.bool)
    return thought, ~thought


def build_sft_example(
    tokenizer: Any,
    example: DaggerExample,
    target: str = "thought",
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


def sft_loss(
    policy: Any,
    examples: Sequence[DaggerExample],
    target: str = "thought",
    temperature: float = 1.0,
) -> tuple[torch.Tensor, int]:
    """Token-mean cross-entropy of the labelled tokens, teacher-forced after each prompt."""
    responses, masks = [], []
    for example in examples:
        ids, labels = build_sft_example(policy.tokenizer, example, target)
        responses.append(ids)
        masks.append(torch.tensor([lab != -100 for lab in labels]))
    logprobs = policy.score(
        [list(e.prompt_ids) for e in examples],
        responses,
        [e.frame for e in examples],
        temperature,
        len(examples),
    )
    padded, _ = pad_ragged(logprobs)
    mask, _ = pad_ragged(masks, False)
    mask = mask.to(padded.device)
    count = int(mask.sum())
    loss = -torch.where(mask, padded, 0.0).sum() / max(1, count)
    return loss, count


def _chunks(index: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    for start in range(0, index.numel(), size):
        yield index[start : start + size]


def gtr_system_prompt(env_name: str) -> str:
    """The agent's system prompt: ALFWorld's for an ``alfworld*`` env, else the card game's."""
    if env_name.startswith("alfworld"):
        from odyssey_core.gtr.alfworld_corrector import ALFWORLD_SYSTEM_PROMPT

        return ALFWORLD_SYSTEM_PROMPT
    return cards_system_prompt(env_name)


def _make_env(
    name: str, kwargs: dict[str, Any], corrector: Corrector, rewards: GTRRewardConfig
) -> GTRWrapper:
    from odyssey_core.envs import make_env

    return GTRWrapper(make_env(name, **kwargs), corrector, rewards)


# -- the trainer ----------------------------------------------------------------------------------


class GTRTrainer:
    """Owns the policy, critic, DAgger buffer, optimiser and envs of one GTR run."""

    def __init__(
        self,
        settings: GTRSettings,
        policy: Any,
        out_dir: str | Path,
        corrector: Corrector | None = None,
    ) -> None:
        from odyssey_core.envs.vector import SyncVectorEnv

        s = self.settings = settings
        self.policy = policy
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.corrector = corrector or make_corrector(s.rollout.corrector)
        r = s.rollout
        factory = functools.partial(_make_env, r.env, r.env_kwargs, self.corrector, r.rewards)
        self.vector_env = SyncVectorEnv([factory] * r.n_envs)
        self.critic: CriticTrainer | None = None
        self.value_head: VLMValueHead | None = None
        if s.value.source == "cnn":
            self.critic = CriticTrainer(s.critic, seed=s.seed)
        else:
            with torch.random.fork_rng(devices=[]):  # seeded init, global RNG untouched
                torch.manual_seed(s.seed)
                hidden = policy.model.config.get_text_config().hidden_size
                self.value_head = VLMValueHead(hidden, s.value.head_hidden_dims, s.value.scale)
            self.value_head.to(policy.device)
        self.buffer = DaggerBuffer(aggregate=s.sft.dagger)
        self.params = [p for p in policy.model.parameters() if p.requires_grad]
        groups: list[dict[str, Any]] = [{"params": self.params}]
        if self.value_head is not None:  # one optimiser: the value loss shares the backward
            head_params = list(self.value_head.parameters())
            groups.append({"params": head_params, "lr": s.value.head_lr or s.ppo.lr})
            self.params = self.params + head_params  # clipped together, like one model
        self.optimizer = torch.optim.AdamW(groups, lr=s.ppo.lr, weight_decay=s.ppo.weight_decay)
        # Table 2: cosine from 1e-5 to 1e-9 over 25 updates, then held at the floor.
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, T_max=s.ppo.lr_steps, eta_min=s.ppo.final_lr
        )
        self.generator = torch.Generator().manual_seed(s.seed)
        self.rng = np.random.default_rng(s.seed)
        self.step = 0
        self._episode_seed = s.seed * 1_000_003
        self._obs: list[Observation] | None = None
        self._info: list[dict[str, Any]] = []
        self._episode_returns: list[float] = []
        self._running_return = [0.0] * r.n_envs

    @classmethod
    def from_settings(
        cls, settings: GTRSettings, out_dir: str | Path, *, resume: bool = False
    ) -> GTRTrainer:
        """Load (or build, for ``model.path: null``) the base model, add LoRA if configured;
        with ``resume``, continue from the latest complete checkpoint under ``out_dir``."""
        from odyssey_core.models.loading import load_model, load_processor
        from odyssey_core.models.lora import apply_lora, load_adapter
        from odyssey_core.policy.hf import HFPolicy

        out = Path(out_dir)
        m = settings.model
        base = m.path
        if base is None:
            from odyssey_core.models.tiny import build_tiny_model

            base = out / "base-model"
            if not (base / "config.json").is_file():
                build_tiny_model(base, seed=0)
        checkpoint = latest_checkpoint(out) if resume else None
        if checkpoint is not None and settings.lora is not None:
            weights = policy_dir(checkpoint)
            model = load_adapter(base, weights, dtype=m.dtype, device=m.device, trainable=True)
        else:
            source = policy_dir(checkpoint) if checkpoint is not None else base
            model = load_model(
                source, dtype=m.dtype, device=m.device, attn_implementation=m.attn_implementation
            )
            if settings.lora is not None:
                model = apply_lora(model, settings.lora)
        # Eval mode throughout, so old and new log-probs come from one function (PPO ratios are
        # exact); this also leaves LoRA dropout inactive.
        model.eval()
        policy = HFPolicy(
            model,
            load_processor(base),
            system_prompt=gtr_system_prompt(settings.rollout.env),
            image_scale=m.image_scale,
            image_size=m.image_size,
        )
        trainer = cls(settings, policy, out)
        if checkpoint is not None:
            trainer.load_state_dict(load_trainer_state(checkpoint))
            log.info("resumed from %s (step %d)", checkpoint, trainer.step)
        if resume:
            trainer._truncate_metrics()
        return trainer

    # -- rollout --------------------------------------------------------------------------------

    def _next_seed(self) -> int:
        self._episode_seed += 1
        return self._episode_seed

    def collect(self) -> list[list[Turn]]:
        """``turns_per_step`` turns (rounded up to whole rounds of n_envs); one list per env."""
        r = self.settings.rollout
        n = r.n_envs
        if self._obs is None:
            self._obs, self._info = self.vector_env.reset([self._next_seed() for _ in range(n)])
        per_env: list[list[Turn]] = [[] for _ in range(n)]
        rounds = -(-r.turns_per_step // n)
        for round_index in range(rounds):
            params = r.generation.model_copy(update={"seed": int(self.rng.integers(2**31 - n))})
            generations = self.policy.generate(self._obs, params)
            texts = [g.text for g in generations]
            observations, rewards, terms, truncs, infos = self.vector_env.step(texts)
            for i, g in enumerate(generations):
                extras = infos[i].get("gtr", {})
                ended = bool(terms[i] or truncs[i]) or round_index == rounds - 1
                per_env[i].append(
                    Turn(
                        env_index=i,
                        frame=np.asarray(self._obs[i].image),
                        next_frame=np.asarray(observations[i].image),
                        prompt_ids=list(g.prompt_ids),
                        response_ids=list(g.response_ids),
                        text=g.text,
                        reward=float(rewards[i]),
                        terminated=bool(terms[i]),
                        ended=ended,
                        played=str(infos[i].get("action")),
                        correction=extras.get("correction"),
                        extra={
                            "legal_actions": list(self._info[i]["legal_actions"]),
                            "format_reward": float(extras.get("format_reward", 0.0)),
                            "truncation": extras.get("truncation"),
                            "invalid": bool(infos[i].get("invalid_action", False)),
                            # V(o_{t+1}) of a cut episode needs the observation the reset hides
                            "next_observation": observations[i] if ended else None,
                        },
                    )
                )
                self._running_return[i] += float(rewards[i])
            done = [i for i in range(n) if terms[i] or truncs[i]]
            if done:
                for i in done:
                    self._episode_returns.append(self._running_return[i])
                    self._running_return[i] = 0.0
                obs, info = self.vector_env.reset([self._next_seed() for _ in done], indices=done)
                for j, i in enumerate(done):
                    observations[i], infos[i] = obs[j], info[j]
            self._obs, self._info = list(observations), list(infos)
        return per_env

    # -- one training step ----------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        s = self.settings
        started = time.perf_counter()
        metrics: dict[str, float] = {"step": float(self.step + 1)}
        self._episode_returns = []
        per_env = self.collect()
        turns = [t for env_turns in per_env for t in env_turns]
        frames = [t.frame for t in turns]
        metrics["time/rollout_s"] = time.perf_counter() - started

        added = sum(
            self.buffer.add(t.frame, t.prompt_ids, t.correction, t.played, self.step) for t in turns
        )
        metrics["dagger/added"] = float(added)
        metrics.update(self.buffer.metrics())
        valid = [t.correction for t in turns if t.correction is not None and t.correction.valid]
        metrics["corrector/agree_frac"] = (
            float(np.mean([c.agrees for c in valid])) if valid else float("nan")
        )
        metrics["rollout/turns"] = float(len(turns))
        metrics["rollout/reward_mean"] = float(np.mean([t.reward for t in turns]))
        metrics["rollout/invalid_frac"] = float(np.mean([t.extra["invalid"] for t in turns]))
        metrics["rollout/episodes"] = float(len(self._episode_returns))
        if self._episode_returns:
            metrics["rollout/episode_return"] = float(np.mean(self._episode_returns))
        collapse = gtr_collapse_metrics(
            [t.text for t in turns], frames, [t.extra["legal_actions"] for t in turns]
        )
        for warning in collapse.warnings():
            log.warning("step %d thought collapse: %s", self.step + 1, warning)
        metrics.update({f"collapse/{k}": v for k, v in collapse.metrics.items()})

        # Values and GAE, per env stream.
        if self.critic is not None:
            values = self.critic.predict(frames + [t.next_frame for t in turns])
            v, v_next = values[: len(turns)], values[len(turns) :]
        else:
            v, v_next = self._head_values(per_env)
        advantages, returns = torch.zeros(len(turns)), torch.zeros(len(turns))
        start = 0
        for env_turns in per_env:
            stop = start + len(env_turns)
            a, ret = gae(
                torch.tensor([t.reward for t in env_turns]),
                v[start:stop],
                v_next[start:stop],
                torch.tensor([t.terminated for t in env_turns]),
                torch.tensor([t.ended for t in env_turns]),
                s.ppo.gamma,
                s.ppo.gae_lambda,
            )
            advantages[start:stop], returns[start:stop] = a, ret
            start = stop
        metrics["critic/explained_variance_pre"] = explained_variance(v, returns)
        metrics["adv/mean"] = float(advantages.mean())
        if s.ppo.normalize_advantages and len(turns) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        if self.critic is not None:
            critic_metrics = self.critic.train_step(frames, returns)
            metrics.update(critic_metrics)
            metrics["critic/weighted_loss"] = s.ppo.value_coef * critic_metrics["critic/loss"]

        t0 = time.perf_counter()
        metrics.update(self._policy_update(turns, advantages, returns))
        metrics["time/update_s"] = time.perf_counter() - t0
        metrics["actor/lr"] = float(self.optimizer.param_groups[0]["lr"])
        self.scheduler.step()
        metrics["time/step_s"] = time.perf_counter() - started
        self.step += 1
        return metrics

    def _head_values(self, per_env: list[list[Turn]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(V(o_t), V(o_{t+1})) from the VLM value head, in the order of the flat turn list.

        Within an episode o_{t+1} is the next turn's prompt, so its value is reused; only a
        cut episode (truncation, or the rollout's last turn) needs its hidden next observation
        encoded. After a termination V(o_{t+1}) is unused (GAE does not bootstrap).
        """
        assert self.value_head is not None
        turns = [t for env_turns in per_env for t in env_turns]
        prompts = [t.prompt_ids for t in turns]
        frames: list[Any] = [t.frame for t in turns]
        cut = [k for k, t in enumerate(turns) if t.ended and not t.terminated]
        for k in cut:
            observation = turns[k].extra["next_observation"]
            inputs, _ = self.policy.encode([observation])
            prompts.append(inputs["input_ids"][0][inputs["attention_mask"][0].bool()].tolist())
            frames.append(observation.image)
        values = self.value_head.predict(
            self.policy, prompts, frames, self.settings.rollout.score_micro_batch
        )
        v = values[: len(turns)]
        v_next = torch.zeros(len(turns))
        for k, t in enumerate(turns):
            if not t.ended:
                v_next[k] = v[k + 1]  # the same env's next turn: turns are contiguous per env
        v_next[cut] = values[len(turns) :]
        return v, v_next

    def turn_logprobs(self, turns: Sequence[Turn], masks: Sequence[tuple[Any, Any]]) -> Any:
        """Combined per-turn log pi(a_t) (with gradients when enabled), [len(turns)]."""
        s = self.settings
        scored = self.policy.score(
            [t.prompt_ids for t in turns],
            [t.response_ids for t in turns],
            [t.frame for t in turns],
            s.rollout.generation.temperature,
            s.rollout.score_micro_batch,
        )
        padded, _ = pad_ragged(scored)
        thought, _ = pad_ragged([m[0] for m in masks], False)
        action, _ = pad_ragged([m[1] for m in masks], False)
        combined = combine_thought_action_logprobs(
            padded, thought.to(padded.device), action.to(padded.device), s.ppo.thought_weight
        )
        return combined, scored

    def _policy_update(
        self, turns: list[Turn], advantages: torch.Tensor, returns: torch.Tensor
    ) -> dict[str, float]:
        s = self.settings
        tok = self.policy.tokenizer
        keep = [i for i, t in enumerate(turns) if t.response_ids]  # nothing to score otherwise
        sums: dict[str, float] = {}
        count = 0
        use_ppo = s.ppo.enabled and keep
        masks = [
            response_token_masks(tok, t.response_ids, t.text, t.extra["legal_actions"])
            for t in turns
        ]
        old = torch.zeros(len(turns))
        if use_ppo:
            with torch.no_grad():  # the weights before this step's updates
                kept_turns = [turns[i] for i in keep]
                combined, _ = self.turn_logprobs(kept_turns, [masks[i] for i in keep])
                old[keep] = combined.detach().float().cpu()
        order_source = torch.tensor(keep, dtype=torch.long)
        for _ in range(s.ppo.epochs):
            order = order_source[torch.randperm(len(keep), generator=self.generator)]
            for minibatch in _chunks(order, s.ppo.minibatch_size):
                rows = minibatch.tolist()
                loss = torch.zeros(())
                parts: dict[str, float] = {}
                if use_ppo:
                    head = self.value_head
                    capture = (
                        capture_final_hidden(self.policy.model)
                        if head is not None
                        else contextlib.nullcontext([])
                    )
                    with capture as hidden:  # the value head reads the scoring forward's states
                        new, scored = self.turn_logprobs(
                            [turns[i] for i in rows], [masks[i] for i in rows]
                        )
                    ones = torch.ones(len(rows), 1, dtype=torch.bool, device=new.device)
                    ppo, ppo_metrics = ppo_clip_loss(
                        new[:, None],
                        old[rows][:, None].to(new.device),
                        advantages[rows][:, None].to(new.device),
                        ones,
                        eps_low=s.ppo.clip,
                        eps_high=s.ppo.clip,
                    )
                    # Entropy estimate from the sampled tokens: -mean log pi(token).
                    tokens = torch.cat(scored)
                    entropy = -tokens.mean()
                    loss = ppo - s.ppo.entropy_coef * entropy
                    parts.update(ppo_metrics)
                    parts["actor/entropy_estimate"] = entropy.item()
                    if head is not None:
                        lengths = [len(turns[i].response_ids) for i in rows]
                        predicted = head.from_captured(hidden, lengths)
                        value_loss = head.loss(predicted, returns[rows])
                        loss = loss + s.ppo.value_coef * value_loss.to(loss.device)
                        parts["value_head/loss"] = value_loss.item()
                        parts["value_head/weighted_loss"] = s.ppo.value_coef * value_loss.item()
                        parts["value_head/value_mean"] = (
                            predicted.detach().mean().item() * head.scale
                        )
                if s.sft.coef > 0 and len(self.buffer):
                    examples = self.buffer.sample(s.sft.batch_size, self.rng)
                    sft, n_tokens = sft_loss(self.policy, examples, s.sft.target)
                    loss = loss.to(sft.device) + s.sft.coef * sft
                    parts["sft/loss"] = sft.item()
                    parts["sft/tokens"] = float(n_tokens)
                if not loss.requires_grad:
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                parts["actor/grad_norm"] = float(
                    torch.nn.utils.clip_grad_norm_(self.params, s.ppo.grad_clip)
                )
                self.optimizer.step()
                parts["actor/total_loss"] = loss.item()
                for key, value in parts.items():
                    sums[key] = sums.get(key, 0.0) + value
                count += 1
        out = {k: v / count for k, v in sums.items()} if count else {}
        out["actor/updates"] = float(count)
        return out

    # -- loop and checkpoints -------------------------------------------------------------------

    def train(
        self,
        steps: int | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
    ) -> list[dict[str, float]]:
        """Train up to ``steps`` (default: ``settings.steps``) updates in total; ``on_step``
        sees each step's metrics (e.g. to log them to MLflow)."""
        total = self.settings.steps if steps is None else steps
        history = []
        while self.step < total:
            metrics = self.train_step()
            with open(self.out_dir / METRICS_FILE, "a") as f:
                f.write(json.dumps(metrics, sort_keys=True) + "\n")
            history.append(metrics)
            if on_step is not None:
                on_step(self.step, metrics)
            if self.step % self.settings.checkpoint_every == 0 or self.step == total:
                self.save()
        return history

    def _truncate_metrics(self) -> None:
        """Drop metric lines of steps after the resumed checkpoint (a killed run may have logged
        steps it never saved; they are trained and logged again)."""
        path = self.out_dir / METRICS_FILE
        if not path.is_file():
            return
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        kept = [ln for ln in lines if json.loads(ln).get("step", 0) <= self.step]
        path.write_text("".join(ln + "\n" for ln in kept))

    def state_dict(self) -> dict[str, Any]:
        state = {
            "step": self.step,
            "value_source": self.settings.value.source,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "generator": self.generator.get_state(),
            "numpy_rng": self.rng.bit_generator.state,
            "episode_seed": self._episode_seed,
            "dagger": self.buffer.state_dict(),
        }
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
        if self.value_head is not None:
            state["value_head"] = self.value_head.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the trainer's state (the env positions restart with fresh episodes)."""
        saved = state.get("value_source", "cnn")  # checkpoints from before the head: cnn
        if saved != self.settings.value.source:
            raise ValueError(
                f"checkpoint was trained with value.source {saved!r}, settings say "
                f"{self.settings.value.source!r}"
            )
        self.step = int(state["step"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        if self.value_head is not None:
            self.value_head.load_state_dict(state["value_head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        if "numpy_rng" in state:
            self.rng.bit_generator.state = state["numpy_rng"]
            self._episode_seed = int(state["episode_seed"])
        self.buffer.load_state_dict(state["dagger"])

    def save(self) -> Path:
        return save_checkpoint(
            self.out_dir,
            self.step,
            model=self.policy.model,
            processor=self.policy.processor,
            trainer_state=self.state_dict(),
            config=self.settings.model_dump(mode="json"),
        )

    def close(self) -> None:
        self.vector_env.close()
