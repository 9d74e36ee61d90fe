"""``odyssey sft``: supervised fine-tuning on a curated dataset folder (one process, or every
process of a ``torchrun`` / ``deepspeed`` launch)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from odyssey_core.launch import launched_run_options

F = TypeVar("F", bound=Callable[..., Any])


def required_folder_option(flag: str, dest: str, help: str) -> Callable[[F], F]:
    """A required option naming a folder that exists (click says which one is missing)."""
    folder = click.Path(exists=True, file_okay=False, path_type=Path)
    return click.option(flag, dest, required=True, type=folder, help=help)


@click.command("sft")
@click.option("--preset", default="tiny", show_default=True, help="configs/sft/<name>.yaml or path")
@required_folder_option("--dataset", "dataset_dir", "dataset folder (data.parquet + frames/)")
@required_folder_option("--model", "model_dir", "base checkpoint folder")
@launched_run_options
@click.option("--max-steps", type=int, default=None, help="override the preset's max_steps")
@click.option("--seed", type=int, default=None, help="override the preset's seed")
@click.option(
    "--system-prompts",
    "system_prompts_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="JSON {game: system prompt} replacing those games' registered prompts",
)
def sft_command(
    preset: str,
    dataset_dir: Path,
    model_dir: Path,
    out_dir: Path,
    resume: bool,
    max_steps: int | None,
    seed: int | None,
    system_prompts_file: Path | None,
) -> None:
    """Fine-tune MODEL on the teacher answers of DATASET; checkpoints and metrics go to OUT."""
    from odyssey_core.rl.distributed import leave_process_group
    from odyssey_core.sft.settings import load_sft_settings
    from odyssey_core.sft.trainer import SFTTrainer

    overrides: dict = {}
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    if seed is not None:
        overrides["seed"] = seed
    try:
        settings = load_sft_settings(preset, overrides)
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None

    def echo(record: dict) -> None:
        click.echo(json.dumps(record))

    prompts = None
    if system_prompts_file is not None:
        prompts = json.loads(system_prompts_file.read_text())
    trainer = SFTTrainer(
        settings,
        dataset_dir,
        model_dir,
        out_dir,
        resume=resume,
        callbacks=[echo],
        system_prompts=prompts,
    )
    result = trainer.train()
    leave_process_group()
    click.echo(f"done: {result.steps} steps, final weights in {result.final_dir}")
