"""``odyssey model ...``: commands for policy checkpoints."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("model", context_settings={"help_option_names": ["-h", "--help"]})
def model_group() -> None:
    """Create and inspect policy model checkpoints."""


@model_group.command("init-tiny")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="weight and corpus seed")
@click.option(
    "--zero-mean-patches",
    is_flag=True,
    help="zero-mean patch filters, so a frozen random vision tower tells frames apart",
)
def init_tiny_command(out_dir: Path, seed: int, zero_mean_patches: bool) -> None:
    """Write a tiny random Qwen3-VL checkpoint to OUT_DIR (offline, a few seconds)."""
    from odyssey_core.models.tiny import build_tiny_model

    path = build_tiny_model(out_dir, seed=seed, zero_mean_patches=zero_mean_patches)
    n_files = sum(1 for p in path.iterdir() if p.is_file())
    click.echo(f"tiny Qwen3-VL checkpoint written to {path} ({n_files} files)")
