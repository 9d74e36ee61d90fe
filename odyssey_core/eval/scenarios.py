"""Start-state scenarios: a named situation as data, a maker that drives a ROM to it, a checker.

Section 4.2 of the Odysseus paper compares RL algorithms (and, in Appendix D, classical PPO)
on one scenario of Super Mario Land 1-1 (Figure 2): jump over a tall pipe while two enemies
approach, then more gaps and enemies. RL (``rollout.start_states``), the SB3 baseline
(``start_states``) and evaluation suites (a curated section whose ``states_dir`` holds the
file) all start their episodes from such a state.

A :class:`Scenario` is data: the env (game and level), the facts the state must satisfy (the
level, an x-position window, the obstacle ahead and the enemies, each read from RAM or from
the tiles and sprites on screen), and how to reach it: a scripted input sequence played from
the level start with a fixed seed (so a fixed DIV), or, where no script is known, the search
expert, whose moves are recorded as the script beside the state so the next make replays it.

- ``tall-pipe-two-walkers`` (odland 1-3) ships with the package, so the comparison runs on
  the CPU with no ROM: the player stands in front of a pipe four tiles high with two walkers
  coming from behind it, a gap after them. Its script is part of the scenario.
- ``tall-pipe-two-enemies`` (Super Mario Land 1-1) is made from your ROM (never shipped)::

      ODYSSEY_SML_ROM=~/roms/sml.gb odyssey scenario make tall-pipe-two-enemies
      odyssey scenario check tall-pipe-two-enemies [--state FILE]

  The comparison presets name the made file and training checks it before the first rollout.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pyboy.plugins import game_wrapper_super_mario_land as sml_tables
from pydantic import Field

from odyssey_core.config import StrictModel, config_dir, resolve_data_path
from odyssey_core.envs.pyboy.rom import RomError

__all__ = [
    "PACKAGED_STATES",
    "SCENARIOS",
    "USER_STATES",
    "EnemiesAhead",
    "Fact",
    "InfoBetween",
    "InfoEquals",
    "LevelStartSettings",
    "ObstacleAhead",
    "Scenario",
    "ScenarioError",
    "ScenarioState",
    "ScenarioView",
    "SmlPipeAhead",
    "check_scenario_names",
    "check_scenario_state",
    "check_start_states",
    "expert_state_after",
    "format_script",
    "make_scenario_state",
    "parse_script",
    "read_screen",
    "read_view",
    "sml_enemies_ahead",
    "sml_pipe_ahead",
    "write_scenario_state",
]

#: where the package's scenario states live: ``<PACKAGED_STATES>/<env id>/<name>.state``
PACKAGED_STATES = Path(str(resources.files("odyssey_core.envs.pyboy") / "states"))
#: where states made from the user's ROM go, relative to the repository root (the presets'
#: working directory): ``states/<env id>/<name>.state``
USER_STATES = Path("states")

SCREEN_WIDTH = 160
TILE = 8
WALKER_WIDTH = 16
GROUND_TOP = 112  # odland: the surface the stacks stand on (y of a stack top = 112 - 8 * h)
# Super Mario Land's playfield: the tile rows below the two-row HUD, as PyBoy's game area
SML_PLAYFIELD_ROWS = range(2, 18)
SML_PLAYFIELD_COLUMNS = 20
# tile tables of PyBoy's Super Mario Land wrapper: Mario's sprites, pipes, enemies
SML_MARIO_TILES = frozenset(sml_tables.base_scripts)
SML_PIPE_TILES = frozenset(sml_tables.pipes)
SML_ENEMY_TILES = frozenset(
    sml_tables.goomba
    + sml_tables.koopa
    + sml_tables.plant
    + sml_tables.moth
    + sml_tables.flying_moth
    + sml_tables.sphinx
    + sml_tables.big_sphinx
    + sml_tables.fist
    + sml_tables.bill
)
SPRITE_COUNT = 40


class ScenarioError(ValueError):
    """A scenario state that is missing, unreadable, or not the scenario; the message says
    what does not hold and how to make the state again."""


@dataclass(frozen=True)
class ScreenSprite:
    """A sprite on screen: its top-left corner in screen pixels and its tile identifier."""

    x: int
    y: int
    tile: int


@dataclass(frozen=True)
class ScenarioView:
    """What the facts read from a restored state: the env's ``info`` (decoded from RAM) and,
    for Super Mario Land, the playfield's tile identifiers and the sprites on screen."""

    info: dict[str, Any]
    tiles: np.ndarray | None = None  # [16, 20] background tile identifiers below the HUD
    fine_scroll_x: int = 0  # SCX mod 8: how far the first tile column is scrolled out
    sprites: tuple[ScreenSprite, ...] = ()


