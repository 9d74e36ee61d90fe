"""``odyssey espo``: the personalized-GUI data and evaluation commands.

* ``odyssey espo generate OUT [--preset tiny|smartspot_like] [--seed N] [--drop-channel C]
  [--renderer fast|browser]``: a seeded SmartSpot-like dataset folder (the same seed gives the
  same bytes); ``browser`` draws every screen in headless Chromium instead of Pillow.
* ``odyssey espo load-smartspot IN OUT [--width 448 --height 896]``: SmartSpot-format records
  (:func:`~odyssey_core.envs.persona.dataset.load_smartspot`) as a dataset folder, screenshots
  resized and every point and box rescaled to the stored size.
* ``odyssey espo eval MODEL DATASET [--splits test] [--online]``: EleAcc / Op F1 / Step SR /
  RecAcc (and the named extras) with intervals, beside every baseline, as Markdown tables.
* ``odyssey espo eval --agent always_no|always_yes|first_item|random|oracle DATASET
  [--splits test] [--seed N]``: one label-only baseline
  (:data:`~odyssey_core.recipes.espo.metrics.BASELINE_AGENTS`) on every step of the splits,
  no model: a JSON summary on stdout, ``metrics`` keyed ``ele_acc``, ``op_f1``, ``step_sr``,
  ``rec_acc`` and the extras (None where undefined), ``intervals`` (the episode bootstrap),
  ``n_steps``, ``n_episodes``, and ``best_achievable_rec_acc`` (the ceiling of
  :func:`~odyssey_core.recipes.espo.evaluation.best_achievable_rec_acc`; the model report
  prints it under the tables).

Training runs through the ``train-espo`` flow (``python -m flows.espo --preset tiny``, or
``prefect deployment run train-espo/tiny``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["espo_group"]


@click.group("espo")
def espo_group() -> None:
    """ESPO's personalized GUI agents: generate or load data, evaluate a model."""


@espo_group.command("generate")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--preset", type=click.Choice(["tiny", "smartspot_like"]), default="tiny", show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--drop-channel", default=None, help="leave a channel out (medicine: the paper's 102 episodes)"
)
@click.option(
    "--renderer", type=click.Choice(["fast", "browser"]), default="fast", show_default=True
)
@click.option("--overwrite", is_flag=True, help="replace an existing dataset folder")
def generate_command(
    out: Path, preset: str, seed: int, drop_channel: str | None, renderer: str, overwrite: bool
) -> None:
    """Write a generated SmartSpot-like dataset to OUT."""
    from odyssey_core.envs.persona.dataset import generate_episodes, read_manifest, write_dataset

    try:
        episodes = generate_episodes(preset, seed, drop_channel=drop_channel)
        if renderer == "browser":
            from odyssey_core.envs.persona.browser import BrowserRenderer

            with BrowserRenderer() as browser:
                write_dataset(
                    out, episodes, renderer=browser, preset=preset, seed=seed, overwrite=overwrite
                )
        else:
            write_dataset(out, episodes, preset=preset, seed=seed, overwrite=overwrite)
    except (ValueError, FileExistsError, RuntimeError) as err:
        raise click.ClickException(str(err)) from None
    manifest = read_manifest(out)
    click.echo(
        f"{out}: {manifest['episodes']} episodes, {manifest['steps']} steps, splits "
        f"{manifest['splits']}, channels {manifest['channels']}"
    )
    click.echo(f"content hash {manifest['content_hash']}")


@espo_group.command("load-smartspot")
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--width", type=int, default=448, show_default=True, help="stored screen width")
@click.option("--height", type=int, default=896, show_default=True, help="stored screen height")
@click.option("--overwrite", is_flag=True)
def load_smartspot_command(
    source: Path, out: Path, width: int, height: int, overwrite: bool
) -> None:
    """Convert SmartSpot-format records in SOURCE into a dataset folder OUT."""
    from odyssey_core.envs.persona.dataset import load_smartspot, write_dataset

    try:
        episodes, images = load_smartspot(source, width, height)
        write_dataset(out, episodes, images=images, overwrite=overwrite)
    except (ValueError, FileExistsError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"{out}: {len(episodes)} episodes at {width} x {height}")


