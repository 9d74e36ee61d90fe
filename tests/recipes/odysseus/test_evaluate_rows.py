"""The evaluate stage plays the base model, the SFT model and the RL candidate on the same
episodes (rows ``base``, ``sft``, ``candidate``), says what RL did, and the promotion gate
reuses the base row instead of playing the base model again."""

from __future__ import annotations

import json
from pathlib import Path

import model_fixtures
import pytest

from odyssey_core.recipes.odysseus.pipeline import (
    load_pipeline_config,
    rl_effect,
    stage_evaluate,
    stage_promote,
)
from odyssey_core.stages import run_store

pytest_plugins = ["tests.s3_fixtures"]  # the migrated MLflow template database

tiny_model_dir = model_fixtures.tiny_model_dir


def _table_rows(markdown: str, section: str) -> list[str]:
    """The agent column of the first table after the heading that starts with ``section``."""
    lines = markdown.split(f"## {section}", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Agent"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return rows


def test_evaluate_stage_rows_base_sft_candidate_on_the_same_episodes(
    tmp_path: Path, tiny_model_dir: Path, mlflow_uri: str
) -> None:
    from odyssey_core.models.tiny import build_tiny_model

    cfg = load_pipeline_config(
        "tiny", {"run_dir": str(tmp_path / "run"), "tracking_uri": mlflow_uri}
    )
    store = run_store(cfg, "fixtures")
    other = build_tiny_model(tmp_path / "other-model", seed=1)
    base_uri = store.put_dir(tiny_model_dir, "base")
    sft_uri = store.put_dir(other, "sft")
    candidate_uri = store.put_dir(tiny_model_dir, "candidate")  # the base's weights again

    out = stage_evaluate(cfg, candidate_uri, sft_model_uri=sft_uri, base_model_uri=base_uri)

    # where README and `make demo` point: <run>/evaluate/candidate/report/report.md
    assert Path(out["report_markdown"]) == cfg.run_dir / "evaluate/candidate/report/report.md"
    report = Path(out["report_markdown"]).read_text()
    assert _table_rows(report, "from_start") == ["base", "sft", "candidate", "Maximum"]
    assert "RL's effect (candidate - sft)" in report
    lines = (Path(out["report_markdown"]).parent / "episodes.jsonl").read_text().splitlines()
    episodes = [json.loads(line) for line in lines]
    played = {
        agent: sorted(
            (e["env_id"], e["start"], e["run"], e["seed"]) for e in episodes if e["agent"] == agent
        )
        for agent in ("base", "sft", "candidate")
    }
    assert len(played["candidate"]) == out["episodes"] == 2
    assert played["base"] == played["sft"] == played["candidate"]

    recorded = json.loads(Path(out["scores_path"]).read_text())
    rows = recorded["rows"]
    assert set(rows) == {"base", "sft", "candidate"} and rows["sft"]["uri"] == sft_uri
    assert recorded["scores"] == rows["candidate"]["scores"]
    # the same weights on the same episodes play the same games
    assert rows["base"]["scores"] == rows["candidate"]["scores"]
    assert out["base_mean"] == out["mean_progress"]
    assert "sft_mean" in out
    assert out["rl_effect"] == pytest.approx(
        rl_effect({k: v["scores"] for k, v in rows.items()})["rl_effect"]
    )

    # the gate's first reference is the base model: its row is reused, not played again
    promoted = stage_promote(cfg, candidate_uri, out, base_uri)
    assert promoted["reference"] == "base"
    assert promoted["reference_mean"] == pytest.approx(out["base_mean"])
    assert not (cfg.run_dir / "promote" / "base").exists()


def test_rl_effect_is_candidate_minus_sft_with_welch() -> None:
    effect = rl_effect({"candidate": [4.0, 6.0, 5.0, 7.0], "sft": [1.0, 2.0, 3.0, 2.0]})
    assert effect["rl_effect"] == pytest.approx(5.5 - 2.0)
    # SE of the difference: sqrt(var_c / n_c + var_s / n_s) with sample variances
    assert effect["rl_effect_se"] == pytest.approx(((5 / 3) / 4 + (2 / 3) / 4) ** 0.5)
    assert effect["rl_effect_t"] == pytest.approx(3.5 / effect["rl_effect_se"])
    assert 0 < effect["rl_effect_p"] < 0.01
    small = rl_effect({"candidate": [1.0], "sft": [0.0, 1.0]})
    assert all(v != v for v in small.values())  # NaN: one episode has no variance