class Fact(Protocol):
    """One checkable statement about a state; ``failure`` is ``None`` when it holds, else
    what the state shows instead."""

    name: str

    def describe(self) -> str: ...

    def failure(self, view: ScenarioView) -> str | None: ...


@dataclass(frozen=True)
class InfoEquals:
    """A value the env decodes from RAM (an ``info`` key) equals ``value``."""

    name: str
    key: str
    value: Any

    def describe(self) -> str:
        return f"info[{self.key!r}] == {self.value!r}"

    def failure(self, view: ScenarioView) -> str | None:
        got = view.info.get(self.key)
        got = list(got) if isinstance(got, tuple) else got
        want = list(self.value) if isinstance(self.value, tuple) else self.value
        return None if got == want else f"info[{self.key!r}] is {got!r}"


@dataclass(frozen=True)
class InfoBetween:
    """A value the env decodes from RAM lies in ``[low, high]`` (e.g. the x-position window)."""

    name: str
    key: str
    low: float
    high: float

    def describe(self) -> str:
        return f"{self.low} <= info[{self.key!r}] <= {self.high}"

    def failure(self, view: ScenarioView) -> str | None:
        got = view.info.get(self.key)
        if got is not None and self.low <= float(got) <= self.high:
            return None
        return f"info[{self.key!r}] is {got!r}"


@dataclass(frozen=True)
class ObstacleAhead:
    """odland: an object of ``kind`` at least ``min_tiles`` tiles high whose left edge is
    within ``within_px`` pixels ahead of the player (the RAM object table)."""

    name: str
    kind: str = "block"
    min_tiles: int = 4
    within_px: int = 48

    def describe(self) -> str:
        return f"a {self.kind} >= {self.min_tiles} tiles high within {self.within_px} px ahead"

    def failure(self, view: ScenarioView) -> str | None:
        x = float(view.info.get("progress", 0))
        found = [
            o
            for o in view.info.get("objects") or []
            if o["kind"] == self.kind
            and 0 < o["x"] - x <= self.within_px
            and o["y"] <= GROUND_TOP - self.min_tiles * TILE
        ]
        if found:
            return None
        return f"the objects ahead are {_objects_ahead(view.info)}"


@dataclass(frozen=True)
class EnemiesAhead:
    """odland: at least ``count`` walkers ahead of the player, fully on screen."""

    name: str
    count: int = 2

    def describe(self) -> str:
        return f">= {self.count} walkers ahead, fully on screen"

    def failure(self, view: ScenarioView) -> str | None:
        x, camera = float(view.info["progress"]), float(view.info.get("camera_x", 0))
        walkers = [
            o
            for o in view.info.get("objects") or []
            if o["kind"] == "walker"
            and o["x"] > x
            and o["x"] + WALKER_WIDTH <= camera + SCREEN_WIDTH
        ]
        if len(walkers) >= self.count:
            return None
        return f"{len(walkers)} walkers ahead on screen; the objects ahead are " + str(
            _objects_ahead(view.info)
        )


def _objects_ahead(info: dict[str, Any]) -> list[dict[str, Any]]:
    x = float(info.get("progress", 0))
    return [o for o in info.get("objects") or [] if o["x"] > x]


def _mario_right_edge(sprites: Sequence[ScreenSprite]) -> int | None:
    xs = [s.x for s in sprites if s.tile in SML_MARIO_TILES]
    return max(xs) + TILE if xs else None


def sml_pipe_ahead(
    tiles: np.ndarray, fine_scroll_x: int, sprites: Sequence[ScreenSprite], within_px: int
) -> int:
    """Super Mario Land: the height in tiles of the tallest pipe column (tiles 368-380, PyBoy's
    pipe table) whose left edge is within ``within_px`` pixels ahead of Mario's right edge;
    0 when there is none or Mario is not on screen."""
    right = _mario_right_edge(sprites)
    if right is None:
        return 0
    is_pipe = np.isin(tiles, sorted(SML_PIPE_TILES))
    tallest = 0
    for column in range(tiles.shape[1]):
        left = TILE * column - fine_scroll_x
        if 0 <= left - right <= within_px:
            tallest = max(tallest, int(is_pipe[:, column].sum()))
    return tallest


