"""nightly-eval for every recipe's registered model: GTR's champion re-evaluated on its fixed
deals and ESPO's on its test episodes (a real MLflow registry and time series; only the
evaluation is replaced), the flow's
regression path for GTR, and one scheduled deployment per registered model in prefect.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flows import nightly

ROOT = Path(__file__).resolve().parent.parent


def _fake_gtr_eval(returns_by_label: dict[str, list[float]]):
    def fake(cfg: Any, model_ref: str, label: str, out_dir: Path) -> dict[str, Any]:
        returns = returns_by_label[label]
        mean = sum(returns) / len(returns)
        summary = {"episodes": len(returns), "mean_return": mean, "success_rate": mean / 2}
        report = out_dir / "report" / "report.md"  # where the real one writes it
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(f"# {label}\n")
        return {
            "summary": summary,
            "scores": {"returns": returns},
            "report_markdown": str(report),
        }

    return fake


def test_gtr_nightly_compares_the_champion_with_its_recorded_return(
    tmp_path: Path, monkeypatch
) -> None:
    from odyssey_core.recipes.gtr import pipeline as gtr
    from odyssey_core.registry.models import ModelRegistry

    cfg = gtr.load_gtr_pipeline_config("tiny", {"run_dir": str(tmp_path / "run")})
    registry = ModelRegistry(cfg.mlflow_uri)
    registry.register_checkpoint(
        "file:///ckpt/a", cfg.game, metrics={"eval.mean_return": 1.0, "eval.success_rate": 0.5}
    )
    registry.promote(cfg.game, [1.0, 1.0, 1.0], base_scores=[0.0, 0.0, 0.5])
    registry.register_checkpoint("file:///ckpt/b", cfg.game, metrics={"eval.mean_return": 0.5})
    assert registry.champion(cfg.game) == 1 and registry.candidate(cfg.game) == 2

    scores = {"champion": [1.0, 1.0], "candidate": [0.0, 1.0]}
    monkeypatch.setattr(gtr, "evaluate_gtr_model", _fake_gtr_eval(scores))
    ok = gtr.nightly_evaluate(cfg, tmp_path / "n1")
    assert ok["model_name"] == "odysseus-gtr-numberline" and ok["metric"] == "mean_return"
    assert not ok["regressed"] and set(ok["evaluated"]) == {"champion", "candidate"}
    assert ok["recorded"] == pytest.approx(1.0) and ok["current"] == pytest.approx(1.0)

    scores["champion"] = [0.0, 0.5]
    bad = gtr.nightly_evaluate(cfg, tmp_path / "n2")
    assert bad["regressed"] and bad["current"] == pytest.approx(0.25)
    # within a wider margin it is not a regression
    assert not gtr.nightly_evaluate(cfg, tmp_path / "n3", margin=0.9)["regressed"]
    history = registry.client.get_metric_history(bad["mlflow_run_id"], "champion_mean")
    reports = registry.client.list_artifacts(bad["mlflow_run_id"], "reports/n2/champion")
    assert [a.path for a in reports] == ["reports/n2/champion/report.md"]  # logged each night
    assert sorted((m.step, m.value) for m in history) == [(0, 1.0), (1, 0.25), (2, 0.25)]


def test_espo_nightly_compares_the_champions_step_sr_with_its_recorded_one(
    tmp_path: Path, monkeypatch
) -> None:
    from odyssey_core.recipes.espo import pipeline as espo
    from odyssey_core.registry.models import ModelRegistry

    cfg = espo.load_espo_pipeline_config("tiny", {"run_dir": str(tmp_path / "run")})
    registry = ModelRegistry(cfg.mlflow_uri)
    registry.register_checkpoint("file:///ckpt/a", cfg.game, metrics={"eval.step_sr": 0.6})
    registry.promote(cfg.game, [0.6, 0.7, 0.5], base_scores=[0.0, 0.1, 0.0])
    step_sr = {"champion": 0.6}
    seen: list[tuple[str, Path]] = []

    def fake(cfg: Any, model_ref: str, label: str, dataset: Path, out_dir: Path):
        assert (dataset / "episodes.jsonl").is_file()  # the pipeline's own data stage
        seen.append((label, out_dir))
        report = out_dir / "report" / "report.md"  # where the real one writes it
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(f"# {label}\n")
        return {
            "summary": {"step_sr": step_sr[label]},
            "scores": {"scores": [step_sr[label]]},
            "report_markdown": str(report),
        }

    monkeypatch.setattr(espo, "evaluate_espo_model", fake)
    ok = espo.nightly_evaluate(cfg, tmp_path / "n1")
    assert ok["model_name"] == "odysseus-espo-all-tiny" and ok["metric"] == "step_sr"
    assert not ok["regressed"] and ok["current"] == pytest.approx(0.6)
    step_sr["champion"] = 0.2
    bad = espo.nightly_evaluate(cfg, tmp_path / "n2")
    assert bad["regressed"] and bad["recorded"] == pytest.approx(0.6)
    assert [label for label, _ in seen] == ["champion", "champion"]


def test_the_flow_emits_the_regression_event_for_gtr(monkeypatch) -> None:
    result = {
        "model_name": "odysseus-gtr-points24",
        "metric": "mean_return",
        "champion": 3,
        "recorded": 4.0,
        "current": 1.5,
        "margin": 0.0,
        "regressed": True,
        "evaluated": {"champion": {"version": 3, "mean": 1.5, "inference": None}},
    }
    calls: list[tuple] = []
    monkeypatch.setattr(nightly, "nightly_task", lambda *args: calls.append(args) or result)
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(nightly, "emit_event", lambda **kw: events.append(kw))
    with pytest.raises(nightly.ChampionRegressedError, match=r"mean return 1\.5"):
        nightly.nightly_eval_flow.fn(preset="points24", recipe="gtr", margin=0.5)
    assert calls == [("gtr", "points24", None, 0.5)]
    (event,) = events
    assert event["event"] == nightly.REGRESSION_EVENT
    assert event["resource"]["prefect.resource.id"] == "odyssey.model.odysseus-gtr-points24"
    assert event["payload"] == {
        "recorded": 4.0,
        "current": 1.5,
        "margin": 0.0,
        "champion": 3,
        "model_name": "odysseus-gtr-points24",
        "metric": "mean_return",
        "recipe": "gtr",
        "preset": "points24",
    }


def test_a_nightly_deployment_for_every_registered_model() -> None:
    from odyssey_core.recipe import RECIPES
    from odyssey_core.registry.models import ModelRegistry

    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    nightlies = [d for d in deployments if d["entrypoint"] == "flows/nightly.py:nightly_eval_flow"]
    registry = ModelRegistry("sqlite:///:memory:")
    models = {}
    for d in nightlies:
        params = d["parameters"]
        cfg = RECIPES.get(params["recipe"]).load_pipeline(params["preset"], params.get("overrides"))
        models[registry.model_name(cfg.game)] = d
        assert d["schedules"] and d["schedules"][0]["cron"], d["name"]
    assert set(models) == {
        "odysseus-odland",
        "odysseus-mario",
        "odysseus-gtr-points24",
        "odysseus-gtr-numberline",
        "odysseus-espo-all-tiny",
        "odysseus-espo-smartspot",
    }
    # the training deployment of each model and its nightly run on the same pool
    trainers = {
        (d["entrypoint"], d["parameters"]["preset"]): d["work_pool"]["name"]
        for d in deployments
        if d["entrypoint"] != "flows/nightly.py:nightly_eval_flow"
    }
    entry = {
        "odysseus": "flows/odysseus.py:train_odysseus_flow",
        "gtr": "flows/gtr.py:train_gtr_flow",
        "espo": "flows/espo.py:train_espo_flow",
    }
    for name, d in models.items():
        params = d["parameters"]
        trained_on = trainers.get((entry[params["recipe"]], params["preset"]))
        assert trained_on in (None, d["work_pool"]["name"]), name
    assert models["odysseus-mario"]["work_pool"]["name"] == "odyssey-gpu"
    assert models["odysseus-gtr-points24"]["work_pool"]["name"] == "odyssey-gpu"
