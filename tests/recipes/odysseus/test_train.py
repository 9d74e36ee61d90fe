"""The RL trainer: presets, one step's bookkeeping, crash-safe checkpoints and exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import model_fixtures
import numpy as np
import pytest
import torch
from helpers_presets import odysseus_preset as small_preset
from helpers_resume import kill_during_step_two

from odyssey_core.models.loading import load_model
from odyssey_core.recipes.odysseus.settings import ODYSSEUS_ESTIMATORS, load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer
from odyssey_core.rl.advantages import ESTIMATORS
from odyssey_core.rl.checkpoint import (
    checkpoint_name,
    latest_checkpoint,
    load_trainer_state,
    save_checkpoint,
)
from odyssey_core.rl.trainer import Trainer

tiny_model_dir = model_fixtures.tiny_model_dir
ROOT = Path(__file__).resolve().parents[3]
PRESETS = ROOT / "configs" / "odysseus"


def run_in_process(preset: Path, out: Path, resume: bool = False) -> Trainer:
    trainer = build_trainer(load_train_settings(preset), out, resume=resume)
    trainer.train()
    trainer.close()
    return trainer


# -- presets -------------------------------------------------------------------------------------


def test_compare_preset_carries_table_4_and_table_7() -> None:
    s = load_train_settings(PRESETS / "compare.yaml")
    assert s.rollout.max_turns == 80 and s.rollout.num_trajectories == 128
    g = s.rollout.generation
    assert (g.top_p, g.temperature, g.max_new_tokens) == (1.0, 1.0, 1024)
    assert (s.ppo.epochs, s.ppo.minibatch_size, s.advantage.gamma) == (1, 1024, 0.95)
    assert (s.ppo.clip_low, s.ppo.clip_high, s.ppo.lr) == (0.2, 0.28, 5e-5)
    c = s.critic
    assert (c.hidden_dim, c.epochs, c.weight_decay, c.grad_clip, c.lr) == (512, 1, 0.0, 1.0, 3e-4)


def test_paper_preset_carries_table_9() -> None:
    s = load_train_settings(PRESETS / "paper.yaml")
    assert (s.steps, s.rollout.max_turns, s.rollout.generation.max_new_tokens) == (190, 400, 4096)
    assert (s.rollout.num_trajectories, s.ppo.minibatch_size, s.ppo.lr) == (1024, 4096, 1e-6)
    assert (s.advantage.gamma, s.ppo.clip_low, s.ppo.clip_high, s.ppo.epochs) == (
        0.95,
        0.2,
        0.28,
        1,
    )
    assert s.advantage.estimator == "ppo_critic_pos" and s.curriculum.enabled and len(s.levels) == 5
    assert s.critic.hidden_dim == 512 and s.critic.lr == 3e-4  # Table 7, inherited


def test_one_estimator_preset_each_inheriting_compare() -> None:
    compare = load_train_settings(PRESETS / "compare.yaml")
    files = sorted((PRESETS / "estimators").glob("*.yaml"))
    assert sorted(f.stem for f in files) == sorted(ODYSSEUS_ESTIMATORS)
    assert set(ODYSSEUS_ESTIMATORS) < set(ESTIMATORS.names())
    for f in files:
        s = load_train_settings(f)
        assert s.advantage.estimator == f.stem
        assert s.model_copy(update={"advantage": compare.advantage}) == compare


def test_tiny_preset_and_bad_keys(tmp_path: Path) -> None:
    s = load_train_settings(PRESETS / "tiny.yaml")
    assert s.model.path is None and s.advantage.estimator == "ppo_critic_pos"
    assert s.levels == ["odland-1-1", "odland-1-2", "odland-1-3"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"inherit: {PRESETS / 'tiny.yaml'}\nppo: {{lrr: 1}}\n")
    with pytest.raises(ValueError, match="lrr"):
        load_train_settings(bad)
    bad.write_text(f"inherit: {PRESETS / 'tiny.yaml'}\nadvantage: {{estimator: nope}}\n")
    with pytest.raises(ValueError, match="unknown estimator 'nope'"):
        load_train_settings(bad)


# -- checkpoints ---------------------------------------------------------------------------------


class _Saveable:
    def save_pretrained(self, folder: Path, **_: object) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "x.txt").write_text("x")


def test_latest_points_at_complete_checkpoints_only(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    state = {"step": 1, "t": torch.ones(2), "rng": (3, (1, 2), None)}
    save_checkpoint(
        tmp_path, 1, model=_Saveable(), processor=_Saveable(), trainer_state=state, config={}
    )
    half = tmp_path / "checkpoints" / f".tmp-{checkpoint_name(2)}"  # killed while saving step 2
    half.mkdir()
    assert latest_checkpoint(tmp_path).name == checkpoint_name(1)
    assert load_trainer_state(latest_checkpoint(tmp_path))["step"] == 1
    save_checkpoint(
        tmp_path, 2, model=_Saveable(), processor=_Saveable(), trainer_state=state, config={}
    )
    assert latest_checkpoint(tmp_path).name == checkpoint_name(2) and not half.exists()


# -- the training step and exact resume ----------------------------------------------------------


def _weights(trainer: Trainer) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    policy = {k: v.detach().clone() for k, v in trainer.policy.model.state_dict().items()}
    network = trainer.value_function.critic.network
    critic = {k: v.detach().clone() for k, v in network.state_dict().items()}
    return policy, critic


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)


@pytest.mark.slow
def test_killed_run_resumes_exactly(tmp_path: Path, tiny_model_dir: Path) -> None:
    preset = small_preset(tmp_path, tiny_model_dir)
    reference = run_in_process(preset, tmp_path / "reference")
    lines = (tmp_path / "reference" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3

    killed = tmp_path / "killed"
    code = (
        "import sys; from odyssey_core.cli import train_command; "
        f"train_command(['--preset', {str(preset)!r}, '--out', {str(killed)!r}, '--threads', '1'])"
    )
    kill_during_step_two(code, killed)

    resumed = build_trainer(load_train_settings(preset), killed, resume=True)
    assert resumed.step == 1
    resumed.train()
    resumed.close()
    policy_ref, critic_ref = _weights(reference)
    policy_res, critic_res = _weights(resumed)
    _assert_close(policy_res, policy_ref)
    _assert_close(critic_res, critic_ref)
    initial = load_model(tiny_model_dir).state_dict()
    assert any(not torch.equal(initial[k], policy_ref[k]) for k in initial), "nothing trained"
    # the metrics file holds each step once, like the uninterrupted run's
    lines = (killed / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    assert steps == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_lora_warmup_and_value_free_estimator(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Critic warm-up step leaves the actor alone; LoRA checkpoints hold only the adapter and
    resume; grpo_outcome reads no critic values (the critic still trains, for its metrics)."""
    preset = small_preset(
        tmp_path,
        tiny_model_dir,
        steps=2,
        advantage={"estimator": "grpo_outcome"},
        lora={"r": 4, "alpha": 8},
        critic={"input_height": 36, "input_width": 40, "warmup_steps": 1},
    )
    trainer = run_in_process(preset, tmp_path / "run")
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first["actor/updated"] == 0.0 and "actor/pg_loss" not in first
    assert second["actor/updated"] == 1.0 and "critic/explained_variance_pre" not in second
    for m in (first, second):
        assert 0.0 <= m["time/critic_share_of_update"] <= 1.0 and "critic/loss" in m
        # GTR's thought-collapse signals ride along with every step's metrics
        assert 0.0 <= m["collapse/valid_rate"] <= 1.0 and m["collapse/turns"] > 0
    checkpoint = latest_checkpoint(tmp_path / "run")
    assert (checkpoint / "policy" / "adapter_config.json").is_file()
    state = load_trainer_state(checkpoint)
    assert state["step"] == 2 and set(state["rng"]) == {"python", "numpy", "torch"}
    resumed = build_trainer(load_train_settings(preset), tmp_path / "run", resume=True)
    assert resumed.step == 2
    _assert_close(_weights(resumed)[0], _weights(trainer)[0])
    resumed.close()


