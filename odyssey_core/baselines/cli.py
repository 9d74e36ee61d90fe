"""``odyssey baseline ...``: the classical deep-RL baselines (paper Appendix D)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from odyssey_core.config import config_dir


def _default_preset() -> Path:
    return config_dir() / "baselines" / "sb3_ppo.yaml"


def _split_levels(values: tuple[str, ...]) -> list[str]:
    # Accept both `--levels a --levels b` and `--levels a,b`.
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


@click.group("baseline", context_settings={"help_option_names": ["-h", "--help"]})
def baseline_group() -> None:
    """Classical deep-RL baselines trained from scratch (paper Appendix D)."""


@baseline_group.command("sb3-ppo")
@click.option(
    "--preset",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="baseline preset YAML (default: configs/baselines/sb3_ppo.yaml, Table 6)",
)
@click.option("--levels", multiple=True, help="env names, e.g. odland-1-1 (repeat or comma-join)")
@click.option("--timesteps", type=int, default=None, help="training samples (default: preset's)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--action-space",
    type=click.Choice(["original", "engineered"]),
    default=None,
    help="22 legal actions or Table 5's 8 (default: preset's)",
)
@click.option("--n-envs", type=int, default=None, help="parallel envs (default: preset's)")
@click.option("--seed", type=int, default=None)
@click.option("--eval-every", type=int, default=None, help="samples between evaluations, 0: off")
@click.option(
    "--eval-episodes",
    type=int,
    default=None,
    help="episodes per level in the evaluations (default: preset's)",
)
def sb3_ppo_command(
    preset: Path | None,
    levels: tuple[str, ...],
    timesteps: int | None,
    out_dir: Path,
    action_space: str | None,
    n_envs: int | None,
    seed: int | None,
    eval_every: int | None,
    eval_episodes: int | None,
) -> None:
    """Train SB3 PPO (CnnPolicy) on the levels, then evaluate it on each of them."""
    from odyssey_core.baselines.sb3_ppo import (
        evaluate_sb3,
        format_table,
        load_sb3_ppo_settings,
        train_sb3_ppo,
        write_results,
    )
    from odyssey_core.envs.pyboy.rom import RomError

    overrides: dict[str, Any] = {}
    if levels:
        overrides["levels"] = _split_levels(levels)
    if timesteps is not None:
        overrides["total_timesteps"] = timesteps
    if n_envs is not None:
        overrides["n_envs"] = n_envs
    if seed is not None:
        overrides["seed"] = seed
    if action_space is not None:
        overrides["env"] = {"action_space": action_space}
    evaluation = {"every": eval_every, "episodes": eval_episodes}
    if any(v is not None for v in evaluation.values()):
        overrides["eval"] = {k: v for k, v in evaluation.items() if v is not None}
    try:
        settings = load_sb3_ppo_settings(preset or _default_preset(), overrides)
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None

    click.echo(
        f"PPO/CnnPolicy on {', '.join(settings.levels)}: {settings.total_timesteps} samples, "
        f"{settings.n_envs} envs x {settings.n_steps} steps, "
        f"{settings.env.action_space} actions -> {out_dir}"
    )
    if settings.task is not None:
        starts = ", ".join(f"{k} from {v}" for k, v in settings.start_states.items())
        click.echo(
            f"the task of {settings.task}: {settings.env.game.max_turns} turns"
            + (f", {starts}" if starts else "")
        )
    try:
        model_path = train_sb3_ppo(settings, out_dir, log=click.echo)
        results = evaluate_sb3(
            model_path, settings.levels, settings.eval.episodes, settings=settings
        )
    except (RomError, KeyError) as err:
        raise click.ClickException(str(err)) from None
    write_results(results, out_dir / "evaluation.json")
    click.echo(f"model: {model_path}")
    click.echo(format_table(results))
