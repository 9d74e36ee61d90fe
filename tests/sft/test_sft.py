"""The SFT stage: dataset contract, label masking, training, checkpoints and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import model_fixtures
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bench.sft_tiny import build_odland_dataset, mcnemar_exact_p
from odyssey_core.common.run_folder import checkpoint_name, checkpoint_step
from odyssey_core.envs.base import Observation
from odyssey_core.policy.hf import END_OF_TURN
from odyssey_core.sft.data import (
    IGNORE_INDEX,
    REQUIRED_COLUMNS,
    SFTCollator,
    SFTDataset,
    SFTSample,
    answer_key,
    answer_weights,
)
from odyssey_core.sft.settings import SFTSettings, load_sft_settings
from odyssey_core.sft.trainer import SFTTrainer, latest_checkpoint

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def sft_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small dataset in the curation contract: odland-1-1 frames, rule-teacher answers."""
    return build_odland_dataset(tmp_path_factory.mktemp("sft-data"), 24, val_fraction=0.25)


def small_settings(**overrides) -> SFTSettings:
    base = {
        "batch_size": 4,
        "grad_accum_steps": 2,
        "lr": 2e-3,
        "warmup_ratio": 0.1,
        "precision": "fp32",
        "device": "cpu",
        "epochs": 50,
        "checkpoint_every": 2,
    }
    return SFTSettings(**{**base, **overrides})


