"""``odyssey train``: RL on Game Boy levels from a preset in ``configs/odysseus/``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click


@click.command("train")
@click.option(
    "--preset",
    default="configs/odysseus/tiny.yaml",
    show_default=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="RL preset YAML (may `inherit:` another)",
)
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path))
@click.option("--resume", is_flag=True, help="continue from <out>/checkpoints/latest")
@click.option("--steps", type=int, default=None, help="total training steps (default: preset's)")
@click.option("--seed", type=int, default=None, help="override the preset's seed")
@click.option("--threads", type=int, default=None, help="torch intra-op threads (CPU runs)")
def train_command(
    preset: Path,
    out_dir: Path,
    resume: bool,
    steps: int | None,
    seed: int | None,
    threads: int | None,
) -> None:
    """Train a policy with the Odysseus recipe; one JSON line per step goes to stdout."""
    import torch

    from odyssey_core.recipes.odysseus.settings import load_train_settings
    from odyssey_core.recipes.odysseus.train import build_trainer

    if threads is not None:
        torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    overrides: dict = {"out_dir": str(out_dir)}
    if seed is not None:
        overrides["seed"] = seed
    if steps is not None:
        overrides["steps"] = steps
    try:
        settings = load_train_settings(preset, overrides)
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None

    def echo(step: int, metrics: dict[str, float]) -> None:
        keys = ("all/progress_mean", "critic/explained_variance", "actor/pg_loss", "time/step_s")
        click.echo(json.dumps({"step": step, **{k: metrics.get(k) for k in keys}}))

    trainer = build_trainer(settings, out_dir, resume=resume, callbacks=[echo])
    try:
        trainer.train()
    finally:
        trainer.close()