def test_episodes_start_from_save_states_and_a_turn_sample_budget_stops_training(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Section 4.2's setup at toy size: every episode starts from a saved scenario, and the run
    stops at a budget of turn samples before its step count (and says so in its state)."""
    from odyssey_core.envs.registry import make_env

    env = make_env("odland-1-1")
    env.reset(seed=0)
    for _ in range(10):
        scenario, *_ = env.step("<answer>['a', 'right']</answer>")
    state_file = tmp_path / "scenario.state"
    state_file.write_bytes(env.save_state())
    env.close()
    preset = small_preset(
        tmp_path,
        tiny_model_dir,
        steps=50,
        max_turn_samples=8,  # 2 episodes x at most 3 turns per step: 2 or 3 steps
        levels=["odland-1-1"],
        rollout={
            "num_trajectories": 2,
            "max_turns": 3,
            "n_envs": 2,
            "generation": {"temperature": 1.0, "max_new_tokens": 8},
            "start_states": {"odland-1-1": str(state_file)},
        },
    )
    trainer = build_trainer(load_train_settings(preset), tmp_path / "run")
    firsts = []
    collect = trainer.collector.collect

    def spy(*args, **kwargs):
        batch, metrics = collect(*args, **kwargs)
        firsts.extend(batch.frames[part.start] for part in batch.episode_slices())
        return batch, metrics

    trainer.collector.collect = spy
    history = trainer.train()
    trainer.close()
    assert 2 <= len(history) < 50 and trainer.turn_samples >= 8
    assert trainer.turn_samples - history[-1]["all/turns"] < 8  # it stopped at the first chance
    assert all(np.array_equal(frame, scenario.image) for frame in firsts)
    state = load_trainer_state(latest_checkpoint(tmp_path / "run"))
    assert state["turn_samples"] == trainer.turn_samples and state["step"] == len(history)
    bad = small_preset(tmp_path, tiny_model_dir, "bad.yaml", rollout={"start_states": {"x": "y"}})
    with pytest.raises(ValueError, match="not trained on"):
        load_train_settings(bad)


def test_shipped_start_states_resolve_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository root
    (path,) = load_train_settings("compare").rollout.start_states.values()
    assert path.is_absolute() and path.is_file() and path.suffix == ".state"
    with pytest.raises(ValueError, match=r"no save-state file at nowhere\.state"):
        load_train_settings(
            "compare", {"rollout": {"start_states": {"odland-1-3": "nowhere.state"}}}
        )
