"""GTR training: DAgger buffer, SFT masking, lambda-weighted log-probs, GAE, presets, one step."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import model_fixtures
import numpy as np
import pytest
import torch
from helpers_presets import gtr_preset

from odyssey_core.protocol.formats import RESPONSE_FORMATS
from odyssey_core.protocol.gtr_format import parse_gtr_response
from odyssey_core.recipes.gtr.corrector import Correction
from odyssey_core.recipes.gtr.dagger import DaggerBuffer, DaggerExample
from odyssey_core.recipes.gtr.prompts import CARDS_SYSTEM_PROMPTS, cards_system_prompt
from odyssey_core.recipes.gtr.settings import load_gtr_settings
from odyssey_core.recipes.gtr.train import build_sft_example, build_trainer, sft_loss_pieces
from odyssey_core.rl.advantages import ESTIMATORS, compute_advantages
from odyssey_core.rl.checkpoint import checkpoint_name, load_trainer_state
from odyssey_core.rl.losses import combine_thought_action_logprobs, pad_ragged
from odyssey_core.rl.trainer import Trainer, TrainerHook
from odyssey_core.rollout.batch import TurnBatch

torch.set_num_threads(1)  # see model_fixtures: tiny models on a busy machine
tiny_model_dir = model_fixtures.tiny_model_dir
REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "configs" / "gtr"
FRAME = np.zeros((32, 48, 3), dtype=np.uint8)
GTR_FORMAT = RESPONSE_FORMATS.get("gtr")


def _correction(thought: str = '"target": 3, "thoughts": "go up"', valid: bool = True):
    return Correction("eval", thought, True, False, "programmatic", action="+", valid=valid)


def _trainer(tiny_model_dir: Path, tmp_path: Path, **overrides) -> Trainer:
    overrides = {"model": {"path": str(tiny_model_dir)}, **overrides}
    settings = load_gtr_settings(CONFIGS / "tiny.yaml", overrides)
    return build_trainer(settings, tmp_path)


def _buffer(trainer: Trainer) -> DaggerBuffer:
    return trainer.hook("thought_cloning").buffer


def _sft_loss(policy, examples, target: str) -> tuple[torch.Tensor, float]:
    """The whole thought-cloning loss (the sum of its pieces) and the labelled tokens."""
    total, tokens = torch.zeros(()), 0.0
    for piece in sft_loss_pieces(policy, examples, target=target, micro_batch=1):
        loss, metrics = piece()
        total = total + loss
        tokens += metrics["sft/tokens_per_example"]
    return total, tokens


# -- DAgger buffer ----------------------------------------------------------------------------


def test_dagger_buffer_aggregates_or_keeps_latest_batch() -> None:
    rng = np.random.default_rng(0)
    dagger, latest = DaggerBuffer(aggregate=True), DaggerBuffer(aggregate=False)
    for buffer in (dagger, latest):
        assert buffer.add(FRAME, [1, 2], _correction(), "+", batch=0)
        assert not buffer.add(FRAME, [1, 2], _correction(valid=False), "+", batch=0)
        assert not buffer.add(FRAME, [1, 2], None, "+", batch=0)
        assert buffer.add(FRAME, [3], _correction("second"), "-", batch=1)
        assert buffer.add(FRAME, [4], _correction("third"), "-", batch=1)
        assert len(buffer) == 3 and buffer.rejected == 2
    assert {e.batch for e in dagger.sample(50, rng)} == {0, 1}
    assert {e.batch for e in latest.sample(50, rng)} == {1}
    assert latest.pool() == [1, 2]
    example = dagger.sample(1, rng)[0]
    assert np.array_equal(example.frame, FRAME)  # PNG round trip is lossless
    restored = DaggerBuffer()
    restored.load_state_dict(latest.state_dict())
    assert restored.examples == latest.examples and not restored.aggregate
    with pytest.raises(ValueError, match="batch order"):
        dagger.add(FRAME, [1], _correction(), "+", batch=0)


# -- SFT targets --------------------------------------------------------------------------------


def _example(action: str = "+", thought: str = '"target": 3, "current": 1, "thoughts": "up"'):
    return DaggerExample(b"", (1,), thought, action, "-", 0)


def test_sft_labels_cover_exactly_the_corrected_thought(tiny_policy_tokenizer) -> None:
    tok = tiny_policy_tokenizer
    example = _example()
    ids, labels = build_sft_example(tok, example, "thought")
    kept = [i for i, lab in zip(ids, labels, strict=True) if lab != -100]
    masked = [i for i, lab in zip(ids, labels, strict=True) if lab == -100]
    assert kept == [lab for lab in labels if lab != -100]  # labels are the token ids themselves
    assert tok.decode(kept) == example.thought
    assert tok.decode(masked) == ',\n"action": "+"<|im_end|>'  # the agent's action, not cloned
    assert ids[: len(kept)] == kept  # the thought comes first, the action after it
    text = tok.decode(ids, skip_special_tokens=True)
    parsed = parse_gtr_response(text, ["+", "-"])
    assert parsed.thought == example.thought and parsed.action == "+"
    # Full-response cloning: the corrector's action, and every token is a target.
    ids, labels = build_sft_example(tok, example, "full_response")
    assert labels == ids and tok.decode(ids).endswith('"action": "-"<|im_end|>')


@pytest.fixture(scope="module")
def tiny_policy_tokenizer(tiny_model_dir: Path):
    from odyssey_core.models.loading import load_processor

    return load_processor(tiny_model_dir).tokenizer


def test_sft_loss_is_eq_4s_sum_and_ignores_the_action_tokens(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    policy = trainer.policy
    prompt = trainer.collector.vector_env.reset([0, 1])[0][0]
    inputs, _ = policy.encode([prompt])
    prompt_ids = tuple(inputs["input_ids"][0].tolist())

    def with_action(action: str) -> DaggerExample:
        buffer = DaggerBuffer()
        buffer.add(prompt.image, prompt_ids, _correction("up"), action, batch=0)
        return replace(buffer.examples[0], corrector_action=None)

    plus, minus = with_action("+"), with_action("-")
    with torch.no_grad():
        thought_plus, n = _sft_loss(policy, [plus], "thought")
        thought_minus, _ = _sft_loss(policy, [minus], "thought")
        full_plus, n_full = _sft_loss(policy, [plus], "full_response")
        full_minus, _ = _sft_loss(policy, [minus], "full_response")
        # eq. 4: -sum over the thought tokens of log P(th_t | s, th_<t), not a token mean
        ids, labels = build_sft_example(policy.tokenizer, plus, "thought")
        logprobs = policy.score([list(prompt_ids)], [ids], [prompt.image], 1.0)[0]
        by_hand = -sum(float(lp) for lp, lab in zip(logprobs, labels, strict=True) if lab != -100)
        # two examples: the mean of their sums, whatever the micro-batch
        pair = sum(piece()[0] for piece in sft_loss_pieces(policy, [plus, minus], micro_batch=2))
    assert n == len(policy.tokenizer.encode("up")) and n_full > n
    assert float(thought_plus) == pytest.approx(by_hand, rel=1e-5)
    assert float(pair) == pytest.approx(float(thought_plus + thought_minus) / 2, rel=1e-5)
    assert torch.allclose(thought_plus, thought_minus)  # action tokens carry no loss
    assert not torch.allclose(full_plus, full_minus)
    trainer.close()


# -- lambda-weighted log-probs, token masks, GAE -----------------------------------------------


def test_combined_logprob_weights_thought_tokens_by_lambda(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    policy, tok = trainer.policy, trainer.policy.tokenizer
    obs = trainer.collector.vector_env.reset([0, 1])[0][0]
    inputs, _ = policy.encode([obs])
    text = '"target": 2, "thoughts": "up",\n"action": "+"'
    ids = [*tok.encode(text, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
    thought, action = (torch.tensor(m) for m in GTR_FORMAT.token_masks(text, ids, tok, {}))
    assert (
        tok.decode([i for i, m in zip(ids, thought, strict=True) if m])
        .strip()
        .startswith('"target": 2, "thoughts": "up"')
    )
    assert '"action": "+"' in tok.decode([i for i, m in zip(ids, action, strict=True) if m])
    assert not (thought & action).any() and (thought | action).all()
    with torch.no_grad():
        token_logprobs = policy.score([inputs["input_ids"][0].tolist()], [ids], [obs.image], 1.0)
        padded, _ = pad_ragged(token_logprobs)
        results = {
            lam: float(combine_thought_action_logprobs(padded, thought[None], action[None], lam))
            for lam in (0.0, 0.5, 1.0)
        }
    t_sum = float(token_logprobs[0][thought].sum())
    a_sum = float(token_logprobs[0][action].sum())
    for lam, value in results.items():
        assert value == pytest.approx(lam * t_sum + a_sum, rel=1e-5, abs=1e-4)
    trainer.close()


def test_response_without_action_key_counts_as_thought(tiny_policy_tokenizer) -> None:
    tok = tiny_policy_tokenizer
    ids = tok.encode("no key here", add_special_tokens=False)
    thought, action = GTR_FORMAT.token_masks("no key here", ids, tok, {"legal_actions": ["+"]})
    assert all(thought) and not any(action)


# -- presets ------------------------------------------------------------------------------------


def test_presets_carry_table_2_values() -> None:
    s = load_gtr_settings(CONFIGS / "points24.yaml")
    assert (s.ppo.clip_low, s.ppo.clip_high, s.ppo.epochs) == (0.1, 0.1, 4)
    a = s.advantage
    assert (a.estimator, a.gamma, a.gae_lambda, a.normalize) == ("gae", 0.9, 0.95, True)
    assert (s.ppo.entropy_coef, s.ppo.value_coef, s.ppo.thought_weight) == (0.01, 0.5, 0.5)
    assert (s.ppo.lr, s.ppo.final_lr, s.ppo.lr_steps) == (1e-5, 1e-9, 25)
    assert s.lora is not None and (s.lora.r, s.lora.alpha, s.lora.dropout) == (128, 256, 0.05)
    assert s.lora.include_vision and s.lora.include_projector  # App. B: the whole VLM
    assert (s.value.source, s.ppo.value_coef) == ("vlm_head", 0.5)  # RL4VLM's value head
    g = s.rollout.generation
    assert (g.temperature, g.max_new_tokens, g.repetition_penalty) == (0.2, 256, 1.2)
    assert s.rollout.env == "cards-points24" and s.sft.dagger and s.sft.target == "thought"
    ablations = {p.stem: load_gtr_settings(p) for p in (CONFIGS / "ablations").glob("*.yaml")}
    assert set(ablations) == {
        "rl_only",
        "sft_only",
        "gtr",
        "gtr_no_dagger",
        "full_response_cloning",
    }
    rl4vlm = ablations["rl_only"]  # the RL4VLM baseline: environment rewards only
    assert rl4vlm.sft.coef == 0 and rl4vlm.ppo.enabled and rl4vlm.rollout.corrector == "none"
    rewards = rl4vlm.rollout.rewards
    assert (rewards.format_reward, rewards.malformed_penalty) == (0.0, 0.0)
    assert not rewards.truncate_unsolvable and rewards.max_repeats == 0
    assert not ablations["sft_only"].ppo.enabled and ablations["sft_only"].sft.coef > 0
    assert ablations["gtr"] == s
    assert not ablations["gtr_no_dagger"].sft.dagger
    assert ablations["full_response_cloning"].sft.target == "full_response"
    for preset in ablations.values():  # the overlays change nothing else
        assert preset.ppo.clip_low == preset.ppo.clip_high == 0.1
        assert preset.ppo.thought_weight == 0.5 and preset.advantage == s.advantage
    tiny = load_gtr_settings(CONFIGS / "tiny.yaml")
    assert tiny.lora is None and tiny.ppo.clip_low == 0.1 and tiny.rollout.env == "cards-numberline"
    assert tiny.rollout.corrector == "programmatic"  # the oracle, named: CPU needs no network
    assert set(CARDS_SYSTEM_PROMPTS) == {"numberline", "ezpoints", "points24", "blackjack"}
    assert '"action"' in cards_system_prompt("cards-points24")


def test_the_rl4vlm_baseline_plays_on_environment_rewards_only() -> None:
    from odyssey_core.recipes.gtr.train import make_gtr_env

    r = load_gtr_settings(CONFIGS / "ablations" / "rl_only.yaml").rollout
    env = make_gtr_env("cards-points24", {}, None, r.rewards)  # corrector: none
    env.reset(seed=0, options={"cards": ["QS", "3H", "4D", "2C"]})
    rewards, cut = [], []
    for answer in ['"action": "10"', *['"action": "5"'] * 5, "no answer at all"]:
        _, reward, _, truncated, info = env.step(answer)
        rewards.append(reward)
        cut.append(truncated)
        assert info["gtr"]["correction"] is None and info["gtr"]["format_reward"] == 0.0
    # the env's own -1 per illegal number, no bonus, no loop cut after repeats
    assert rewards[:6] == [0.0, -1.0, -1.0, -1.0, -1.0, -1.0] and not any(cut)


# -- the trainer end to end ---------------------------------------------------------------------


def test_one_gtr_step_updates_weights_and_buffer(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    model = trainer.policy.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = trainer.train_step()
    assert trainer.step == 1 and metrics["rollout/turns"] == 4
    assert metrics["actor/updates"] >= 1 and np.isfinite(metrics["actor/loss"])
    assert np.isfinite(metrics["sft/loss"]) and "actor/pg_loss" in metrics
    assert metrics["actor/lr"] == pytest.approx(1e-4)
    assert metrics["actor/entropy"] > 0  # the exact entropy of the sampling distribution
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    # Every turn was corrected; the programmatic corrector is always valid, so all are cloned.
    assert len(_buffer(trainer)) == 4 and metrics["dagger/added"] == 4
    path = trainer.save()
    state = load_trainer_state(path)  # weights_only=True: the buffer is plain containers
    dagger = state["hooks"]["thought_cloning"]["dagger"]
    assert state["step"] == 1 and len(dagger["examples"]) == 4
    restored = DaggerBuffer()
    restored.load_state_dict(dagger)
    assert restored.examples == _buffer(trainer).examples
    trainer.close()


@pytest.mark.parametrize("dagger", [True, False])
def test_buffer_grows_across_steps_and_no_dagger_samples_latest(
    tiny_model_dir: Path, tmp_path: Path, dagger: bool
) -> None:
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        sft={"dagger": dagger},
        ppo={"enabled": False, "epochs": 1},  # SFT only keeps this test quick
        value=CNN,  # the value head trains only inside PPO
    )
    trainer.train_step()
    assert len(_buffer(trainer)) == 4
    trainer.train_step()
    assert len(_buffer(trainer)) == 8 and _buffer(trainer).latest_batch == 1
    batches = {e.batch for e in _buffer(trainer).sample(64, np.random.default_rng(0))}
    assert batches == ({0, 1} if dagger else {1})
    trainer.close()


class _StepBatch(TrainerHook):
    """Keeps the last step's batch, its advantages included (what on_step_end sees)."""

    name = "step_batch"

    def on_step_end(self, trainer: Trainer, batch: TurnBatch) -> dict[str, float]:
        self.batch = batch
        return {}


