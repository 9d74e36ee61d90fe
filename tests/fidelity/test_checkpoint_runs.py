"""The real-checkpoint runs the GTR and ESPO reports name: each command is a deployment of
prefect.yaml whose parameters load into the pipeline and training settings a GPU worker would
run, each run in its own folder and registered model; reports carry them and are checked."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from odyssey_core.fidelity import check_report, write_report
from odyssey_core.fidelity.checkpoint_runs import CheckpointRun, DeploymentRun
from odyssey_core.fidelity.espo import ESPO_CHECKPOINT, espo_checkpoint_run
from odyssey_core.fidelity.gtr import GTR_CHECKPOINT, gtr_checkpoint_run
from odyssey_core.fidelity.report import CHECKPOINT_RUNS_TITLE, Finding, Headroom, report_for
from odyssey_core.fidelity.run import FidelityRun
from odyssey_core.fidelity.stats import Verdict
from odyssey_core.recipe import RECIPES
from odyssey_core.recipes.espo.pipeline import load_espo_pipeline_config
from odyssey_core.recipes.gtr.pipeline import BASE_MODEL_SETTING, load_gtr_pipeline_config
from odyssey_core.rl.train_settings import BaseModelRequiredError

ROOT = Path(__file__).resolve().parents[2]
FLOW_FILES = {"train-espo": "flows/espo.py", "train-gtr": "flows/gtr.py"}


def _deployment_parameters(deployment: str) -> dict[str, Any]:
    """The parameters prefect.yaml gives ``<flow>/<deployment>`` (its entrypoint in the
    flow's file)."""
    flow, name = deployment.split("/")
    for entry in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]:
        if entry["name"] == name and entry["entrypoint"].startswith(FLOW_FILES[flow] + ":"):
            return dict(entry["parameters"])
    raise AssertionError(f"prefect.yaml has no deployment {deployment}")


def _settings(deployment: str, params: dict[str, Any]) -> tuple[Any, Any]:
    """The pipeline config and the training settings one run's parameters load into."""
    merged = {**_deployment_parameters(deployment), **params}  # --params replace by name
    if deployment.startswith("train-espo/"):
        cfg = load_espo_pipeline_config(
            merged["preset"], merged["overrides"], variant=merged["variant"]
        )
        recipe = "espo"
    else:
        cfg = load_gtr_pipeline_config(merged["preset"], merged["overrides"])
        recipe = "gtr"
    return cfg, RECIPES.get(recipe).load_settings(cfg.train.preset, cfg.train.overrides)


@pytest.mark.parametrize(
    ("plan", "checkpoint"),
    [(espo_checkpoint_run(), ESPO_CHECKPOINT), (gtr_checkpoint_run(), GTR_CHECKPOINT)],
    ids=["espo", "gtr"],
)
def test_every_command_loads_the_run_a_gpu_worker_would_start(
    plan: CheckpointRun, checkpoint: str
) -> None:
    assert len(plan.runs) == len({r.arm for r in plan.runs}) * 3  # every arm at 3 seeds
    folders, games = set(), set()
    for run, command in zip(plan.runs, plan.commands, strict=True):
        words = shlex.split(command)
        assert words[:4] == ["prefect", "deployment", "run", plan.deployment]
        assert words[4] == "--params" and json.loads(words[5]) == run.params
        cfg, settings = _settings(plan.deployment, dict(run.params))
        assert str(settings.model.path) == checkpoint and settings.seed == run.seed
        assert settings.model.device == "cuda"  # the as-published preset, not the tiny one
        folders.add(cfg.run_dir)
        games.add(cfg.game)
        if plan.deployment.startswith("train-gtr/"):
            # a paper preset: the path is set, and the run stops before any work until the
            # user's checkpoint folder is there
            with pytest.raises(BaseModelRequiredError, match=f"'{checkpoint}' is not a folder"):
                settings.check_base_model(BASE_MODEL_SETTING)
            assert (settings.rollout.corrector == "none") == (run.arm == "rl4vlm")
        else:
            assert cfg.train.enabled == (run.arm != "sft_only")
            assert (settings.advantage.w == 0) == (run.arm == "no_cout")
    # no two runs share a run folder (stage cache) or a registered model (promotion gate)
    assert len(folders) == len(games) == len(plan.runs)


def test_the_decided_claims_are_the_reports_claims_or_the_papers_game() -> None:
    espo_claims = set(espo_checkpoint_run().decides)
    assert "ESPO beats vanilla GRPO from the same cold start (Step SR)" in espo_claims
    gtr_claims = gtr_checkpoint_run().decides
    assert all(c.startswith("cards-points24: ") for c in gtr_claims)  # the paper's Table 1 game


def test_a_report_states_its_checkpoint_runs_and_the_check_reads_them(tmp_path: Path) -> None:
    plan = CheckpointRun.per_arm_and_seed(
        "train-espo/travel",
        decides=("a claim",),
        needs="a prior",
        reads="a number",
        arms={"espo": {"variant": "espo", "overrides": {"sft": {"enabled": False}}}},
        seeds=2,
        checkpoint="/models/m",
        run_dir="out/x",
        game="g",
    )
    assert plan.runs == tuple(
        DeploymentRun(
            "espo",
            seed,
            {
                "variant": "espo",
                "overrides": {
                    "run_dir": f"out/x-espo-s{seed}",
                    "game": f"g-espo-s{seed}",
                    "sft": {"enabled": False, "settings": {"seed": seed}},
                    "train": {"overrides": {"seed": seed, "model": {"path": "/models/m"}}},
                },
            },
        )
        for seed in (0, 1)
    )
    run = FidelityRun(out_dir=tmp_path, work_dir=tmp_path / "work", seeds=3)
    report = report_for(
        run,
        "espo",
        title="t",
        paper="p",
        setup=["s"],
        findings=[Finding("a claim", "Fig. 1", "1 vs 0", Verdict.CANNOT_TELL)],
        headroom=[Headroom("m", 0.5, 0.0, 1.0)],
        checkpoint_runs=[plan],
    )
    write_report(report, tmp_path)
    assert check_report(tmp_path) == []
    markdown = (tmp_path / "report.md").read_text()
    assert f"## {CHECKPOINT_RUNS_TITLE}" in markdown
    assert all(command in markdown for command in plan.commands)
    page = (tmp_path / "report.html").read_text()
    assert CHECKPOINT_RUNS_TITLE in page and "train-espo/travel" in page
    (saved,) = json.loads((tmp_path / "report.json").read_text())["checkpoint_runs"]
    assert saved["commands"] == plan.commands and saved["decides"] == ["a claim"]

    (tmp_path / "report.md").write_text(markdown.replace(plan.commands[1], "(left out)"))
    assert check_report(tmp_path) == [f"report.md does not give the command {plan.commands[1]!r}"]
