"""``odyssey espo eval``: the label-only baselines without a model (a JSON summary) and a
model beside them (Markdown tables), on a generated tiny dataset."""

from __future__ import annotations

import json
from pathlib import Path

import model_fixtures
import pytest
from click.testing import CliRunner

from odyssey_core.cli import main
from odyssey_core.envs.persona.dataset import read_dataset
from odyssey_core.recipes.espo.metrics import BASELINE_AGENTS, LABELS
from tests.helpers_persona import tiny_dataset

tiny_model_dir = model_fixtures.tiny_model_dir
ALL_SPLITS = "train,val,test"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("persona") / "tiny")


def run_agent(dataset: Path, agent: str, *more: str) -> dict:
    result = CliRunner().invoke(
        main, ["espo", "eval", "--agent", agent, "--splits", ALL_SPLITS, *more, str(dataset)]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_always_no_has_no_gui_skill_and_the_no_share_of_rec_acc(dataset: Path) -> None:
    episodes = read_dataset(dataset)
    steps = [s for e in episodes for s in e.steps]
    asked = [s for s in steps if s.stage == "recommend"]
    no_share = sum(s.gold.text == "No" for s in asked) / len(asked)

    summary = run_agent(dataset, "always_no", "--resamples", "200")
    metrics = summary["metrics"]
    assert summary["agent"] == "always_no" and summary["splits"] == ["train", "val", "test"]
    assert (summary["n_steps"], summary["n_episodes"]) == (len(steps), len(episodes))
    assert set(metrics) == set(LABELS) - {"online_success"}
    assert (metrics["ele_acc"], metrics["op_f1"], metrics["step_sr"]) == (0.0, 0.0, 0.0)
    assert metrics["rec_acc"] == pytest.approx(no_share)
    # the all-steps reading credits it with every gold No
    assert metrics["step_sr_all_steps"] == pytest.approx(no_share * len(asked) / len(steps))
    assert metrics["yes_precision"] is None  # it never says Yes: undefined, JSON null
    gui = sum(s.stage == "search" for s in steps)
    assert summary["intervals"]["step_sr"] == {
        "low": 0.0,
        "high": 0.0,
        "n": gui,
        "method": "bootstrap",
    }


def test_the_oracle_scores_the_ceiling(dataset: Path) -> None:
    metrics = run_agent(dataset, "oracle", "--resamples", "100")["metrics"]
    for name in ("ele_acc", "op_f1", "step_sr", "rec_acc", "step_sr_all_steps", "op_f1_macro"):
        assert metrics[name] == 1.0, name


def test_the_random_agent_follows_its_seed(dataset: Path) -> None:
    first = run_agent(dataset, "random", "--seed", "3", "--resamples", "100")
    assert first == run_agent(dataset, "random", "--seed", "3", "--resamples", "100")
    other = run_agent(dataset, "random", "--seed", "4", "--resamples", "100")
    assert other["metrics"] != first["metrics"]
    assert 0.0 <= first["metrics"]["rec_acc"] <= 1.0


def test_bad_invocations_say_what_is_wrong(dataset: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    unknown = runner.invoke(main, ["espo", "eval", "--agent", "always_maybe", str(dataset)])
    assert unknown.exit_code != 0 and "always_no, always_yes" in unknown.output
    two = runner.invoke(main, ["espo", "eval", "--agent", "oracle", str(dataset), str(dataset)])
    assert two.exit_code != 0 and "expected --agent NAME DATASET" in two.output
    one = runner.invoke(main, ["espo", "eval", str(dataset)])
    assert one.exit_code != 0 and "expected MODEL DATASET" in one.output
    empty = runner.invoke(main, ["espo", "eval", "--agent", "oracle", str(tmp_path)])
    assert empty.exit_code != 0 and "not a persona dataset folder" in empty.output
    split = runner.invoke(
        main, ["espo", "eval", "--agent", "oracle", "--splits", "dev", str(dataset)]
    )
    assert split.exit_code != 0 and "unknown split" in split.output
    helped = runner.invoke(main, ["espo", "eval", "--help"])
    assert all(agent in helped.output for agent in BASELINE_AGENTS)


def test_a_model_is_reported_beside_every_baseline(dataset: Path, tiny_model_dir: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "espo",
            "eval",
            str(tiny_model_dir),
            str(dataset),
            "--no-online",
            "--max-new-tokens",
            "4",
            "--image-size",
            "112",
            "224",
            "--resamples",
            "100",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| Model | EleAcc | Op F1 | Step SR | RecAcc |")
    assert any(line.startswith(f"| {tiny_model_dir.name} |") for line in lines)
    for agent in BASELINE_AGENTS:
        assert sum(line.startswith(f"| {agent} (baseline) |") for line in lines) == 2, agent


def test_every_agent_summary_carries_the_best_achievable_rec_acc(dataset: Path) -> None:
    episodes = read_dataset(dataset)
    asked = sum(len(e.stage_steps("recommend")) for e in episodes)
    ceiling = run_agent(dataset, "always_yes", "--resamples", "50")["best_achievable_rec_acc"]
    assert ceiling == {
        "value": 1.0,  # every label follows from the intent's preference and the listed pool
        "judged_steps": asked,
        "recommend_steps": asked,
        "classes": ceiling["classes"],
        "mixed_steps": 0,
    }
    assert ceiling["classes"] > 1
