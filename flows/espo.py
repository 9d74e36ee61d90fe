"""`train-espo`: generate (or load) the demonstrations -> SFT cold start -> ESPO -> evaluation ->
registration with the promotion gate (:mod:`odyssey_core.recipes.espo.pipeline`).

Finished stages are skipped (Prefect's input cache, then the stage's done marker), so a rerun of
a failed flow run resumes where it stopped; training itself resumes from its last checkpoint.
A paper variant (``sft_only``, ``all_sft``, ``vanilla_grpo``, ``no_cout``, ``no_sft``, ``no_all``,
``no_phi``, ``no_psi``) is the ``variant`` parameter.
"""

from __future__ import annotations

import argparse
from typing import Any

from prefect import flow

from odyssey_core.recipes.espo.pipeline import load_espo_pipeline_config
from odyssey_core.stages import parent_run, results_table
from tasks.common import post_report
from tasks.espo import (
    espo_data_task,
    espo_evaluate_task,
    espo_register_task,
    espo_sft_task,
    espo_train_task,
)


@flow(name="train-espo", log_prints=True)
def train_espo_flow(
    preset: str = "tiny", overrides: dict[str, Any] | None = None, variant: str | None = None
) -> dict[str, Any]:
    """Train (configs/espo/pipeline/<preset>.yaml, with a paper ``variant`` laid over it),
    evaluate, register and gate."""
    cfg = load_espo_pipeline_config(preset, overrides, variant=variant)
    results: dict[str, dict[str, Any]] = {}
    with parent_run(cfg, "train-espo") as parent:
        data = results["data"] = espo_data_task(cfg, parent_run_id=parent)
        sft = None
        if cfg.sft.enabled:
            sft = results["sft"] = espo_sft_task(cfg, data, parent_run_id=parent)
        if cfg.train.enabled:
            results["train"] = espo_train_task(cfg, data, sft, parent_run_id=parent)
            checkpoint = results["train"]["checkpoint_uri"]
            base = results["train"]["base_model"]
            training_run = results["train"]["mlflow_run_id"]
        elif sft is not None:  # the SFT-only variants register the SFT model
            checkpoint, base = sft["model_uri"], sft["base_model_uri"]
            training_run = None
        else:
            raise ValueError("sft.enabled and train.enabled are both false: nothing to train")
        results["evaluate"] = espo_evaluate_task(
            cfg, data, checkpoint, training_run_id=training_run, parent_run_id=parent
        )
        # EleAcc / Op F1 / Step SR / RecAcc with intervals and the trivial baselines
        post_report(results["evaluate"], f"espo-evaluation-{cfg.name}", checkpoint)
        results["register"] = espo_register_task(
            cfg, data, checkpoint, results["evaluate"], base, parent_run_id=parent
        )
    print(f"train-espo ({cfg.run_key}):\n{results_table(results)}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=train_espo_flow.__doc__)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--variant", default=None)
    args = parser.parse_args()
    train_espo_flow(preset=args.preset, variant=args.variant)
