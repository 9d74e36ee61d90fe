"""Start-state scenarios: save states of one named situation, made reproducibly.

Section 4.2 of the Odysseus paper compares RL algorithms (and, in Appendix D, classical PPO)
on one scenario of Super Mario Land 1-1: jump over a tall pipe while two enemies approach,
then more gaps and enemies. RL (``rollout.start_states``), the SB3 baseline (``start_states``)
and evaluation suites (a curated section whose ``states_dir`` holds the file) all start their
episodes from such a state.

The package ships one scenario of the same kind on odland, so that the comparison runs on the
CPU with no ROM: ``tall-pipe-two-walkers`` in odland 1-3, where the player stands in front of
a pipe four tiles high with two walkers coming at it from behind the pipe, a 40 px gap after
them. It is made by the search expert (deterministic) playing 1-3 from the level start until
the situation first appears; :func:`make_scenario_state` makes it again and
:func:`check_scenario_state` checks a file against the situation::

    python -m odyssey_core.eval.scenarios              # rewrite the packaged file
    python -m odyssey_core.eval.scenarios --check      # check it (what tests/eval does)

Super Mario Land states cannot ship (the ROM is yours); record yours with the expert, which
saves the state after ``--turns`` turns of its play (or use any state file of the env)::

    ODYSSEY_SML_ROM=~/roms/sml.gb python -m odyssey_core.eval.scenarios \\
        --env mario-1-1 --turns 12 --out states/mario-1-1/tall-pipe-two-enemies.state
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "PACKAGED_STATES",
    "SCENARIOS",
    "Scenario",
    "ScenarioState",
    "check_scenario_state",
    "expert_state_after",
    "make_scenario_state",
    "tall_pipe_two_walkers",
    "write_scenario_state",
]

#: where the package's scenario states live: ``<PACKAGED_STATES>/<env id>/<name>.state``
PACKAGED_STATES = Path(str(resources.files("odyssey_core.envs.pyboy") / "states"))

SCREEN_WIDTH = 160
WALKER_WIDTH = 16
TILE = 8
GROUND_TOP = 112  # odland: the surface the stacks stand on (y of a stack top = 112 - 8 * h)


def tall_pipe_two_walkers(info: dict[str, Any]) -> bool:
    """odland: the player stands on the ground right before a stack at least four tiles high
    (within 48 px), and at least two walkers ahead of the player are fully on screen."""
    if not info.get("on_ground"):
        return False
    x, camera = float(info["progress"]), float(info["camera_x"])
    objects = info.get("objects") or []
    tall = [
        o
        for o in objects
        if o["kind"] == "block" and 0 < o["x"] - x <= 48 and o["y"] <= GROUND_TOP - 4 * TILE
    ]
    walkers = [
        o
        for o in objects
        if o["kind"] == "walker" and o["x"] > x and o["x"] + WALKER_WIDTH <= camera + SCREEN_WIDTH
    ]
    return bool(tall) and len(walkers) >= 2


@dataclass(frozen=True)
class Scenario:
    """A situation found by the search expert playing ``env_id`` from the level start: the
    first turn after which ``predicate(info)`` holds."""

    name: str
    env_id: str
    description: str
    predicate: Callable[[dict[str, Any]], bool]
    expert_max_nodes: int = 600
    search_turns: int = 400  # the env's turn limit while the expert plans (changes its plan)
    max_turns: int = 300  # give up after this many turns
    seed: int = 0

    @property
    def path(self) -> Path:
        """The packaged file."""
        return PACKAGED_STATES / self.env_id / f"{self.name}.state"

    def relative_path(self, root: str | Path) -> Path:
        """The packaged file relative to ``root`` (the repository), as presets name it."""
        return self.path.resolve().relative_to(Path(root).resolve())


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="tall-pipe-two-walkers",
            env_id="odland-1-3",
            description="Section 4.2's kind of scenario on odland: a pipe four tiles high right "
            "ahead, two walkers approaching from behind it, a gap after them",
            predicate=tall_pipe_two_walkers,
        ),
    )
}


@dataclass(frozen=True)
class ScenarioState:
    """A save state and the env's facts when it was saved."""

    env_id: str
    state: bytes
    turn: int  # turns of expert play from the level start
    info: dict[str, Any]