def sml_enemies_ahead(sprites: Sequence[ScreenSprite]) -> int:
    """Super Mario Land: enemies on screen ahead of Mario, counted as groups of enemy sprites
    (PyBoy's enemy tables) no more than one tile apart, since one enemy is up to 2 x 2 sprites."""
    right = _mario_right_edge(sprites)
    if right is None:
        return 0
    xs = sorted({s.x for s in sprites if s.tile in SML_ENEMY_TILES and s.x >= right - TILE})
    groups = 0
    previous: int | None = None
    for x in xs:
        if previous is None or x - previous > TILE:
            groups += 1
        previous = x
    return groups


@dataclass(frozen=True)
class SmlPipeAhead:
    """Super Mario Land: a pipe at least ``min_tiles`` high within ``within_px`` ahead of Mario
    (:func:`sml_pipe_ahead`)."""

    name: str
    min_tiles: int = 3
    within_px: int = 48

    def describe(self) -> str:
        return f"a pipe >= {self.min_tiles} tiles high within {self.within_px} px ahead of Mario"

    def failure(self, view: ScenarioView) -> str | None:
        if view.tiles is None:
            return "no playfield tiles (not a Super Mario Land state)"
        height = sml_pipe_ahead(view.tiles, view.fine_scroll_x, view.sprites, self.within_px)
        if height >= self.min_tiles:
            return None
        if _mario_right_edge(view.sprites) is None:
            return "Mario is not on screen"
        return f"the tallest pipe within {self.within_px} px ahead is {height} tiles high"


@dataclass(frozen=True)
class SmlEnemiesAhead:
    """Super Mario Land: at least ``count`` enemies on screen ahead of Mario
    (:func:`sml_enemies_ahead`)."""

    name: str
    count: int = 2

    def describe(self) -> str:
        return f">= {self.count} enemies on screen ahead of Mario"

    def failure(self, view: ScenarioView) -> str | None:
        found = sml_enemies_ahead(view.sprites)
        return None if found >= self.count else f"{found} enemies ahead on screen"


@dataclass(frozen=True)
class Scenario:
    """A situation as data: where (``env_id``), what must hold (``facts``), and how to get
    there from the level start of ``reset(seed=seed)``: ``script`` (see :func:`parse_script`)
    or, when it is ``None``, the search expert until every fact holds."""

    name: str
    env_id: str
    description: str
    facts: tuple[Fact, ...]
    script: str | None = None
    seed: int = 0
    packaged: bool = False  # ships with the package (odland); else made from the user's ROM
    expert_max_nodes: int = 600
    search_turns: int = 400  # the env's turn limit while the expert plans (changes its plan)
    max_turns: int = 300  # the expert gives up after this many turns
    env_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def game(self) -> str:
        return self.env_id.split("-", 1)[0]

    @property
    def path(self) -> Path:
        """Where the state goes: the packaged file, or ``states/<env id>/<name>.state``."""
        root = PACKAGED_STATES if self.packaged else USER_STATES
        return root / self.env_id / f"{self.name}.state"

    def relative_path(self, root: str | Path) -> Path:
        """The packaged file relative to ``root`` (the repository), as presets name it."""
        return self.path.resolve().relative_to(Path(root).resolve())

    def make_command(self, out: str | Path | None = None) -> str:
        """The command that makes this scenario's state (at ``out``, default its path)."""
        command = f"`odyssey scenario make {self.name} --out {out or self.path}`"
        if self.game == "mario":
            command += " with your ROM in $ODYSSEY_SML_ROM (or --rom FILE)"
        return command


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="tall-pipe-two-walkers",
            env_id="odland-1-3",
            description="Section 4.2's kind of scenario on odland: a pipe four tiles high right "
            "ahead, two walkers approaching from behind it, a gap after them",
            facts=(
                InfoEquals("level", "level", "1-3"),
                InfoBetween("position", "progress", 1100, 1167),
                InfoEquals("on the ground", "on_ground", True),
                ObstacleAhead("tall pipe ahead", kind="block", min_tiles=4, within_px=48),
                EnemiesAhead("two walkers ahead", count=2),
            ),
            # found once by the search expert from reset(seed=0); replayed since
            script="b+right*8 a+right b+right*9 a+right b+right*6 a+right b+right*8 a+right "
            "b+right*6 a+right b+right*6 a+right b+right*5 a+right b+right*2 a+right b+right*3 "
            "a+right b+right*6 a+right b+right*3 a+right b+right*4 a+right b+right*3 a+right "
            "b+right*5 a+right b+right*9 a+right b+right*9 a+right b+right*5",
            packaged=True,
        ),
        Scenario(
            name="tall-pipe-two-enemies",
            env_id="mario-1-1",
            description="Section 4.2 / Figure 2: Super Mario Land 1-1, Mario before a tall "
            "pipe with two enemies approaching",
            facts=(
                InfoEquals("level", "level", "1-1"),
                InfoEquals("world byte 0xFFB4", "world", (1, 1)),
                InfoBetween("position", "progress", 251, 1000),
                SmlPipeAhead("tall pipe ahead", min_tiles=3, within_px=48),
                SmlEnemiesAhead("two enemies ahead", count=2),
            ),
            # Fixed DIV: the made state is the same from the same ROM. No script is known
            # without a ROM: the first make records the expert's moves beside the state.
            env_overrides={"timer_div": 0},
        ),
    )
}


