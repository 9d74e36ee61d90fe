"""The ``odyssey`` command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from odyssey_core.envs.pyboy.rom import RomError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Odyssey: train VLM agents with RL on long-horizon visual tasks."""


@main.command("envs")
def list_envs_command() -> None:
    """List the registered environments."""
    from odyssey_core.envs import list_envs

    for spec in list_envs():
        click.echo(f"{spec.name:14s} {spec.description}")


@main.command("play")
@click.argument("env_name")
@click.option(
    "--agent",
    "agent_name",
    default="expert",
    show_default=True,
    type=click.Choice(["expert", "random"]),
    help="who plays",
)
@click.option(
    "--video",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write an MP4 of the episode here",
)
@click.option("--max-turns", type=int, default=None, help="turn limit (default: the preset's)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--preset", default="tiny", show_default=True, help="config preset name or YAML path")
@click.option(
    "--rom",
    "rom_path",
    type=click.Path(path_type=Path),
    default=None,
    help="ROM path (Super Mario Land: your own file)",
)
def play_command(
    env_name: str,
    agent_name: str,
    video: Path | None,
    max_turns: int | None,
    seed: int,
    preset: str,
    rom_path: Path | None,
) -> None:
    """Play one episode of ENV_NAME (e.g. odland-1-1) and optionally write a video."""
    from odyssey_core.agents import make_agent
    from odyssey_core.config import load_config
    from odyssey_core.envs import make_env
    from odyssey_core.eval.episode import play_episode

    config = load_config(preset)
    overrides: dict = {"config": config.env}
    if max_turns is not None:
        overrides["max_turns"] = max_turns
    if rom_path is not None:
        overrides["rom_path"] = rom_path
    try:
        env = make_env(env_name, **overrides)
    except (RomError, ValueError, KeyError) as err:
        raise click.ClickException(str(err)) from None
    agent = make_agent(agent_name, **({"seed": seed} if agent_name == "random" else {}))
    try:
        result = play_episode(env, agent, seed=seed, video_path=video, show_progress=True)
    finally:
        env.close()
    click.echo(result.summary())
    if result.video:
        click.echo(f"video: {result.video}")


def _attach_groups() -> None:
    from odyssey_core.baselines.cli import baseline_group
    from odyssey_core.data.cli import curate_group
    from odyssey_core.eval.cli import eval_command
    from odyssey_core.models.cli import model_group
    from odyssey_core.recipes.odysseus.cli import train_command
    from odyssey_core.registry.cli import registry_group
    from odyssey_core.serve.cli import serve_command
    from odyssey_core.sft.cli import sft_command

    main.add_command(model_group, "model")
    main.add_command(serve_command, "serve")
    main.add_command(baseline_group, "baseline")
    main.add_command(eval_command, "eval")
    main.add_command(curate_group, "curate")
    main.add_command(sft_command, "sft")
    main.add_command(registry_group, "registry")
    main.add_command(train_command, "train")


_attach_groups()

if __name__ == "__main__":
    sys.exit(main())
