"""The ``odyssey`` command.

``odyssey train`` and ``odyssey sft`` run as one process, or as every process of a
distributed launcher: ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) or
``deepspeed`` (which also passes ``--local_rank N``, accepted before or after the command
name). Under a launcher each process joins the process group before it builds anything, so
that its model lands on its own device.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from odyssey_core.envs.pyboy.rom import RomError
from odyssey_core.launch import launched_run_options, local_rank_option
from odyssey_core.recipe import RECIPES


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@local_rank_option
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
    """Play one episode of ENV_NAME (e.g. odland-1-1, persona-hotel) and optionally write a
    video; on a persona app the expert is the demonstrator, driving the app live."""
    from odyssey_core.agents import make_agent
    from odyssey_core.config import load_config
    from odyssey_core.envs import make_env
    from odyssey_core.eval.episode import play_episode

    overrides: dict = {}
    if env_name.startswith("persona"):  # the app driven live by the agent's own actions
        overrides["mode"] = "online"
        if max_turns is not None:
            overrides["max_steps"] = max_turns
        if agent_name == "expert":  # the demonstrator plays it
            agent_name = "persona-expert"
    elif not env_name.startswith(("cards-", "alfworld")):  # a Game Boy level
        overrides["config"] = load_config(preset).env
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


#: what each step's stdout line shows
_ECHO_KEYS = (
    "all/progress_mean",
    "rollout/episode_return",
    "critic/explained_variance",
    "actor/pg_loss",
    "time/step_s",
)


@main.command("train")
@click.option(
    "--recipe",
    "recipe_name",
    type=click.Choice(RECIPES.names()),
    default="odysseus",
    show_default=True,
    help="which recipe's preset and trainer",
)
@click.option(
    "--preset",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="preset YAML (may `inherit:` another); default configs/<recipe>/tiny.yaml",
)
@launched_run_options
@click.option("--steps", type=int, default=None, help="total training steps (default: preset's)")
@click.option("--seed", type=int, default=None, help="override the preset's seed")
@click.option("--threads", type=int, default=None, help="torch intra-op threads (CPU runs)")
def train_command(
    recipe_name: str,
    preset: Path | None,
    out_dir: Path,
    resume: bool,
    steps: int | None,
    seed: int | None,
    threads: int | None,
) -> None:
    """Train a policy with a recipe's RL trainer; one JSON line per step goes to stdout (rank
    0). Under a launcher every process runs this same command."""
    import torch

    from odyssey_core.rl.distributed import (
        barrier,
        join_launched_world,
        leave_process_group,
        rank_device,
    )
    from odyssey_core.rl.policy import resolve_base_model

    if threads is not None:
        torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    recipe = RECIPES.get(recipe_name)
    overrides: dict[str, Any] = {}
    if "out_dir" in recipe.settings_type.model_fields:  # a run records where it ran
        overrides["out_dir"] = str(out_dir)
    if seed is not None:
        overrides["seed"] = seed
    if steps is not None:
        overrides["steps"] = steps
    try:
        settings = recipe.load_settings(preset or recipe.default_preset, overrides)
        recipe.check(settings)
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    device = rank_device(settings.model.device)  # the launcher's LOCAL_RANK picks the GPU
    world = join_launched_world(device)
    settings = settings.model_copy(
        update={"model": settings.model.model_copy(update={"device": device})}
    )
    if world.is_main:  # made once, before any rank reads it: `model.path: null`'s tiny model,
        resolve_base_model(settings.model, out_dir)  # and what the recipe prepares
        if recipe.prepare is not None:
            recipe.prepare(settings, out_dir)
    barrier()

    def echo(step: int, metrics: dict[str, float]) -> None:
        shown = {k: metrics[k] for k in _ECHO_KEYS if k in metrics}
        click.echo(json.dumps({"step": step, **shown}))

    trainer = recipe.build_trainer(settings, out_dir, resume=resume, callbacks=[echo])
    try:
        trainer.train()
    finally:
        trainer.close()
    leave_process_group()


def _attach_groups() -> None:
    from odyssey_core.baselines.cli import baseline_group
    from odyssey_core.data.cli import curate_group
    from odyssey_core.eval.cli import eval_command
    from odyssey_core.eval.scenario_cli import scenario_group
    from odyssey_core.fidelity.cli import bench_group
    from odyssey_core.models.cli import model_group
    from odyssey_core.recipes.espo.cli import espo_group
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
    main.add_command(espo_group, "espo")
    main.add_command(bench_group, "bench")
    main.add_command(scenario_group, "scenario")


_attach_groups()

if __name__ == "__main__":
    sys.exit(main())
