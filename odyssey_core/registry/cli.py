"""``odyssey registry``: look at registered models, promote a candidate, roll back.

The lead attaches ``registry_group`` to the main ``odyssey`` group. The tracking/registry URIs
come from ``--tracking-uri`` / ``--registry-uri`` or ``MLFLOW_TRACKING_URI`` /
``MLFLOW_REGISTRY_URI``.

Scores file for ``promote`` (JSON): per-episode progress on one evaluation suite,

    {"candidate": [812.0, 790.5, ...], "champion": [700.0, ...], "base": [120.0, ...]}

``champion`` is needed when the game has a champion, ``base`` when it has none yet.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click


def _registry(ctx: click.Context) -> Any:
    from odyssey_core.registry.models import ModelRegistry

    opts = ctx.obj if isinstance(ctx.obj, dict) else {}  # set by registry_group
    return ModelRegistry(opts.get("tracking_uri"), opts.get("registry_uri"))


def _echo_json(data: Any) -> None:
    def clean(x: Any) -> Any:  # JSON has no NaN/inf
        if isinstance(x, float) and not math.isfinite(x):
            return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    click.echo(json.dumps(clean(data), indent=2, default=str))


@click.group("registry")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", default=None, help="MLflow URI")
@click.option("--registry-uri", envvar="MLFLOW_REGISTRY_URI", default=None)
@click.pass_context
def registry_group(ctx: click.Context, tracking_uri: str | None, registry_uri: str | None) -> None:
    """Registered models, their champion, promotion and rollback."""
    ctx.obj = {"tracking_uri": tracking_uri, "registry_uri": registry_uri}


@registry_group.command("list")
@click.option("--game", default=None, help="only this game's model")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.pass_context
def list_command(ctx: click.Context, game: str | None, as_json: bool) -> None:
    """Registered models with their latest version and aliases."""
    models = _registry(ctx).list_models(game)
    if as_json:
        _echo_json(models)
        return
    if not models:
        click.echo("no registered models")
    for m in models:
        aliases = ", ".join(f"{k}=v{v}" for k, v in sorted(m["aliases"].items())) or "-"
        click.echo(f"{m['name']:28s} latest v{m['latest_version']}  {aliases}")


@registry_group.command("show")
@click.argument("game")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.pass_context
def show_command(ctx: click.Context, game: str, as_json: bool) -> None:
    """A game's model: every version, its checkpoint and promotion decision."""
    from odyssey_core.registry.models import RegistryError

    try:
        info = _registry(ctx).show(game)
    except RegistryError as err:
        raise click.ClickException(str(err)) from None
    if as_json:
        _echo_json(info)
        return
    click.echo(f"{info['name']}  champion history: {info['champion_history'] or '-'}")
    for v in info["versions"]:
        aliases = ",".join(v["aliases"]) or "-"
        decision = v["tags"].get("promotion.decision", "undecided")
        click.echo(f"  v{v['version']:<4d} {aliases:28s} {decision:10s} {v['source']}")
        reason = v["tags"].get("promotion.reason")
        if reason:
            click.echo(f"         {reason}")


def _load_scores(path: Path) -> dict[str, list[float] | None]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise click.BadParameter(f"cannot read {path}: {err}", param_hint="--scores-file") from None
    if not isinstance(data, dict) or not isinstance(data.get("candidate"), list):
        raise click.BadParameter(
            'expected {"candidate": [...], "champion": [...], "base": [...]}',
            param_hint="--scores-file",
        )
    return {k: data.get(k) for k in ("candidate", "champion", "base")}


@registry_group.command("promote")
@click.argument("game")
@click.option("--candidate-version", type=int, default=None, help="default: the candidate alias")
@click.option(
    "--scores-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help='JSON: {"candidate": [...], "champion": [...], "base": [...]}',
)
@click.option("--margin", type=float, default=None, help="default: settings (0)")
@click.option("--alpha", type=float, default=None, help="default: settings (0.05)")
@click.option("--strict", is_flag=True, help="exit with status 3 when the candidate is rejected")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.pass_context
def promote_command(
    ctx: click.Context,
    game: str,
    candidate_version: int | None,
    scores_file: Path,
    margin: float | None,
    alpha: float | None,
    strict: bool,
    as_json: bool,
) -> None:
    """Run the promotion gate on a candidate version."""
    from odyssey_core.registry.models import RegistryError

    scores = _load_scores(scores_file)
    try:
        decision = _registry(ctx).promote(
            game,
            scores["candidate"],
            scores["champion"],
            scores["base"],
            margin,
            alpha,
            candidate_version=candidate_version,
        )
    except (RegistryError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    if as_json:
        _echo_json(decision.to_dict())
    else:
        verdict = "PROMOTED" if decision.promoted else "rejected"
        click.echo(f"{decision.model} v{decision.candidate_version}: {verdict}")
        click.echo(f"  {decision.gate.reason}")
        click.echo(f"  champion: v{decision.champion}" if decision.champion else "  no champion")
    if strict and not decision.promoted:
        ctx.exit(3)


@registry_group.command("rollback")
@click.argument("game")
@click.pass_context
def rollback_command(ctx: click.Context, game: str) -> None:
    """Make the previous champion the champion again."""
    from odyssey_core.registry.models import RegistryError

    try:
        result = _registry(ctx).rollback(game)
    except RegistryError as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"{result.model}: champion v{result.demoted} -> v{result.champion}")
