"""The Odysseus training flows: each runs the pipeline
(:mod:`odyssey_core.recipes.odysseus.pipeline`) up to its stage (``curate-dataset``: the five
curation tasks, record walkthroughs -> sample frames -> annotate -> validate -> build dataset).
Finished stages are skipped (Prefect's input cache, then the stage's done marker), so
``rl-train`` after ``sft`` pays only for RL, and rerunning a failed ``train-odysseus`` resumes
where it stopped.

    python -m flows.odysseus --preset demo     # what `make demo` runs
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from odyssey_core.recipes.odysseus.pipeline import STAGES, PipelineConfig, load_pipeline_config
from odyssey_core.stages import parent_run, results_table
from tasks.common import post_report
from tasks.odysseus import (
    annotate_task,
    build_dataset_task,
    evaluate_task,
    promote_task,
    record_walkthroughs_task,
    rl_task,
    sample_frames_task,
    sft_task,
    validate_task,
)

STAGE_ORDER = STAGES  # record, sample, annotate, validate, build-dataset, sft, rl, ...


def _chain(cfg: PipelineConfig, parent: str, until: str) -> dict[str, dict[str, Any]]:
    """Run the stages in order up to and including ``until``; each task gets only the URIs of
    the stages it reads from."""
    stop = STAGE_ORDER.index(until)
    results: dict[str, dict[str, Any]] = {}

    def wanted(stage: str) -> bool:
        return STAGE_ORDER.index(stage) <= stop

    results["record"] = record_walkthroughs_task(cfg, parent_run_id=parent)
    walkthroughs = results["record"]["walkthroughs_uri"]
    if wanted("sample"):
        results["sample"] = sample_frames_task(cfg, walkthroughs, parent_run_id=parent)
    if wanted("annotate"):
        samples = results["sample"]["samples_uri"]
        results["annotate"] = annotate_task(cfg, samples, parent_run_id=parent)
    if wanted("validate"):
        annotations = results["annotate"]["annotations_uri"]
        results["validate"] = validate_task(cfg, annotations, samples, parent_run_id=parent)
    if wanted("build-dataset"):
        validation = results["validate"]["validation_uri"]
        results["build-dataset"] = build_dataset_task(
            cfg, validation, samples, annotations, parent_run_id=parent
        )
    if wanted("sft"):
        dataset = results["build-dataset"]["dataset_uri"]
        results["sft"] = sft_task(cfg, dataset, parent_run_id=parent)
    if wanted("rl"):
        results["rl"] = rl_task(cfg, results["sft"]["model_uri"], parent_run_id=parent)
    if wanted("evaluate"):
        checkpoint = results["rl"]["checkpoint_uri"]
        results["evaluate"] = evaluate_task(  # base, sft and candidate on the same episodes
            cfg,
            checkpoint,
            sft_model_uri=results["sft"]["model_uri"],
            base_model_uri=results["sft"]["base_model_uri"],
            training_run_id=results["rl"].get("mlflow_run_id"),
            parent_run_id=parent,
        )
        post_report(results["evaluate"], f"evaluation-{cfg.name}", checkpoint)  # Table-2 style
    if wanted("promote"):
        results["promote"] = promote_task(
            cfg,
            results["rl"]["checkpoint_uri"],
            results["evaluate"],
            results["sft"]["base_model_uri"],
            parent_run_id=parent,
        )
    return results


def _run(name: str, preset: str, overrides: dict[str, Any] | None, until: str) -> dict[str, Any]:
    cfg = load_pipeline_config(preset, overrides)
    with parent_run(cfg, name) as parent:
        results = _chain(cfg, parent, until)
    print(f"{name} ({cfg.run_key}):\n{results_table(results)}")
    return results


@flow(name="curate-dataset", log_prints=True)
def curate_flow(preset: str = "tiny", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return _run("curate-dataset", preset, overrides, "build-dataset")


@flow(name="sft", log_prints=True)
def sft_flow(preset: str = "tiny", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return _run("sft", preset, overrides, "sft")


@flow(name="rl-train", log_prints=True)
def rl_flow(preset: str = "tiny", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return _run("rl-train", preset, overrides, "rl")


@flow(name="evaluate", log_prints=True)
def evaluate_flow(preset: str = "tiny", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return _run("evaluate", preset, overrides, "evaluate")


@flow(name="promote", log_prints=True)
def promote_flow(preset: str = "tiny", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return _run("promote", preset, overrides, "promote")


@flow(name="train-odysseus", log_prints=True)
def train_odysseus_flow(
    preset: str = "tiny", overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The whole chain: the five curation stages -> SFT -> RL -> evaluate -> promote."""
    return _run("train-odysseus", preset, overrides, "promote")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Run the train-odysseus flow on a preset.")
    parser.add_argument(
        "--preset", default="tiny", help="a name under configs/odysseus/pipeline/ or a path"
    )
    train_odysseus_flow(preset=parser.parse_args().preset)