def test_dataset_contract(sft_dataset: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(sft_dataset / "data.parquet")
    assert set(REQUIRED_COLUMNS) <= set(table.column_names)
    assert (sft_dataset / "manifest.json").is_file()
    train, val = SFTDataset(sft_dataset, "train"), SFTDataset(sft_dataset, "val")
    assert len(train) + len(val) == table.num_rows and len(val) > 0
    assert all(s.frame_path.is_file() for s in train.samples)


def test_labels_mask_prompt_and_image_tokens(sft_dataset: Path, tiny_policy) -> None:
    sample = SFTDataset(sft_dataset, "train")[0]
    tokenizer = tiny_policy.processor.tokenizer
    batch = SFTCollator(tiny_policy.processor)([sample])
    ids, labels = batch["input_ids"][0], batch["labels"][0]

    # The prompt is the policy's own rollout prompt for this frame and turn text.
    inputs, _ = tiny_policy.encode([Observation(sample.image(), sample.turn_text)])
    prompt = inputs["input_ids"][0]
    assert torch.equal(ids[: len(prompt)], prompt)
    assert (labels[: len(prompt)] == IGNORE_INDEX).all()
    assert (labels[ids == tiny_policy.image_token_id] == IGNORE_INDEX).all()

    # Response tokens and the end-of-turn token are the only targets.
    expected = tokenizer(sample.response, add_special_tokens=False)["input_ids"]
    expected.append(tokenizer.convert_tokens_to_ids(END_OF_TURN))
    kept = labels[labels != IGNORE_INDEX]
    assert kept.tolist() == expected == ids[len(prompt) :].tolist()
    assert tokenizer.decode(kept) == sample.response + END_OF_TURN


def test_collator_left_pads(sft_dataset: Path, tiny_policy) -> None:
    samples = SFTDataset(sft_dataset, "train").samples[:3]
    batch = SFTCollator(tiny_policy.processor)(samples)
    assert batch["attention_mask"][:, -1].all()  # responses end every row
    pads = batch["attention_mask"] == 0
    assert (batch["labels"][pads] == IGNORE_INDEX).all()
    assert batch["image_grid_thw"].shape == (3, 3)


def test_presets_follow_table_8() -> None:
    paper = load_sft_settings("paper")
    assert paper.expected_dataset_size == 5058
    assert paper.epochs == 1
    assert paper.batch_size == 128
    assert paper.grad_accum_steps == 2
    assert paper.lr == pytest.approx(1e-7)
    assert paper.lr_scheduler == "cosine"
    assert paper.warmup_ratio == pytest.approx(0.03)
    assert paper.lora is None  # Appendix E.2: all components are trained
    tiny = load_sft_settings("tiny")
    assert tiny.device == "cpu" and tiny.max_steps is not None and tiny.max_steps <= 500
    assert 1e-3 <= tiny.lr <= 3e-3


def test_deepspeed_missing_gives_install_hint(
    sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import fails even where installed
    settings = small_settings(deepspeed=REPO / "configs/deepspeed/zero2.json")
    with pytest.raises(ImportError, match=r"odyssey-core\[deepspeed\]"):
        SFTTrainer(settings, sft_dataset, tiny_model_dir, tmp_path)
    config_path = load_sft_settings("paper").deepspeed_config()
    assert config_path is not None and config_path.is_file()
    assert json.loads(config_path.read_text())["zero_optimization"]["stage"] == 2


def test_loss_decreases_and_eval_is_reported(
    sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    records: list[dict] = []
    settings = small_settings(max_steps=24, eval_every=12, checkpoint_every=100)
    trainer = SFTTrainer(
        settings, sft_dataset, tiny_model_dir, tmp_path, callbacks=[records.append]
    )
    before = trainer.evaluate()
    result = trainer.train()

    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 24
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:3]) / 3
    evals = [r for r in records if "eval_loss" in r]
    assert [r["step"] for r in evals] == [12, 24]
    assert result.eval_loss == evals[-1]["eval_loss"] < before
    first = records[0]
    assert {"loss", "lr", "grad_norm", "tokens_per_s"} <= set(first)
    assert first["lr"] == 0.0  # HF-style warm-up starts from zero
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged == records
    assert (result.final_dir / "model.safetensors").is_file()
    assert latest_checkpoint(tmp_path).name == checkpoint_name(24)


RUN_SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from odyssey_core.sft.settings import SFTSettings
from odyssey_core.sft.trainer import SFTTrainer
settings = SFTSettings.model_validate_json(open(sys.argv[1]).read())
SFTTrainer(settings, sys.argv[2], sys.argv[3], sys.argv[4]).train()
"""


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def test_killed_and_resumed_run_matches_uninterrupted(
    sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = small_settings(max_steps=8, checkpoint_every=2)
    (tmp_path / "settings.json").write_text(settings.model_dump_json())
    (tmp_path / "run.py").write_text(RUN_SCRIPT)
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, str(tmp_path / "run.py"), str(tmp_path / "settings.json")]
    proc = subprocess.Popen(
        [*args, str(sft_dataset), str(tiny_model_dir), str(killed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        pointer = killed / "checkpoints" / "latest"
        while not (pointer.is_file() and (checkpoint_step(pointer.read_text().strip()) or 0) >= 2):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no checkpoint step-2 in time"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    at_kill = latest_checkpoint(killed)
    assert at_kill is not None and checkpoint_step(at_kill.name) < 8  # it really was interrupted

    resumed = SFTTrainer(settings, sft_dataset, tiny_model_dir, killed, resume=True)
    assert resumed.step == int(at_kill.name.split("-")[1]) >= 2
    resumed.train()

    SFTTrainer(settings, sft_dataset, tiny_model_dir, tmp_path / "straight").train()
    a, b = _weights(killed / "final"), _weights(tmp_path / "straight" / "final")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
    steps = [json.loads(x)["step"] for x in (killed / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps] == sorted(steps) and steps.count(8) >= 1
    assert not list((killed / "checkpoints").glob(".tmp-*"))


def test_lora_checkpoint_and_resume(
    sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = small_settings(max_steps=2, checkpoint_every=1, lora={"r": 4, "alpha": 8})
    SFTTrainer(settings, sft_dataset, tiny_model_dir, tmp_path).train()
    ckpt = latest_checkpoint(tmp_path)
    assert (ckpt / "adapter" / "adapter_config.json").is_file()
    assert not (ckpt / "model").exists()
    state = torch.load(ckpt / "trainer_state.pt", weights_only=True)
    assert state["step"] == 2 and {"python", "numpy", "torch"} <= set(state["rng"])
    more = settings.model_copy(update={"max_steps": 3})
    trainer = SFTTrainer(more, sft_dataset, tiny_model_dir, tmp_path, resume=True)
    assert trainer.step == 2
    assert trainer.train().steps == 3
    assert (tmp_path / "final" / "model.safetensors").is_file()  # merged plain checkpoint


def test_cli_runs(sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from odyssey_core.sft.cli import sft_command

    result = CliRunner().invoke(
        sft_command,
        [
            "--preset", "tiny", "--dataset", str(sft_dataset), "--model", str(tiny_model_dir),
            "--out", str(tmp_path), "--max-steps", "1",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert '"step": 1' in result.output and (tmp_path / "final").is_dir()


def test_latest_prefers_newest_complete_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for name in ("step-000002", "step-000004"):
        (root / name).mkdir(parents=True)
        (root / name / "trainer_state.pt").write_bytes(b"")
    (root / ".tmp-step-000006").mkdir()  # a crash mid-write: never picked
    (root / "latest").write_text("step-000002\n")  # a crash before the pointer moved
    assert latest_checkpoint(tmp_path).name == "step-000004"
    (root / "latest").write_text("step-000004\n")
    assert latest_checkpoint(tmp_path).name == "step-000004"
    assert latest_checkpoint(tmp_path / "nothing") is None


# ------------------------------------------------------------------ rare-answer balancing
def _sample(buttons: tuple[str, ...], i: int = 0) -> SFTSample:
    return SFTSample(f"s{i}", Path("f.png"), "odland", "1-1", "t", "r", buttons, "train")


def test_answer_weights_balance_rare_answers() -> None:
    rows = [_sample(("b", "right"), i) for i in range(8)] + [
        _sample(("right", "a"), 8),
        _sample(("a", "right"), 9),
    ]
    assert answer_key(("right", "a")) == answer_key(("a", "right")) == ("a", "right")
    full = answer_weights(rows, 1.0)
    assert full.mean() == pytest.approx(1.0)
    assert full[:8].sum() == pytest.approx(full[8:].sum())  # each answer weighs the same
    root = answer_weights(rows, 0.5)
    assert root[8] / root[0] == pytest.approx(2.0)  # sqrt(8 / 2)
    assert np.allclose(answer_weights(rows, 0.0), 1.0)
    with pytest.raises(ValueError):
        SFTSettings(answer_balance="oversample")


def test_balanced_sampler_draws_answers_evenly(
    sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = small_settings(answer_balance="sampler", answer_balance_power=1.0)
    trainer = SFTTrainer(settings, sft_dataset, tiny_model_dir, tmp_path)
    keys = [answer_key(s.buttons) for s in trainer.train_set]
    assert len(set(keys)) >= 2, "the fixture needs more than one answer"
    order = trainer.epoch_order(3)
    assert len(order) == len(keys) and np.array_equal(order, trainer.epoch_order(3))
    drawn = Counter(keys[int(i)] for epoch in range(300) for i in trainer.epoch_order(epoch))
    shares = np.array(list(drawn.values())) / sum(drawn.values())
    assert np.allclose(shares, 1 / len(set(keys)), atol=0.03), drawn
    plain = SFTTrainer(small_settings(), sft_dataset, tiny_model_dir, tmp_path / "plain")
    assert sorted(plain.epoch_order(3)) == list(range(len(keys)))  # a permutation, as before


def test_loss_weights_scale_each_rows_tokens(
    sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = small_settings(answer_balance="loss", answer_balance_power=1.0, max_steps=2)
    trainer = SFTTrainer(settings, sft_dataset, tiny_model_dir, tmp_path)
    rows = trainer.train_set.samples[:3]
    batch = trainer.collator(rows)
    with torch.no_grad():
        plain, n_plain = trainer._loss_sums(batch)
        ones, n_ones = trainer._loss_sums(batch, torch.ones(3))
        per_row = [trainer._loss_sums(batch, torch.eye(3)[i]) for i in range(3)]
        w = torch.tensor([0.5, 2.0, 3.0])
        weighted, n_weighted = trainer._loss_sums(batch, w)
    torch.testing.assert_close(ones, plain)
    assert n_ones == n_plain == sum(n for _, n in per_row)
    expected = sum(float(w[i]) * float(loss) for i, (loss, _) in enumerate(per_row))
    assert float(weighted) == pytest.approx(expected, rel=1e-5)
    assert n_weighted == pytest.approx(sum(float(w[i]) * n for i, (_, n) in enumerate(per_row)))
    record = trainer.train_step()  # weighted steps train and log the plain token count
    assert isinstance(record["response_tokens"], int) and np.isfinite(record["loss"])


def test_vision_lr_scale_slows_or_freezes_the_vision_tower(
    sft_dataset: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    scaled = SFTTrainer(
        small_settings(vision_lr_scale=0.1), sft_dataset, tiny_model_dir, tmp_path / "a"
    )
    text_group, vision_group = scaled.optimizer.param_groups
    assert vision_group["lr"] == pytest.approx(0.1 * text_group["lr"])
    visual = {id(p) for p in scaled.model.model.visual.parameters()}
    assert {id(p) for p in vision_group["params"]} == visual

    frozen = SFTTrainer(
        small_settings(vision_lr_scale=0.0, max_steps=1, warmup_ratio=0.0),
        sft_dataset,
        tiny_model_dir,
        tmp_path,
    )
    assert len(frozen.optimizer.param_groups) == 1
    before = {n: p.detach().clone() for n, p in frozen.model.named_parameters()}
    frozen.train_step()
    moved = {n for n, p in frozen.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and not any(".visual." in f".{n}" for n in moved)
    assert "model.language_model.embed_tokens.weight" in moved


def test_bench_mcnemar_exact_p_by_hand() -> None:
    # 10 discordant frames all won: 2 * (1/2)^10.
    assert mcnemar_exact_p(10, 0) == pytest.approx(2 / 1024)
    assert mcnemar_exact_p(0, 10) == pytest.approx(2 / 1024)
    # 3 won, 1 lost: 2 * (C(4,0) + C(4,1)) / 2^4 = 10/16.
    assert mcnemar_exact_p(3, 1) == pytest.approx(10 / 16)
    assert mcnemar_exact_p(2, 2) == 1.0  # a tie caps at 1
    assert mcnemar_exact_p(0, 0) == 1.0  # no discordant frame: no evidence