# -- scripts ---------------------------------------------------------------------------------


def parse_script(script: str) -> list[tuple[str, ...]]:
    """``"b+right*8 a+right noop*2"`` -> 8 turns of b+right, one of a+right, two of nothing:
    turns separated by spaces, buttons of a turn by ``+``, ``*N`` repeats a turn N times."""
    turns: list[tuple[str, ...]] = []
    for token in script.split():
        buttons, _, count = token.partition("*")
        if count and not count.isdigit():
            raise ScenarioError(f"script token {token!r}: the repeat after '*' is not a number")
        names = tuple(b for b in buttons.split("+") if b)
        if not names:
            raise ScenarioError(f"script token {token!r} names no button")
        turns.extend([names] * (int(count) if count else 1))
    return turns


def format_script(turns: Sequence[Sequence[str]]) -> str:
    """Inverse of :func:`parse_script`, with runs folded."""
    tokens = []
    for buttons, run in itertools.groupby("+".join(t) for t in turns):
        n = len(list(run))
        tokens.append(buttons if n == 1 else f"{buttons}*{n}")
    return " ".join(tokens)


# -- reading a state ---------------------------------------------------------------------------


def read_screen(pyboy: Any) -> tuple[np.ndarray, int, tuple[ScreenSprite, ...]]:
    """The background tile identifiers of the 16 x 20 tiles below a two-row HUD, each row at
    the scroll the LCD latched for it (PyBoy's game-area layout); SCX mod 8 of the first of
    them; the sprites on screen."""
    lines = pyboy.screen.tilemap_position_list
    tiles = np.zeros((len(SML_PLAYFIELD_ROWS), SML_PLAYFIELD_COLUMNS), dtype=np.int64)
    for row, y in enumerate(SML_PLAYFIELD_ROWS):
        scroll_x, scroll_y = lines[y * TILE][0], lines[y * TILE][1]
        for column in range(SML_PLAYFIELD_COLUMNS):
            tiles[row, column] = pyboy.tilemap_background.tile_identifier(
                (column + scroll_x // TILE) % 32, (y + scroll_y // TILE) % 32
            )
    sprites = []
    for index in range(SPRITE_COUNT):
        sprite = pyboy.get_sprite(index)
        if sprite.on_screen:
            sprites.append(ScreenSprite(sprite.x, sprite.y, sprite.tile_identifier))
    fine = lines[SML_PLAYFIELD_ROWS[0] * TILE][0] % TILE
    return tiles, fine, tuple(sprites)


def read_view(env: Any, info: dict[str, Any]) -> ScenarioView:
    """The view the facts read, from an env that has just restored a state (the screen only
    for Super Mario Land, whose facts read it)."""
    if getattr(getattr(env, "game", None), "name", None) != "mario":
        return ScenarioView(info=dict(info))
    tiles, fine, sprites = read_screen(env.pyboy)
    return ScenarioView(dict(info), tiles, fine, sprites)


def _failures(scenario: Scenario, view: ScenarioView) -> list[tuple[Fact, str]]:
    out = []
    for fact in scenario.facts:
        reason = fact.failure(view)
        if reason is not None:
            out.append((fact, reason))
    return out


def _failure_text(failures: list[tuple[Fact, str]]) -> str:
    return "; ".join(
        f"fact {f.name!r} ({f.describe()}) does not hold: {why}" for f, why in failures
    )


def _make_env(scenario: Scenario, rom_path: str | Path | None, **extra: Any) -> Any:
    from odyssey_core.envs import make_env

    overrides = {**scenario.env_overrides, **extra}
    if rom_path is not None:
        overrides["rom_path"] = Path(rom_path)
    try:
        return make_env(scenario.env_id, **overrides)
    except RomError as error:
        raise ScenarioError(f"{scenario.name}: {error} (`odyssey scenario`: --rom FILE)") from error


# -- making ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioState:
    """A save state, the env's facts when it was saved, and the script that reaches it."""

    env_id: str
    state: bytes
    turn: int  # turns from the level start
    info: dict[str, Any]
    script: str


def _lookup(scenario: Scenario | str) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if scenario not in SCENARIOS:
        raise ScenarioError(f"no scenario {scenario!r}; known: {', '.join(sorted(SCENARIOS))}")
    return SCENARIOS[scenario]


def make_scenario_state(
    scenario: Scenario | str, *, rom_path: str | Path | None = None, script: str | None = None
) -> ScenarioState:
    """Drive the ROM from the level start of ``reset(seed=scenario.seed)`` to the scenario:
    play ``script`` (default: the scenario's) turn by turn and save the state after its last
    turn; with no script, let the search expert play until every fact holds and record its
    moves as the script. Raises :class:`ScenarioError` naming each fact that does not hold."""
    s = _lookup(scenario)
    script = script if script is not None else s.script
    if script is None:
        return _make_with_expert(s, rom_path)
    turns = parse_script(script)
    env = _make_env(s, rom_path, max_turns=max(len(turns), 1) + 1)
    try:
        _, info = env.reset(seed=s.seed)
        for turn, buttons in enumerate(turns, start=1):
            _, _, terminated, _, info = env.step(buttons)
            if terminated and turn < len(turns):
                raise ScenarioError(
                    f"{s.name}: the script ended the episode at turn {turn} of {len(turns)} "
                    f"(progress {info.get('progress')}); give a script that stays alive"
                )
        failures = _failures(s, read_view(env, info))
        if failures:
            raise ScenarioError(
                f"{s.name}: after the {len(turns)}-turn script, {_failure_text(failures)}"
            )
        return ScenarioState(env.env_id, env.save_state(), len(turns), dict(info), script)
    finally:
        env.close()


def _make_with_expert(s: Scenario, rom_path: str | Path | None) -> ScenarioState:
    from odyssey_core.agents import SearchExpert

    env = _make_env(s, rom_path, max_turns=s.search_turns)
    expert = SearchExpert(max_nodes=s.expert_max_nodes)
    moves: list[tuple[str, ...]] = []
    try:
        observation, info = env.reset(seed=s.seed)
        expert.reset(env, seed=s.seed)
        for turn in range(1, s.max_turns + 1):
            moves.append(tuple(expert.act(env, observation, info)))
            observation, _, terminated, truncated, info = env.step(moves[-1])
            if terminated or truncated:
                raise ScenarioError(f"{s.name}: the expert's episode ended after {turn} turns")
            if not _failures(s, read_view(env, info)):
                return ScenarioState(
                    env.env_id, env.save_state(), turn, dict(info), format_script(moves)
                )
        last = _failure_text(_failures(s, read_view(env, info)))
        raise ScenarioError(
            f"{s.name}: the expert did not reach the scenario in {s.max_turns} turns; at the "
            f"end {last}; give a script (--script) that does"
        )
    finally:
        env.close()


def expert_state_after(
    env_id: str, turns: int, *, expert_max_nodes: int = 600, **env_overrides: Any
) -> ScenarioState:
    """The state after ``turns`` turns of the search expert's play from the level start (any
    game), for states that are not a named scenario."""
    free = Scenario(
        name=f"{env_id}-after-{turns}",
        env_id=env_id,
        description="",
        facts=(InfoBetween("turn", "turn", turns, turns),),
        expert_max_nodes=expert_max_nodes,
        max_turns=turns,
        env_overrides=env_overrides,
    )
    return _make_with_expert(free, None)


def _facts(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("level", "world", "progress", "lives", "camera_x", "player_y", "on_ground", "objects")
    return {
        k: (list(info[k]) if isinstance(info[k], tuple) else info[k]) for k in keys if k in info
    }


def write_scenario_state(made: ScenarioState, path: str | Path) -> Path:
    """Write the state and, beside it, ``index.json`` (progress and turn, as the eval suites'
    curated states have it) plus the facts read when it was made and the script."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(made.state)
    index_path = path.parent / "index.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    index[path.name] = {
        "progress": float(made.info.get("progress", 0.0)),
        "turn": made.turn,
        "facts": _facts(made.info),
        "script": made.script,
    }
    index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return path


# -- checking ----------------------------------------------------------------------------------


def check_scenario_state(
    scenario: Scenario | str,
    path: str | Path | None = None,
    *,
    rom_path: str | Path | None = None,
) -> dict[str, Any]:
    """Start an episode from the file (``None``: the scenario's path) in a fresh env and check
    every fact. Returns the env's info; raises :class:`ScenarioError` naming each fact that
    does not hold (or the missing or unreadable file) and the command that makes the state."""
    s = _lookup(scenario)
    path = Path(path) if path is not None else s.path
    remake = f"make it with {s.make_command(path)}"
    if not path.is_file():
        raise ScenarioError(f"{s.name}: no state file at {path}; {remake}")
    env = _make_env(s, rom_path)
    try:
        try:
            _, info = env.reset(seed=s.seed, options={"state": path.read_bytes()})
        except Exception as error:  # PyBoy's errors on a foreign file vary by what it holds
            raise ScenarioError(
                f"{s.name}: {path} is not a save state of {s.env_id} ({error}); {remake}"
            ) from error
        failures = _failures(s, read_view(env, info))
    finally:
        env.close()
    if failures:
        raise ScenarioError(f"{s.name}: {path}: {_failure_text(failures)}; {remake}")
    return info


def check_scenario_names(scenarios: Mapping[str, str], key: str) -> None:
    """Each env id's scenario is a known scenario of that env; ``key`` is the preset key
    (``rollout.start_scenarios``) the error names."""
    for env_id, name in scenarios.items():
        if name not in SCENARIOS or SCENARIOS[name].env_id != env_id:
            raise ScenarioError(
                f"{key}[{env_id!r}] = {name!r}: not a scenario of {env_id}; "
                f"known: {', '.join(f'{s.name} ({s.env_id})' for s in SCENARIOS.values())}"
            )


def check_start_states(
    scenarios: Mapping[str, str],
    start_states: Mapping[str, str | Path],
    *,
    rom_path: str | Path | None = None,
    section: str = "rollout.",
) -> None:
    """Check each level's start state against the scenario a preset names for it
    (``<section>start_scenarios``, beside ``<section>start_states``: an Odysseus run's
    ``rollout.``, the SB3 baseline's top level); a level with a scenario but no state is an
    error."""
    for level, name in scenarios.items():
        if level not in start_states:
            raise ScenarioError(
                f"{section}start_scenarios[{level!r}] = {name!r} but {section}start_states "
                f"names no state for {level}; add `{level}: {_lookup(name).path}` there"
            )
        check_scenario_state(name, start_states[level], rom_path=rom_path)


class LevelStartSettings(StrictModel):
    """The save state each level's episodes start from and the scenario it must be: the keys
    an Odysseus run's ``rollout:`` section and the SB3 baseline's top level share."""

    start_states: dict[str, Path] = Field(
        default_factory=dict,
        description="level -> a save-state file its episodes start from, in training and "
        "evaluation (Section 4.2's scenario); levels not named start at the level start",
    )
    start_scenarios: dict[str, str] = Field(
        default_factory=dict,
        description="level -> the scenario (eval/scenarios.py) its start state must be; "
        "every fact of it is checked before the first episode",
    )

    def resolve_start_states(self, levels: Sequence[str], section: str) -> None:
        """Every named level is trained on and its state file exists (found in the working
        directory or beside ``configs/``; the path is replaced by the one found), and every
        scenario name is one of that level's; ``section`` prefixes the keys errors name."""
        unknown = set(self.start_states) - set(levels)
        if unknown:
            raise ValueError(
                f"{section}start_states names levels not trained on: {sorted(unknown)}"
            )
        for level, path in self.start_states.items():
            found = resolve_data_path(path)
            if not found.is_file():
                raise ValueError(
                    f"{section}start_states[{level!r}]: no save-state file at {path} (looked in "
                    f"the working directory and under {config_dir().parent}); record one with "
                    f"`odyssey scenario make {self.start_scenarios.get(level, 'NAME')} "
                    f"--out {path}` (`odyssey scenario list` names the scenarios)"
                )
            self.start_states[level] = found
        check_scenario_names(self.start_scenarios, f"{section}start_scenarios")

    def check_start_scenarios(self, rom_path: str | Path | None, section: str) -> None:
        """Each start state is the scenario named for its level (a :class:`ScenarioError`
        naming the fact that fails); needs the ROM the states were made from."""
        check_start_states(
            self.start_scenarios, self.start_states, rom_path=rom_path, section=section
        )
