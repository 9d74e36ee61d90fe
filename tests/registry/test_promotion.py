"""The promotion gate and the model registry on a real SQLite MLflow backend."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from odyssey_core.registry.cli import registry_group
from odyssey_core.registry.models import (
    CANDIDATE,
    CHAMPION,
    PREVIOUS_CHAMPION,
    ModelRegistry,
    RegistryError,
    SampleStats,
    welch_gate,
)
from odyssey_core.registry.settings import RegistrySettings
from odyssey_core.registry.tracking import Tracker

pytest_plugins = ["tests.s3_fixtures"]  # the moto server, proxy and MLflow fixtures
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader:DeprecationWarning")


def _scores(mean: float, sd: float = 30.0, n: int = 24, seed: int = 0) -> list[float]:
    return list(np.random.default_rng(seed).normal(mean, sd, n).round(2))


# -- the statistics, by hand ---------------------------------------------------------------------


def test_welch_statistic_checked_by_hand() -> None:
    # Equal variances and sizes: candidate [3,4,5] (mean 4, s^2 1), champion [1,2,3] (mean 2,
    # s^2 1), margin 0.5. SE of the difference = sqrt(1/3 + 1/3); t = (4 - 2 - 0.5) / SE;
    # Welch df = (2/3)^2 / (2 * (1/3)^2 / 2) = 4. With 4 degrees of freedom Student's t CDF has
    # a closed form: F(t) = 1/2 + 3/8 * a * (1 - b / 3), a = t / sqrt(1 + t^2/4),
    # b = (t^2/4) / (1 + t^2/4); the one-sided p is 1 - F(t).
    gate = welch_gate([3, 4, 5], [1, 2, 3], margin=0.5, alpha=0.1)
    t = 1.5 / math.sqrt(2 / 3)
    assert gate.t == pytest.approx(t, rel=1e-12) and gate.t == pytest.approx(1.8371173, abs=1e-7)
    assert gate.df == pytest.approx(4.0)
    a = t / math.sqrt(1 + t * t / 4)
    p = 1 - (0.5 + 3 / 8 * a * (1 - (t * t / 4) / (3 * (1 + t * t / 4))))
    assert gate.p == pytest.approx(p, rel=1e-9) and gate.p == pytest.approx(0.0700330, abs=1e-6)
    assert gate.candidate == SampleStats(3, 4.0, pytest.approx(math.sqrt(1 / 3)))
    assert gate.reference_stats.mean == 2.0
    assert gate.promoted and gate.reason.startswith("significantly better")
    stricter = welch_gate([3, 4, 5], [1, 2, 3], margin=0.5, alpha=0.05)
    assert not stricter.promoted and stricter.reason.startswith("not significant")

    # Unequal variances and sizes: [10,12,14,16] (mean 13, s^2 20/3) vs [9,10,11] (mean 10,
    # s^2 1), margin 1: SE^2 = 5/3 + 1/3 = 2, t = 2/sqrt(2) = sqrt(2);
    # df = 2^2 / ((5/3)^2/3 + (1/3)^2/2) = 4 / (25/27 + 1/18) = 216/53.
    gate = welch_gate([10, 12, 14, 16], [9, 10, 11], margin=1.0, alpha=0.05)
    assert gate.t == pytest.approx(math.sqrt(2), rel=1e-12)
    assert gate.df == pytest.approx(216 / 53, rel=1e-12)
    assert gate.reference_stats.se == pytest.approx(math.sqrt(1 / 3))
    assert not gate.promoted  # p ~ 0.11

    # Not better by the margin, even though better.
    gate = welch_gate([5, 6, 7], [4, 5, 6], margin=2.0)
    assert not gate.promoted and gate.reason.startswith("not better by the margin")
    assert gate.t < 0

    # Constant scores: no variance, the difference decides.
    assert welch_gate([5, 5, 5], [3, 3, 3], margin=1).promoted
    assert not welch_gate([5, 5, 5], [3, 3, 3], margin=2).promoted
    # Too few episodes to test anything.
    few = welch_gate([100.0], [1.0, 2.0])
    assert not few.promoted and "too few" in few.reason
    with pytest.raises(ValueError, match="finite"):
        welch_gate([1.0, float("nan")], [1.0, 2.0])


# -- the registry --------------------------------------------------------------------------------


@pytest.fixture
def registry(mlflow_uri: str) -> ModelRegistry:
    return ModelRegistry(mlflow_uri, settings=RegistrySettings())


@pytest.fixture
def run_id(mlflow_uri: str, mlflow_artifact_root: str) -> str:
    tracker = Tracker(mlflow_uri, "odyssey/train", artifact_location=mlflow_artifact_root)
    run = tracker.start("rl")
    run.end()
    return run.run_id


def _tags(registry: ModelRegistry, game: str, version: int) -> dict[str, str]:
    mv = registry.client.get_model_version(registry.model_name(game), str(version))
    return dict(mv.tags)


def test_first_model_must_beat_the_base_model(registry: ModelRegistry, run_id: str) -> None:
    base = _scores(100, seed=1)
    v1 = registry.register_checkpoint("s3://b/runs/a/rl/ckpt", "odland", run_id, {"progress": 101})
    assert v1 == 1 and registry.candidate("odland") == 1
    with pytest.raises(RegistryError, match="base model's scores"):
        registry.promote("odland", _scores(101, seed=2))
    no = registry.promote("odland", _scores(101, seed=2), base_scores=base, margin=5)
    assert not no.promoted and no.champion is None
    assert registry.champion("odland") is None
    tags = _tags(registry, "odland", v1)
    assert tags["promotion.decision"] == "rejected" and tags["promotion.reference"] == "base"
    assert tags["metric.progress"] == "101.0" and tags["checkpoint_uri"] == "s3://b/runs/a/rl/ckpt"

    yes = registry.promote("odland", _scores(160, seed=3), base_scores=base, margin=5)
    assert yes.promoted and yes.champion == 1 and yes.previous_champion is None
    assert registry.champion("odland") == 1
    assert registry.candidate("odland") is None  # decided
    assert registry.checkpoint_uri("odland") == "s3://b/runs/a/rl/ckpt"
    assert _tags(registry, "odland", 1)["promotion.reference_version"] == "base"


def test_worse_candidate_is_rejected_better_one_promoted_then_rollback(
    registry: ModelRegistry, run_id: str
) -> None:
    game = "mario"
    registry.register_checkpoint("file:///ckpt/v1", game, run_id)
    registry.promote(game, _scores(300, seed=1), base_scores=_scores(100, seed=2))
    champion_scores = _scores(300, seed=1)

    v2 = registry.register_checkpoint("file:///ckpt/v2", game, run_id, {"progress": 250.0})
    worse = registry.promote(game, _scores(250, seed=4), champion_scores, margin=10)
    assert worse.candidate_version == v2 == 2 and not worse.promoted
    assert registry.champion(game) == 1 and registry.candidate(game) == 2
    tags = _tags(registry, game, 2)
    assert tags["promotion.decision"] == "rejected"
    assert tags["promotion.reference"] == "champion"
    assert tags["promotion.reference_version"] == "1"
    assert tags["promotion.reason"].startswith("not better by the margin")
    for key in ("candidate_mean", "candidate_se", "reference_mean", "reference_se", "t", "p"):
        assert math.isfinite(float(tags[f"promotion.{key}"])), key
    assert tags["promotion.candidate_n"] == "24" and tags["promotion.margin"] == "10.0"

    # Slightly better, but not significantly (small n, large spread).
    v3 = registry.register_checkpoint("file:///ckpt/v3", game, run_id)
    meh = registry.promote(
        game, _scores(315, sd=60, n=4, seed=5), _scores(300, sd=60, n=4, seed=6), margin=0
    )
    assert not meh.promoted
    assert "not" in _tags(registry, game, v3)["promotion.reason"]

    v4 = registry.register_checkpoint("file:///ckpt/v4", game, run_id)
    better = registry.promote(game, _scores(360, seed=7), champion_scores, margin=10, alpha=0.01)
    assert better.promoted and better.previous_champion == 1 and better.champion == v4 == 4
    tags = _tags(registry, game, v4)
    assert tags["promotion.decision"] == "promoted"
    assert tags["promotion.reason"].startswith("significantly better")
    assert float(tags["promotion.p"]) < 0.01 and tags["promotion.alpha"] == "0.01"
    assert registry.champion(game) == 4
    assert registry.alias_version(game, PREVIOUS_CHAMPION) == 1
    with pytest.raises(RegistryError, match="already the champion"):
        registry.promote(game, [1.0, 2.0], [1.0, 2.0], candidate_version=4)

    rolled = registry.rollback(game)
    assert (rolled.demoted, rolled.champion, rolled.previous) == (4, 1, None)
    assert registry.champion(game) == 1
    assert registry.alias_version(game, PREVIOUS_CHAMPION) is None
    assert registry.checkpoint_uri(game, CHAMPION) == "file:///ckpt/v1"
    assert _tags(registry, game, 4)["rollback.replaced_by"] == "1"
    with pytest.raises(RegistryError, match="no previous champion"):
        registry.rollback(game)

    info = registry.show(game)
    assert info["champion_history"] == [1]
    assert [v["version"] for v in info["versions"]] == [1, 2, 3, 4]
    assert info["versions"][0]["aliases"] == [CHAMPION]
    # v4's registration moved "candidate" off v3; v4's promotion removed it.
    assert all(CANDIDATE not in v["aliases"] for v in info["versions"])
    assert info["versions"][3]["tags"]["promotion.decision"] == "promoted"
    assert [m["name"] for m in registry.list_models()] == ["odysseus-mario"]


def test_cli_list_show_promote_rollback(
    registry: ModelRegistry, run_id: str, mlflow_uri: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    env = {"MLFLOW_TRACKING_URI": mlflow_uri, "MLFLOW_DISABLE_TELEMETRY": "true"}
    result = runner.invoke(registry_group, ["list"], env=env)
    assert result.exit_code == 0 and "no registered models" in result.output

    registry.register_checkpoint("s3://b/v1", "odland", run_id)
    registry.register_checkpoint("s3://b/v2", "odland", run_id)
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"candidate": _scores(200, seed=1), "base": _scores(50, seed=2)}))
    result = runner.invoke(
        registry_group,
        ["promote", "odland", "--candidate-version", "1", "--scores-file", str(first)],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert "odysseus-odland v1: PROMOTED" in result.output

    second = tmp_path / "second.json"
    second.write_text(
        json.dumps({"candidate": _scores(150, seed=3), "champion": _scores(200, seed=1)})
    )
    args = ["promote", "odland", "--scores-file", str(second), "--margin", "5", "--json"]
    result = runner.invoke(registry_group, [*args, "--strict"], env=env)
    assert result.exit_code == 3
    decision = json.loads(result.output)
    assert decision["promoted"] is False and decision["candidate_version"] == 2
    assert decision["gate"]["margin"] == 5.0

    third = tmp_path / "third.json"
    third.write_text(
        json.dumps({"candidate": _scores(300, seed=4), "champion": _scores(200, seed=1)})
    )
    result = runner.invoke(
        registry_group,
        ["promote", "odland", "--candidate-version", "2", "--scores-file", str(third)],
        env=env,
    )
    assert result.exit_code == 0 and "PROMOTED" in result.output

    result = runner.invoke(registry_group, ["list", "--game", "odland"], env=env)
    assert "odysseus-odland" in result.output and "champion=v2" in result.output
    assert "champion-previous=v1" in result.output
    result = runner.invoke(registry_group, ["show", "odland"], env=env)
    assert result.exit_code == 0 and "significantly better" in result.output
    assert "s3://b/v2" in result.output

    result = runner.invoke(registry_group, ["rollback", "odland"], env=env)
    assert result.exit_code == 0 and "champion v2 -> v1" in result.output
    shown = json.loads(runner.invoke(registry_group, ["show", "odland", "--json"], env=env).output)
    assert shown["aliases"] == {"champion": 1}

    result = runner.invoke(registry_group, ["rollback", "odland"], env=env)
    assert result.exit_code != 0 and "no previous champion" in result.output
    result = runner.invoke(registry_group, ["show", "pong"], env=env)
    assert result.exit_code != 0 and "no registered model odysseus-pong" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    result = runner.invoke(
        registry_group, ["promote", "odland", "--scores-file", str(bad)], env=env
    )
    assert result.exit_code == 2 and "candidate" in result.output
