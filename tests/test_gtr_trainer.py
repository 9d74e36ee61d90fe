"""GTR training: DAgger buffer, SFT masking, lambda-weighted log-probs, GAE, presets, one step."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import model_fixtures
import numpy as np
import pytest
import torch

from odyssey_core.gtr.corrector import Correction
from odyssey_core.gtr.dagger import DaggerBuffer, DaggerExample
from odyssey_core.gtr.prompts import CARDS_SYSTEM_PROMPTS, cards_system_prompt
from odyssey_core.gtr.settings import load_gtr_settings
from odyssey_core.gtr.trainer import (
    GTRTrainer,
    Turn,
    build_sft_example,
    gae,
    response_token_masks,
    sft_loss,
)
from odyssey_core.protocol.gtr_format import parse_gtr_response
from odyssey_core.rl.checkpoint import load_trainer_state

torch.set_num_threads(1)  # see model_fixtures: tiny models on a busy machine
tiny_model_dir = model_fixtures.tiny_model_dir
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "gtr"
FRAME = np.zeros((32, 48, 3), dtype=np.uint8)


def _correction(thought: str = '"target": 3, "thoughts": "go up"', valid: bool = True):
    return Correction("eval", thought, True, False, "programmatic", action="+", valid=valid)


def _trainer(tiny_model_dir: Path, tmp_path: Path, **overrides) -> GTRTrainer:
    from odyssey_core.models.loading import load_model, load_processor
    from odyssey_core.policy.hf import HFPolicy

    settings = load_gtr_settings(CONFIGS / "tiny.yaml", overrides)
    model = load_model(tiny_model_dir).eval()
    policy = HFPolicy(
        model,
        load_processor(tiny_model_dir),
        system_prompt=cards_system_prompt(settings.rollout.env),
        image_size=settings.model.image_size,
    )
    return GTRTrainer(settings, policy, tmp_path)


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


def test_sft_loss_ignores_the_action_tokens(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    policy = trainer.policy
    prompt = trainer.vector_env.reset([0, 1])[0][0]
    inputs, _ = policy.encode([prompt])
    prompt_ids = tuple(inputs["input_ids"][0].tolist())

    def with_action(action: str) -> DaggerExample:
        buffer = DaggerBuffer()
        buffer.add(prompt.image, prompt_ids, _correction("up"), action, batch=0)
        return replace(buffer.examples[0], corrector_action=None)

    plus, minus = with_action("+"), with_action("-")
    with torch.no_grad():
        thought_plus, n = sft_loss(policy, [plus], "thought")
        thought_minus, _ = sft_loss(policy, [minus], "thought")
        full_plus, n_full = sft_loss(policy, [plus], "full_response")
        full_minus, _ = sft_loss(policy, [minus], "full_response")
    assert n == len(policy.tokenizer.encode("up")) and n_full > n
    assert torch.allclose(thought_plus, thought_minus)  # action tokens carry no loss
    assert not torch.allclose(full_plus, full_minus)
    trainer.close()


# -- lambda-weighted log-probs, token masks, GAE -----------------------------------------------


def test_combined_logprob_weights_thought_tokens_by_lambda(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    policy, tok = trainer.policy, trainer.policy.tokenizer
    obs = trainer.vector_env.reset([0, 1])[0][0]
    inputs, _ = policy.encode([obs])
    text = '"target": 2, "thoughts": "up",\n"action": "+"'
    ids = [*tok.encode(text, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
    thought, action = response_token_masks(tok, ids, text, ["+", "-"])
    assert (
        tok.decode([i for i, m in zip(ids, thought, strict=True) if m])
        .strip()
        .startswith('"target": 2, "thoughts": "up"')
    )
    assert '"action": "+"' in tok.decode([i for i, m in zip(ids, action, strict=True) if m])
    assert not (thought & action).any() and (thought | action).all()
    turn = Turn(0, obs.image, obs.image, inputs["input_ids"][0].tolist(), ids, text, 0.0,
                False, False, "+", None)  # fmt: skip
    with torch.no_grad():
        token_logprobs = policy.score([turn.prompt_ids], [ids], [obs.image], 1.0)[0]
        results = {}
        for lam in (0.0, 0.5, 1.0):
            ppo = trainer.settings.ppo.model_copy(update={"thought_weight": lam})
            trainer.settings = trainer.settings.model_copy(update={"ppo": ppo})
            results[lam] = float(trainer.turn_logprobs([turn], [(thought, action)])[0][0])
    t_sum, a_sum = float(token_logprobs[thought].sum()), float(token_logprobs[action].sum())
    for lam, value in results.items():
        assert value == pytest.approx(lam * t_sum + a_sum, rel=1e-5, abs=1e-4)
    trainer.close()


def test_response_without_action_key_counts_as_thought(tiny_policy_tokenizer) -> None:
    tok = tiny_policy_tokenizer
    ids = tok.encode("no key here", add_special_tokens=False)
    thought, action = response_token_masks(tok, ids, "no key here", ["+", "-"])
    assert thought.all() and not action.any()


def test_gae_matches_a_hand_computation() -> None:
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.5])
    values = torch.tensor([0.5, 0.2, 0.1, 0.3])
    next_values = torch.tensor([0.2, 0.1, 9.0, 0.7])
    terminated = torch.tensor([False, False, True, False])
    ended = torch.tensor([False, False, True, True])  # episode end, then a cut rollout
    g, lam = 0.9, 0.95
    adv, ret = gae(rewards, values, next_values, terminated, ended, g, lam)
    d3 = 0.5 + g * 0.7 - 0.3  # truncated: bootstraps from V(o_{t+1})
    d2 = 2.0 - 0.1  # terminated: no bootstrap, and no carry from the next episode
    d1 = 0.0 + g * 0.1 - 0.2
    d0 = 1.0 + g * 0.2 - 0.5
    expected = [d0 + g * lam * (d1 + g * lam * d2), d1 + g * lam * d2, d2, d3]
    assert adv.tolist() == pytest.approx(expected, rel=1e-5)
    assert torch.allclose(ret, adv + values)


# -- presets ------------------------------------------------------------------------------------


def test_presets_carry_table_2_values() -> None:
    s = load_gtr_settings(CONFIGS / "points24.yaml")
    assert (s.ppo.clip, s.ppo.gamma, s.ppo.gae_lambda, s.ppo.epochs) == (0.1, 0.9, 0.95, 4)
    assert (s.ppo.entropy_coef, s.ppo.value_coef, s.ppo.thought_weight) == (0.01, 0.5, 0.5)
    assert (s.ppo.lr, s.ppo.final_lr, s.ppo.lr_steps) == (1e-5, 1e-9, 25)
    assert s.lora is not None and (s.lora.r, s.lora.alpha, s.lora.dropout) == (128, 256, 0.05)
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
    assert ablations["rl_only"].sft.coef == 0 and ablations["rl_only"].ppo.enabled
    assert not ablations["sft_only"].ppo.enabled and ablations["sft_only"].sft.coef > 0
    assert ablations["gtr"] == s
    assert not ablations["gtr_no_dagger"].sft.dagger
    assert ablations["full_response_cloning"].sft.target == "full_response"
    for preset in ablations.values():  # the overlays change nothing else
        assert preset.ppo.clip == 0.1 and preset.ppo.thought_weight == 0.5
    tiny = load_gtr_settings(CONFIGS / "tiny.yaml")
    assert tiny.lora is None and tiny.ppo.clip == 0.1 and tiny.rollout.env == "cards-numberline"
    assert set(CARDS_SYSTEM_PROMPTS) == {"numberline", "ezpoints", "points24", "blackjack"}
    assert '"action"' in cards_system_prompt("cards-points24")


# -- the trainer end to end ---------------------------------------------------------------------


def test_one_gtr_step_updates_weights_and_buffer(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    model = trainer.policy.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = trainer.train_step()
    assert trainer.step == 1 and metrics["rollout/turns"] == 4
    assert metrics["actor/updates"] >= 1 and np.isfinite(metrics["actor/total_loss"])
    assert np.isfinite(metrics["sft/loss"]) and "actor/pg_loss" in metrics
    assert metrics["actor/lr"] == pytest.approx(1e-4)
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    # Every turn was corrected; the programmatic corrector is always valid, so all are cloned.
    assert len(trainer.buffer) == 4 and metrics["dagger/added"] == 4
    path = trainer.save()
    state = load_trainer_state(path)  # weights_only=True: the buffer is plain containers
    assert state["step"] == 1 and len(state["dagger"]["examples"]) == 4
    restored = DaggerBuffer()
    restored.load_state_dict(state["dagger"])
    assert restored.examples == trainer.buffer.examples
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
    )
    trainer.train_step()
    assert len(trainer.buffer) == 4
    trainer.train_step()
    assert len(trainer.buffer) == 8 and trainer.buffer.latest_batch == 1
    batches = {e.batch for e in trainer.buffer.sample(64, np.random.default_rng(0))}
    assert batches == ({0, 1} if dagger else {1})
    trainer.close()


# -- the value head on the VLM --------------------------------------------------------------------

HEAD = {"source": "vlm_head", "head_hidden_dims": [32], "head_lr": 1e-3}


def test_value_settings_default_to_the_cnn_and_validate() -> None:
    from odyssey_core.gtr.settings import GTRValueSettings

    assert load_gtr_settings(CONFIGS / "points24.yaml").value.source == "cnn"
    head = load_gtr_settings(CONFIGS / "tiny.yaml", {"value": HEAD}).value
    assert head.source == "vlm_head" and head.head_hidden_dims == [32]
    for bad in ({"source": "mlp"}, {"scale": 0.0}, {"head_hidden_dims": [0]}, {"head_lr": 0}):
        with pytest.raises(ValueError):
            GTRValueSettings.model_validate(bad)
    with pytest.raises(ValueError, match=r"vlm_head needs ppo\.enabled"):
        load_gtr_settings(CONFIGS / "tiny.yaml", {"value": HEAD, "ppo": {"enabled": False}})
    with pytest.raises(ValueError, match="value"):
        load_gtr_settings(CONFIGS / "tiny.yaml", {"value": {"typo": 1}})


def _turns_and_masks(trainer: GTRTrainer):
    turns = [t for env_turns in trainer.collect() for t in env_turns]
    tok = trainer.policy.tokenizer
    masks = [
        response_token_masks(tok, t.response_ids, t.text, t.extra["legal_actions"]) for t in turns
    ]
    return turns, masks


def test_value_head_reads_the_last_prompt_token_in_the_scoring_pass(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from odyssey_core.gtr.value_head import capture_final_hidden

    trainer = _trainer(tiny_model_dir, tmp_path, value=HEAD)
    assert trainer.critic is None and trainer.value_head is not None
    turns, masks = _turns_and_masks(trainer)
    assert any(t.response_ids for t in turns)
    # micro-batches of 3 make the padding differ between the two passes
    trainer.settings = trainer.settings.model_copy(
        update={"rollout": trainer.settings.rollout.model_copy(update={"score_micro_batch": 3})}
    )
    with torch.no_grad(), capture_final_hidden(trainer.policy.model) as hidden:
        trainer.turn_logprobs(turns, masks)
        fused = trainer.value_head.from_captured(hidden, [len(t.response_ids) for t in turns])
    alone = trainer.value_head.predict(
        trainer.policy, [t.prompt_ids for t in turns], [t.frame for t in turns], 2
    )
    # causal attention: the prompt's last state ignores the response (and the padding)
    assert torch.allclose(fused * trainer.value_head.scale, alone, atol=1e-5)
    assert alone.std() > 0  # different frames/prompts, different values
    trainer.close()


def test_value_head_loss_decreases_on_a_fixed_batch(tiny_model_dir: Path, tmp_path: Path) -> None:
    from odyssey_core.gtr.value_head import capture_final_hidden

    # A random tiny VLM's last-prompt states barely differ between frames, so the head mostly
    # fits the batch's mean here; targets far from 0 make that fit measurable.
    trainer = _trainer(tiny_model_dir, tmp_path, value={**HEAD, "head_lr": 1e-2})
    turns, masks = _turns_and_masks(trainer)
    returns = torch.tensor([3.0, 2.0, 2.5, 2.0])[: len(turns)]
    lengths = [len(t.response_ids) for t in turns]
    losses = []
    for _ in range(20):  # through the shared model and the trainer's one optimiser
        with capture_final_hidden(trainer.policy.model) as hidden:
            trainer.turn_logprobs(turns, masks)
        loss = trainer.value_head.loss(trainer.value_head.from_captured(hidden, lengths), returns)
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trainer.optimizer.step()
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
        head_before = [p.detach().clone() for p in trainer.value_head.parameters()]
        metrics = trainer.train_step()
        head_moved = any(
            not torch.equal(a, b)
            for a, b in zip(head_before, trainer.value_head.parameters(), strict=True)
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
    trainer = GTRTrainer.from_settings(settings, tmp_path, resume=True)  # nothing to resume yet
    history = trainer.train(steps=1)
    assert trainer.step == 1 and np.isfinite(history[0]["value_head/loss"])
    assert "collapse/valid_rate" in history[0]
    saved_head = {k: v.clone() for k, v in trainer.value_head.state_dict().items()}
    saved_model = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    trainer.close()
    state = load_trainer_state(tmp_path / "checkpoints" / "step-000001")
    assert state["value_source"] == "vlm_head" and "critic" not in state

    resumed = GTRTrainer.from_settings(settings, tmp_path, resume=True)
    assert resumed.step == 1 and len(resumed.buffer) == 4
    for key, value in resumed.value_head.state_dict().items():
        assert torch.equal(value, saved_head[key]), key
    for name, p in resumed.policy.model.named_parameters():
        assert torch.equal(p, saved_model[name]), name
    assert resumed.optimizer.state_dict()["state"], "the optimiser moments came back"
    resumed.train()
    assert resumed.step == 2
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").open()]
    assert steps == [1.0, 2.0]
    resumed.close()
    cnn = load_gtr_settings(CONFIGS / "tiny.yaml", {"model": {"path": str(tiny_model_dir)}})
    with pytest.raises(ValueError, match=r"value\.source"):
        GTRTrainer.from_settings(cnn, tmp_path, resume=True)