@espo_group.command("eval")
@click.argument(
    "paths",
    nargs=-1,
    metavar="[MODEL] DATASET",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "--agent",
    default=None,
    help="a label-only baseline to evaluate instead of a model (always_no, always_yes, "
    "first_item, random or oracle; give DATASET only): prints a JSON summary",
)
@click.option("--splits", default="test", show_default=True, help="comma-separated splits")
@click.option("--seed", type=int, default=0, show_default=True, help="bootstrap (and coin) seed")
@click.option("--resamples", type=int, default=2000, show_default=True, help="bootstrap draws")
@click.option("--online/--no-online", default=True, show_default=True, help="models only")
@click.option("--max-new-tokens", type=int, default=160, show_default=True)
@click.option("--history-window", type=int, default=None, help="as the model was trained")
@click.option("--image-size", type=(int, int), default=None, help="frame size the model sees")
@click.option("--device", default="cpu", show_default=True)
def eval_command(
    paths: tuple[Path, ...],
    agent: str | None,
    splits: str,
    seed: int,
    resamples: int,
    online: bool,
    max_new_tokens: int,
    history_window: int | None,
    image_size: tuple[int, int] | None,
    device: str,
) -> None:
    """Evaluate MODEL (a model folder) on DATASET, teacher-forced and live, beside the
    baselines; or, with --agent, one baseline without a model."""
    from odyssey_core.envs.persona.dataset import read_dataset
    from odyssey_core.recipes.espo.evaluation import best_achievable_rec_acc
    from odyssey_core.recipes.espo.metrics import (
        BASELINE_AGENTS,
        baseline_outcomes,
        evaluate_outcomes,
        metrics_table_markdown,
        trivial_baselines,
    )

    if agent is not None and agent not in BASELINE_AGENTS:
        raise click.BadParameter(
            f"{agent!r} is not a baseline; choose one of {', '.join(BASELINE_AGENTS)}",
            param_hint="--agent",
        )
    wanted = 1 if agent is not None else 2
    if len(paths) != wanted:
        usage = "--agent NAME DATASET" if agent is not None else "MODEL DATASET"
        raise click.UsageError(f"expected {usage}, got {len(paths)} path(s)")
    dataset = paths[-1]
    chosen_splits = [s.strip() for s in splits.split(",") if s.strip()]
    try:
        by_split = {split: read_dataset(dataset, split=split) for split in chosen_splits}
    except (ValueError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    episodes = [e for chosen in by_split.values() for e in chosen]
    if not episodes:
        raise click.ClickException(f"{dataset} has no episodes in the splits {splits}")

    if agent is not None:
        outcomes = baseline_outcomes(episodes, agent, seed)
        metrics = evaluate_outcomes(outcomes, episodes=episodes, seed=seed, resamples=resamples)
        summary = {
            "agent": agent,
            "dataset": str(dataset),
            "splits": [split for split, chosen in by_split.items() if chosen],
            "seed": seed,
            **metrics.summary(),
            "best_achievable_rec_acc": best_achievable_rec_acc(episodes).summary(),
        }
        click.echo(json.dumps(summary, indent=2))
        return

    from odyssey_core.policy.base import GenerationParams
    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.recipes.espo.evaluation import evaluate_offline, evaluate_online
    from odyssey_core.recipes.espo.prompts import ESPO_SYSTEM_PROMPT

    model = paths[0]
    policy = HFPolicy.for_evaluation(
        model, ESPO_SYSTEM_PROMPT, image_size=image_size, device=device
    )
    generation = GenerationParams(temperature=0.0, max_new_tokens=max_new_tokens)
    model_outcomes, successes = [], []
    for split, chosen in by_split.items():
        if not chosen:
            continue
        kwargs = {"split": split, "generation": generation, "history_window": history_window}
        model_outcomes += evaluate_offline(policy, dataset, chosen, **kwargs)
        if online:
            successes += [r.success for r in evaluate_online(policy, dataset, chosen, **kwargs)]
    metrics = evaluate_outcomes(
        model_outcomes,
        episodes=episodes,
        online_success=successes or None,
        seed=seed,
        resamples=resamples,
    )
    baselines = trivial_baselines(episodes, seed, resamples=resamples)
    click.echo(metrics_table_markdown({model.name: metrics}, baselines))
    click.echo(f"\n{best_achievable_rec_acc(episodes).line()}")