def test_the_estimator_is_the_one_the_advantage_section_names(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """GAE is GTR's default, not its only estimator: ``advantage.estimator`` picks another."""
    assert load_gtr_settings(CONFIGS / "tiny.yaml").advantage.estimator == "gae"
    trainer = _trainer(
        tiny_model_dir, tmp_path, advantage={"estimator": "ppo_critic"}, ppo={"epochs": 1}
    )
    assert trainer.estimator is ESTIMATORS.get("ppo_critic")
    recorder = _StepBatch()
    trainer.hooks.append(recorder)
    trainer.train_step()
    batch = recorder.batch
    settings = trainer.config.advantage
    assert settings.estimator == "ppo_critic" and settings.gamma == 0.9
    expected, returns = compute_advantages(batch, settings)
    assert torch.allclose(batch.advantages, expected) and torch.allclose(batch.returns, returns)
    other = settings.model_copy(update={"estimator": "grpo_process"})
    assert float(expected.abs().sum()) > 0  # R - V(o_t): the critic's values are read
    assert not torch.allclose(compute_advantages(batch, other)[0], expected)  # a real choice
    trainer.close()
    with pytest.raises(ValueError, match="unknown estimator 'gaee'"):
        load_gtr_settings(CONFIGS / "tiny.yaml", {"advantage": {"estimator": "gaee"}})


# -- the value head on the VLM --------------------------------------------------------------------

HEAD = {"source": "vlm_head", "head_hidden_dims": [32], "head_lr": 1e-3}
CNN = {"source": "cnn"}


def test_value_settings_default_to_the_vlm_head_and_validate() -> None:
    from odyssey_core.recipes.gtr.settings import GTRSettings, GTRValueSettings

    assert GTRSettings().value.source == "vlm_head" and GTRSettings().ppo.value_coef == 0.5
    assert load_gtr_settings(CONFIGS / "points24.yaml").value.source == "vlm_head"
    head = load_gtr_settings(CONFIGS / "tiny.yaml", {"value": HEAD}).value
    assert head.source == "vlm_head" and head.head_hidden_dims == [32]
    # the CNN critic stays an option (the CPU preset's, which also runs under DeepSpeed)
    assert load_gtr_settings(CONFIGS / "tiny.yaml").value.source == "cnn"
    with pytest.raises(ValueError, match="DeepSpeed updater does not carry the value head"):
        load_gtr_settings(CONFIGS / "points24.yaml", {"deepspeed": "configs/deepspeed/zero2.json"})
    for bad in ({"source": "mlp"}, {"scale": 0.0}, {"head_hidden_dims": [0]}, {"head_lr": 0}):
        with pytest.raises(ValueError):
            GTRValueSettings.model_validate(bad)
    with pytest.raises(ValueError, match=r"vlm_head needs ppo\.enabled"):
        load_gtr_settings(CONFIGS / "tiny.yaml", {"value": HEAD, "ppo": {"enabled": False}})
    with pytest.raises(ValueError, match="value"):
        load_gtr_settings(CONFIGS / "tiny.yaml", {"value": {"typo": 1}})


def _batch(trainer: Trainer):
    batch, _ = trainer.collector.collect(trainer.config.budget, seed=0)
    return batch


def _score_rows(trainer: Trainer, batch, micro: int) -> None:
    trainer.policy.score(batch.prompt_ids, batch.response_ids, batch.frames, 1.0, micro)


def test_value_head_reads_the_last_prompt_token_in_the_scoring_pass(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from odyssey_core.rl.value_head import capture_final_hidden

    trainer = _trainer(tiny_model_dir, tmp_path, value=HEAD)
    head = trainer.value_function.head
    batch = _batch(trainer)
    assert any(r.numel() for r in batch.response_ids)
    # micro-batches of 3 make the padding differ between the two passes
    with torch.no_grad(), capture_final_hidden(trainer.policy.model) as hidden:
        _score_rows(trainer, batch, 3)
        fused = head.from_captured(hidden, [r.numel() for r in batch.response_ids])
    alone = head.predict(trainer.policy, batch.prompt_ids, batch.frames, 2)
    # causal attention: the prompt's last state ignores the response (and the padding)
    assert torch.allclose(fused * head.scale, alone, atol=1e-5)
    assert alone.std() > 0  # different frames/prompts, different values
    values, bootstrap = trainer.value_function.predict(trainer.policy, batch, bootstrap=True)
    assert torch.allclose(values, alone, atol=1e-5)
    cut = batch.truncated.nonzero().flatten().tolist()
    assert cut and all(bootstrap[k] != 0 for k in cut)  # the budget's end is bootstrapped
    trainer.close()


def test_value_head_loss_decreases_on_a_fixed_batch(tiny_model_dir: Path, tmp_path: Path) -> None:
    from odyssey_core.rl.value_head import capture_final_hidden

    # A random tiny VLM's last-prompt states barely differ between frames, so the head mostly
    # fits the batch's mean here; targets far from 0 make that fit measurable.
    trainer = _trainer(tiny_model_dir, tmp_path, value={**HEAD, "head_lr": 1e-2})
    head, updater = trainer.value_function.head, trainer.updater
    batch = _batch(trainer)
    returns = torch.tensor([3.0, 2.0, 2.5, 2.0])[: len(batch)]
    lengths = [r.numel() for r in batch.response_ids]
    losses = []
    for _ in range(20):  # through the shared model and the trainer's one optimiser
        with capture_final_hidden(trainer.policy.model) as hidden:
            _score_rows(trainer, batch, 4)
        loss = head.loss(head.from_captured(hidden, lengths), returns)
        updater.zero_grad()
        updater.backward(loss, True)
        updater.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], losses
    trainer.close()


def test_value_coefficient_reaches_the_vlm_through_the_ppo_backward(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """One identical step with ppo.value_coef 0 and 0.5: the head learns only with a nonzero
    coefficient, and the VLM's weights differ, so the value loss shared the PPO backward."""
    results = {}
    for coef in (0.0, 0.5):
        trainer = _trainer(
            tiny_model_dir, tmp_path / str(coef), value=HEAD, ppo={"value_coef": coef, "epochs": 1}
        )
        head = trainer.value_function.head
        head_before = [p.detach().clone() for p in head.parameters()]
        metrics = trainer.train_step()
        head_moved = any(
            not torch.equal(a, b) for a, b in zip(head_before, head.parameters(), strict=True)
        )
        weights = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
        results[coef] = (metrics, head_moved, weights)
        trainer.close()
    (m0, moved0, w0), (m5, moved5, w5) = results[0.0], results[0.5]
    assert not moved0 and moved5
    assert np.isfinite(m5["value_head/loss"]) and "critic/loss" not in m5
    assert m5["value_head/weighted_loss"] == pytest.approx(0.5 * m5["value_head/loss"])
    assert m0["rollout/reward_mean"] == m5["rollout/reward_mean"]  # the same rollout
    assert any(not torch.equal(w0[n], w5[n]) for n in w0)


def test_gtr_run_with_the_value_head_checkpoints_and_resumes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    overrides = {"model": {"path": str(tiny_model_dir)}, "value": HEAD, "steps": 2}
    settings = load_gtr_settings(CONFIGS / "tiny.yaml", overrides)
    trainer = build_trainer(settings, tmp_path, resume=True)  # nothing to resume yet
    history = trainer.train(steps=1)
    assert trainer.step == 1 and np.isfinite(history[0]["value_head/loss"])
    assert "collapse/valid_rate" in history[0]
    saved_head = {k: v.clone() for k, v in trainer.value_function.head.state_dict().items()}
    saved_model = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    trainer.close()
    state = load_trainer_state(tmp_path / "checkpoints" / checkpoint_name(1))
    assert state["value_function"]["kind"] == "vlm_head" and "critic" not in state

    resumed = build_trainer(settings, tmp_path, resume=True)
    assert resumed.step == 1 and len(_buffer(resumed)) == 4
    for key, value in resumed.value_function.head.state_dict().items():
        assert torch.equal(value, saved_head[key]), key
    for name, p in resumed.policy.model.named_parameters():
        assert torch.equal(p, saved_model[name]), name
    assert resumed.updater.optimizer.state_dict()["state"], "the optimiser moments came back"
    resumed.train()
    assert resumed.step == 2
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").open()]
    assert steps == [1.0, 2.0]
    resumed.close()
    cnn = load_gtr_settings(
        CONFIGS / "tiny.yaml", {"model": {"path": str(tiny_model_dir)}, "value": CNN}
    )
    with pytest.raises(ValueError, match="vlm_head"):
        build_trainer(cnn, tmp_path, resume=True)


# -- resumption after a kill, and DeepSpeed --------------------------------------------------


_TRAIN_SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from odyssey_core.recipes.gtr.settings import load_gtr_settings
from odyssey_core.recipes.gtr.train import build_trainer
trainer = build_trainer(load_gtr_settings(sys.argv[1]), sys.argv[2], resume=True)
trainer.train()
"""


def _all_weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    weights = {
        f"policy.{k}": v.detach().clone() for k, v in trainer.policy.model.state_dict().items()
    }
    value = trainer.value_function
    network = value.critic.network if hasattr(value, "critic") else value.head
    weights.update({f"value.{k}": v.detach().clone() for k, v in network.state_dict().items()})
    return weights


@pytest.mark.slow
def test_killed_gtr_run_resumes_to_the_weights_of_an_uninterrupted_one(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The RL trainer's method: SIGKILL the training process while step 2 runs, resume from the
    step-1 checkpoint, and land on the uninterrupted run's policy, value head and DAgger
    buffer."""
    from helpers_resume import kill_during_step_two

    preset = gtr_preset(tmp_path, tiny_model_dir)
    settings = load_gtr_settings(preset)
    reference = build_trainer(settings, tmp_path / "reference")
    reference.train()
    reference.close()

    killed = tmp_path / "killed"
    kill_during_step_two(_TRAIN_SCRIPT, killed, preset, killed)

    resumed = build_trainer(settings, killed, resume=True)
    assert resumed.step == 1
    resumed.train()
    resumed.close()
    want, got = _all_weights(reference), _all_weights(resumed)
    assert want.keys() == got.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-6, msg=key)
    assert _buffer(resumed).examples == _buffer(reference).examples
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").open()]
    assert steps == [1.0, 2.0, 3.0]


# -- LoRA over the whole VLM (App. B) -------------------------------------------------------------


def test_lora_covers_the_projector_as_app_b_says(tiny_model_dir: Path) -> None:
    """GTR App. B: LoRA on the vision encoder, the LLM and the MLP projector between them."""
    import re

    from odyssey_core.models.loading import load_model
    from odyssey_core.models.lora import LoraSettings, apply_lora, lora_target_regex

    assert not LoraSettings().include_projector  # other recipes keep their adapters
    gtr = load_gtr_settings(CONFIGS / "points24.yaml").lora
    assert gtr is not None and gtr.include_vision and gtr.include_projector
    pattern = lora_target_regex(gtr)
    for name in (
        "model.visual.merger.linear_fc1",  # Qwen3-VL's projector
        "model.visual.deepstack_merger_list.0.linear_fc2",
        "model.visual.merger.mlp.0",  # Qwen2.5-VL's
        "model.visual.blocks.0.attn.qkv",
        "model.language_model.layers.0.self_attn.q_proj",
    ):
        assert re.fullmatch(pattern, name), name
    plain = lora_target_regex(LoraSettings(include_vision=True))
    assert not re.fullmatch(plain, "model.visual.merger.linear_fc1")
    small = gtr.model_copy(update={"r": 2, "alpha": 4, "dropout": 0.0})
    model = apply_lora(load_model(tiny_model_dir), small)
    adapted = {n.rsplit(".lora_A", 1)[0] for n, _ in model.named_parameters() if ".lora_A" in n}
    for part in ("visual.merger.linear_fc1", "visual.merger.linear_fc2", "visual.blocks.0.mlp"):
        assert any(part in n for n in adapted), part
    assert any("language_model" in n for n in adapted)
