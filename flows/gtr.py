"""`train-gtr`: (SFT initialisation ->) GTR training -> evaluation -> registration with the
promotion gate (:mod:`odyssey_core.recipes.gtr.pipeline`).

Finished stages are skipped (Prefect's input cache, then the stage's done marker), so a rerun of
a failed flow run resumes where it stopped; training itself resumes from its last checkpoint.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from odyssey_core.recipes.gtr.pipeline import load_gtr_pipeline_config
from odyssey_core.stages import parent_run, results_table
from tasks.common import post_report
from tasks.gtr import gtr_evaluate_task, gtr_register_task, gtr_sft_task, gtr_train_task


@flow(name="train-gtr", log_prints=True)
def train_gtr_flow(preset: str = "tiny", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train (configs/gtr/pipeline/<preset>.yaml), evaluate, register and gate."""
    cfg = load_gtr_pipeline_config(preset, overrides)
    results: dict[str, dict[str, Any]] = {}
    with parent_run(cfg, "train-gtr") as parent:
        if cfg.sft.enabled:  # the one-epoch SFT initialisation, then RL from its model
            results["sft"] = gtr_sft_task(cfg, parent_run_id=parent)
        results["train"] = gtr_train_task(cfg, parent_run_id=parent)
        checkpoint = results["train"]["checkpoint_uri"]
        results["evaluate"] = gtr_evaluate_task(cfg, checkpoint, parent_run_id=parent)
        # success rate, return and collapse metrics on the flow run's page
        post_report(results["evaluate"], f"gtr-evaluation-{cfg.name}", checkpoint)
        results["register"] = gtr_register_task(
            cfg,
            checkpoint,
            results["evaluate"],
            results["train"]["base_model"],
            parent_run_id=parent,
        )
    print(f"train-gtr ({cfg.run_key}):\n{results_table(results)}")
    return results


if __name__ == "__main__":
    train_gtr_flow()
