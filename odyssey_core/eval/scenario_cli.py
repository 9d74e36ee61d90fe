"""``odyssey scenario make|check``: the start states of the Section 4.2 comparison."""

from __future__ import annotations

from pathlib import Path

import click

from odyssey_core.eval.scenarios import (
    SCENARIOS,
    ScenarioError,
    check_scenario_state,
    make_scenario_state,
    write_scenario_state,
)

_NAMES = click.Choice(sorted(SCENARIOS))
_ROM = click.option(
    "--rom",
    "rom_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="the game's ROM (Super Mario Land: default $ODYSSEY_SML_ROM; odland: the packaged one)",
)


@click.group("scenario", context_settings={"help_option_names": ["-h", "--help"]})
def scenario_group() -> None:
    """Make and check scenario start states (Section 4.2's tall pipe and two enemies)."""


@scenario_group.command("list")
def list_command() -> None:
    """The scenarios, their env, where their state goes and the facts it must satisfy."""
    for scenario in SCENARIOS.values():
        click.echo(f"{scenario.name}  {scenario.env_id}  {scenario.path}")
        click.echo(f"    {scenario.description}")
        for fact in scenario.facts:
            click.echo(f"    - {fact.name}: {fact.describe()}")


@scenario_group.command("make")
@click.argument("name", type=_NAMES)
@_ROM
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="the state file (default: the scenario's path, as the presets name it)",
)
@click.option(
    "--script",
    default=None,
    help="turns to play from the level start, e.g. 'right*10 a+right' (default: the "
    "scenario's; none known: the search expert plays and its moves are recorded)",
)
def make_command(name: str, rom_path: Path | None, out: Path | None, script: str | None) -> None:
    """Drive the ROM to scenario NAME, check every fact, write the state and its index."""
    scenario = SCENARIOS[name]
    try:
        made = make_scenario_state(scenario, rom_path=rom_path, script=script)
    except ScenarioError as error:
        raise click.ClickException(str(error)) from error
    path = write_scenario_state(made, out or scenario.path)
    click.echo(f"{path}: {name} after {made.turn} turns, progress {made.info.get('progress')}")
    click.echo(f"script: {made.script}")


@scenario_group.command("check")
@click.argument("name", type=_NAMES)
@_ROM
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="the state file to check (default: the scenario's path)",
)
def check_command(name: str, rom_path: Path | None, state_path: Path | None) -> None:
    """Load a state file into a fresh env and check every fact of scenario NAME."""
    scenario = SCENARIOS[name]
    try:
        info = check_scenario_state(scenario, state_path, rom_path=rom_path)
    except ScenarioError as error:
        raise click.ClickException(str(error)) from error
    held = ", ".join(fact.name for fact in scenario.facts)
    click.echo(f"ok: {state_path or scenario.path} is {name} ({held}); progress {info['progress']}")