def _play_expert(
    env_id: str,
    stop: Callable[[int, dict[str, Any]], bool],
    *,
    max_turns: int,
    search_turns: int = 400,
    expert_max_nodes: int = 600,
    seed: int = 0,
    env_overrides: dict[str, Any] | None = None,
) -> ScenarioState:
    from odyssey_core.agents import SearchExpert
    from odyssey_core.envs import make_env

    env = make_env(env_id, **{**(env_overrides or {}), "max_turns": search_turns})
    expert = SearchExpert(max_nodes=expert_max_nodes)
    try:
        observation, info = env.reset(seed=seed)
        expert.reset(env, seed=seed)
        for turn in range(1, max_turns + 1):
            observation, _, terminated, truncated, info = env.step(
                expert.act(env, observation, info)
            )
            if terminated or truncated:
                raise RuntimeError(f"{env_id}: the episode ended after {turn} turns")
            if stop(turn, info):
                return ScenarioState(env.env_id, env.save_state(), turn, dict(info))
    finally:
        env.close()
    raise RuntimeError(f"{env_id}: the situation did not appear in {max_turns} turns")


def make_scenario_state(scenario: Scenario | str) -> ScenarioState:
    """Play the search expert until the scenario's situation first appears."""
    s = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    return _play_expert(
        s.env_id,
        lambda _, info: s.predicate(info),
        max_turns=s.max_turns,
        search_turns=s.search_turns,
        expert_max_nodes=s.expert_max_nodes,
        seed=s.seed,
    )


def expert_state_after(
    env_id: str, turns: int, *, expert_max_nodes: int = 600, **env_overrides: Any
) -> ScenarioState:
    """The state after ``turns`` turns of the search expert's play from the level start (any
    game, Super Mario Land included)."""
    return _play_expert(
        env_id,
        lambda turn, _: turn >= turns,
        max_turns=turns,
        expert_max_nodes=expert_max_nodes,
        env_overrides=env_overrides,
    )


def _facts(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("level", "progress", "lives", "camera_x", "player_y", "on_ground", "objects")
    return {k: info.get(k) for k in keys if k in info}


def write_scenario_state(made: ScenarioState, path: str | Path) -> Path:
    """Write the state and, beside it, ``index.json`` (progress and turn, as the eval suites'
    curated states have it) plus the facts the checks compare."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(made.state)
    index_path = path.parent / "index.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    index[path.name] = {
        "progress": float(made.info.get("progress", 0.0)),
        "turn": made.turn,
        "facts": _facts(made.info),
    }
    index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return path


def check_scenario_state(scenario: Scenario | str, path: str | Path | None = None) -> dict:
    """Start an episode from the file (``None``: the packaged one) in a fresh env and check
    that the situation holds there and that the env's facts are the ones recorded beside it.
    Returns the env's info; raises ``AssertionError`` naming what differs."""
    from odyssey_core.envs import make_env

    s = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    path = Path(path) if path is not None else s.path
    env = make_env(s.env_id)
    try:
        _, info = env.reset(seed=s.seed, options={"state": path.read_bytes()})
    finally:
        env.close()
    if not s.predicate(info):
        raise AssertionError(f"{path}: not the {s.name} situation: {_facts(info)}")
    index_path = path.parent / "index.json"
    recorded = json.loads(index_path.read_text()).get(path.name, {}) if index_path.is_file() else {}
    if recorded.get("facts") is not None and recorded["facts"] != _facts(info):
        raise AssertionError(
            f"{path}: the env reads {_facts(info)}, the index recorded {recorded['facts']}"
        )
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="tall-pipe-two-walkers", choices=sorted(SCENARIOS))
    parser.add_argument("--check", action="store_true", help="check the file, write nothing")
    parser.add_argument("--env", default=None, help="any env: save after --turns expert turns")
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="default: the packaged file")
    args = parser.parse_args(argv)
    if args.env is not None:
        if args.turns is None or args.out is None:
            parser.error("--env needs --turns and --out")
        made = expert_state_after(args.env, args.turns)
        print(f"{write_scenario_state(made, args.out)}: {_facts(made.info)}")
        return 0
    scenario = SCENARIOS[args.scenario]
    if args.check:
        info = check_scenario_state(scenario, args.out)
        print(f"ok: {_facts(info)}")
        return 0
    made = make_scenario_state(scenario)
    path = write_scenario_state(made, args.out or scenario.path)
    print(f"{path}: turn {made.turn}, {_facts(made.info)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
