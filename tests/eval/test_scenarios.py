"""Section 4.2's start states: a scenario is data (level, position window, obstacle, enemies),
the maker drives the ROM there with a script, the checker names each fact that fails, and the
comparison presets check their state before training. The machinery runs end to end on odland
here; the Super Mario Land scenario needs your ROM (``needs_sml``)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from odyssey_core.cli import main as odyssey_cli
from odyssey_core.eval.scenarios import (
    PACKAGED_STATES,
    SCENARIOS,
    LevelStartSettings,
    ScenarioError,
    ScenarioView,
    ScreenSprite,
    SmlEnemiesAhead,
    SmlPipeAhead,
    check_scenario_state,
    check_start_states,
    expert_state_after,
    format_script,
    make_scenario_state,
    parse_script,
    read_screen,
    sml_enemies_ahead,
    sml_pipe_ahead,
    write_scenario_state,
)
from odyssey_core.recipes.odysseus.settings import load_train_settings

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = SCENARIOS["tall-pipe-two-walkers"]
SML = SCENARIOS["tall-pipe-two-enemies"]


def _first_frame(state: bytes) -> tuple[np.ndarray, dict]:
    from odyssey_core.envs import make_env

    env = make_env(SCENARIO.env_id)
    try:
        observation, info = env.reset(seed=0, options={"state": state})
    finally:
        env.close()
    return observation.image, info


def test_level_starts_resolve_their_paths_and_name_the_section_in_errors(tmp_path: Path) -> None:
    state = tmp_path / "start.state"
    state.write_bytes(b"saved")
    starts = LevelStartSettings(
        start_states={SCENARIO.env_id: state}, start_scenarios={SCENARIO.env_id: SCENARIO.name}
    )
    starts.resolve_start_states([SCENARIO.env_id], section="rollout.")
    assert starts.start_states == {SCENARIO.env_id: state}
    with pytest.raises(ValueError, match=r"^rollout\.start_states names levels not trained"):
        starts.resolve_start_states(["odland-1-1"], section="rollout.")
    missing = LevelStartSettings(start_states={SCENARIO.env_id: tmp_path / "gone.state"})
    with pytest.raises(ValueError, match=r"^start_states\[.*no save-state file.*scenario make"):
        missing.resolve_start_states([SCENARIO.env_id], section="")
    wrong = LevelStartSettings(start_scenarios={"odland-1-1": SCENARIO.name})
    with pytest.raises(ScenarioError, match=r"^start_scenarios\['odland-1-1'\].*not a scenario"):
        wrong.resolve_start_states(["odland-1-1"], section="")


# -- the packaged odland scenario ---------------------------------------------------------------


def test_the_packaged_state_is_the_scenario_and_ships(odland_rom) -> None:
    info = check_scenario_state(SCENARIO)  # every fact of the scenario holds on the file
    assert info["level"] == "1-3" and info["lives"] == 3 and info["on_ground"]
    walkers = [o for o in info["objects"] if o["kind"] == "walker"]
    pipe = next(o for o in info["objects"] if o["kind"] == "block")
    assert pipe["y"] <= 80 and all(w["x"] > pipe["x"] for w in walkers) and len(walkers) == 2
    assert SCENARIO.path.parent.parent == PACKAGED_STATES and SCENARIO.path.is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["odyssey_core.envs.pyboy"]
    assert "states/*/*.state" in package_data and "states/*/index.json" in package_data
    # the path the presets and the eval suite name is this file
    from odyssey_core.eval.suites import load_curated_states, load_suite

    suite = load_suite("compare")
    [section] = suite.sections
    [state] = load_curated_states(ROOT / section.states.states_dir, SCENARIO.env_id)
    assert state.state == SCENARIO.path.read_bytes() and state.progress == info["progress"]
    assert (suite.max_turns, section.states.runs_per_state) == (80, 128)
    index = json.loads((SCENARIO.path.parent / "index.json").read_text())[SCENARIO.path.name]
    assert index["script"] == SCENARIO.script and index["turn"] == 113


def test_the_script_makes_the_packaged_state_again_byte_for_byte(odland_rom, tmp_path) -> None:
    made = make_scenario_state(SCENARIO)
    assert made.turn == len(parse_script(SCENARIO.script)) == 113
    assert made.state == SCENARIO.path.read_bytes()  # deterministic: same ROM, seed, script
    path = write_scenario_state(made, tmp_path / SCENARIO.env_id / f"{SCENARIO.name}.state")
    assert check_scenario_state(SCENARIO, path) == _first_frame(made.state)[1]
    index = json.loads((path.parent / "index.json").read_text())[path.name]
    assert index["script"] == SCENARIO.script and index["facts"]["level"] == "1-3"


def test_a_wrong_state_fails_naming_each_fact_that_does_not_hold_and_the_remake(
    odland_rom, tmp_path
) -> None:
    # the same level, 8 turns in: the level holds, the position and the pipe do not
    with pytest.raises(ScenarioError) as raised:
        make_scenario_state(SCENARIO, script="b+right*8")
    message = str(raised.value)
    assert "fact 'position'" in message and "fact 'tall pipe ahead'" in message
    assert "fact 'level'" not in message
    # the packaged state of 1-3 is a wrong state for a scenario on another level
    made = expert_state_after("odland-1-1", 2)
    wrong = write_scenario_state(made, tmp_path / "wrong.state")
    with pytest.raises(ScenarioError) as raised:
        check_scenario_state(SCENARIO, wrong)
    message = str(raised.value)
    assert "fact 'level' (info['level'] == '1-3') does not hold: info['level'] is '1-1'" in message
    assert f"odyssey scenario make {SCENARIO.name} --out {wrong}" in message


def test_a_missing_or_unreadable_state_is_a_clear_error(odland_rom, tmp_path) -> None:
    with pytest.raises(ScenarioError, match=r"no state file at .*nowhere\.state; make it with"):
        check_scenario_state(SCENARIO, tmp_path / "nowhere.state")
    junk = tmp_path / "junk.state"
    junk.write_bytes(b"not a save state")
    with pytest.raises(ScenarioError, match=r"junk\.state is not a save state of odland-1-3"):
        check_scenario_state(SCENARIO, junk)
    with pytest.raises(ScenarioError, match="no scenario 'nope'; known: tall-pipe"):
        check_scenario_state("nope")


def test_scripts_parse_and_fold() -> None:
    turns = parse_script("b+right*3 a+right noop")
    assert turns == [("b", "right")] * 3 + [("a", "right"), ("noop",)]
    assert format_script(turns) == "b+right*3 a+right noop"
    assert format_script(parse_script(SCENARIO.script)) == SCENARIO.script
    with pytest.raises(ScenarioError, match="'right\\*x': the repeat after"):
        parse_script("right*x")
    with pytest.raises(ScenarioError, match="names no button"):
        parse_script("+*2")


def test_the_cli_makes_and_checks(odland_rom, tmp_path) -> None:
    runner = CliRunner()
    out = tmp_path / "made.state"
    made = runner.invoke(odyssey_cli, ["scenario", "make", SCENARIO.name, "--out", str(out)])
    assert made.exit_code == 0, made.output
    assert out.read_bytes() == SCENARIO.path.read_bytes() and "after 113 turns" in made.output
    checked = runner.invoke(odyssey_cli, ["scenario", "check", SCENARIO.name, "--state", str(out)])
    assert checked.exit_code == 0 and checked.output.startswith("ok: "), checked.output
    missing = runner.invoke(
        odyssey_cli, ["scenario", "check", SCENARIO.name, "--state", str(tmp_path / "x.state")]
    )
    assert missing.exit_code == 1 and "no state file at" in missing.output
    listed = runner.invoke(odyssey_cli, ["scenario", "list"])
    assert "tall pipe ahead" in listed.output and "mario-1-1" in listed.output


# -- the comparison presets check their state before use ------------------------------------


def test_the_comparison_presets_name_their_scenario_and_training_checks_it(
    odland_rom, tmp_path
) -> None:
    odland = load_train_settings("compare")
    assert odland.rollout.start_scenarios == {"odland-1-3": SCENARIO.name}
    check_start_states(odland.rollout.start_scenarios, odland.rollout.start_states)
    state = tmp_path / "mine.state"
    state.write_bytes(b"whatever")
    mario = load_train_settings(
        "compare_mario", {"rollout": {"start_states": {"mario-1-1": state}}}
    )
    assert mario.rollout.start_scenarios == {"mario-1-1": SML.name}
    assert mario.rollout.start_states == {"mario-1-1": state}
    assert SML.path == Path("states/mario-1-1/tall-pipe-two-enemies.state")
    with pytest.raises(ValueError, match="'tall-pipe-two-enemies': not a scenario of odland-1-3"):
        load_train_settings("compare", {"rollout": {"start_scenarios": {"odland-1-3": SML.name}}})
    with pytest.raises(ScenarioError, match="names no state for odland-1-3"):
        check_start_states({"odland-1-3": SCENARIO.name}, {})
    # a wrong state stops training before the model loads, naming the fact
    wrong = write_scenario_state(expert_state_after("odland-1-3", 2), tmp_path / "early.state")
    bad = load_train_settings("compare", {"rollout": {"start_states": {"odland-1-3": wrong}}})
    from odyssey_core.recipes.odysseus.train import build_trainer

    with pytest.raises(ScenarioError, match="fact 'position'"):
        build_trainer(bad, tmp_path / "run")


# -- Super Mario Land ---------------------------------------------------------------------------

# PyBoy's documented first frame of 1-1 (its wrapper's docstring): a two-tile pipe behind
# Mario at tile columns 1-2, Mario's four sprites at x 35 and 43, the ground below.
_BLANK, _GROUND = 300, 352
_MARIO = (ScreenSprite(35, 112, 0), ScreenSprite(43, 112, 1), ScreenSprite(35, 120, 16))


def _start_screen() -> np.ndarray:
    tiles = np.full((16, 20), _BLANK)
    tiles[14:] = _GROUND
    tiles[12, 1:3], tiles[13, 1:3] = (368, 369), (370, 371)
    return tiles


def test_sml_pipe_and_enemy_facts_read_the_screen() -> None:
    tiles = _start_screen()
    assert sml_pipe_ahead(tiles, 0, _MARIO, within_px=48) == 0  # the pipe is behind Mario
    tiles[10:12, 8:10] = (368, 369)  # a pipe four tiles high, 13 px ahead of Mario's right edge
    tiles[12:14, 8:10] = (370, 371)
    assert sml_pipe_ahead(tiles, 0, _MARIO, within_px=48) == 4
    assert sml_pipe_ahead(tiles, 0, _MARIO, within_px=8) == 0  # out of the window
    assert sml_pipe_ahead(tiles, 0, (), within_px=48) == 0  # no Mario on screen
    goombas = tuple(ScreenSprite(x, 120, 144) for x in (100, 108, 130, 138, 10))
    assert sml_enemies_ahead(_MARIO + goombas) == 2  # two 2-sprite goombas; one behind
    view = ScenarioView({"level": "1-1"}, tiles, 0, _MARIO + goombas[:2])
    assert SmlPipeAhead("pipe", min_tiles=3).failure(view) is None
    assert SmlEnemiesAhead("two", count=2).failure(view) == "1 enemies ahead on screen"
    assert "not a Super Mario Land state" in SmlPipeAhead("pipe").failure(ScenarioView({}))


def test_the_screen_reader_runs_on_a_real_emulator(odland_rom) -> None:
    from odyssey_core.envs import make_env

    env = make_env(SCENARIO.env_id)
    try:
        _, info = env.reset(seed=0, options={"state": SCENARIO.path.read_bytes()})
        tiles, fine, sprites = read_screen(env.pyboy)
    finally:
        env.close()
    assert tiles.shape == (16, 20) and 0 <= fine < 8 and len(np.unique(tiles)) > 1
    player_x = info["progress"] - info["camera_x"]  # the player's sprite is where RAM says
    assert any(abs(s.x - player_x) <= 16 for s in sprites), (player_x, sprites)
    # the four-tile pipe RAM places at x 1168 is in the tile column the scroll puts it in
    block = next(o for o in info["objects"] if o["kind"] == "block")
    column = (block["x"] - info["camera_x"] + fine) // 8
    ground_row = 112 // 8 - 2  # the ground's top, in rows below the HUD
    assert np.count_nonzero(tiles[:ground_row, column]) == 4
    assert np.count_nonzero(tiles[:ground_row, column - 1]) == 0


def test_the_sml_scenario_without_a_rom_says_how_to_give_one(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("ODYSSEY_SML_ROM", raising=False)
    with pytest.raises(ScenarioError, match=r"ODYSSEY_SML_ROM.*--rom FILE"):
        make_scenario_state(SML)
    state = tmp_path / "some.state"
    state.write_bytes(b"x")
    with pytest.raises(ScenarioError, match="ODYSSEY_SML_ROM"):
        check_scenario_state(SML, state)
    with pytest.raises(ScenarioError, match="no state file at states/mario-1-1/"):
        check_scenario_state(SML)  # the preset's path, named with the command that makes it
    from odyssey_core.envs.pyboy.odland import packaged_rom

    with pytest.raises(ScenarioError, match="Super Mario Land"):  # another game's ROM
        make_scenario_state(SML, rom_path=packaged_rom())


@pytest.mark.needs_sml
@pytest.mark.slow
def test_the_sml_scenario_is_made_from_the_rom_and_checked(sml_rom, tmp_path) -> None:
    made = make_scenario_state(SML, rom_path=sml_rom)
    path = write_scenario_state(made, tmp_path / SML.env_id / f"{SML.name}.state")
    info = check_scenario_state(SML, path, rom_path=sml_rom)
    assert info["level"] == "1-1" and 251 <= info["progress"] <= 1000
    # the recorded script makes the same state again, with no search
    again = make_scenario_state(SML, rom_path=sml_rom, script=made.script)
    assert again.state == made.state
    # the level start is not the scenario: the pipe there is behind Mario
    with pytest.raises(ScenarioError, match="fact 'tall pipe ahead'"):
        make_scenario_state(SML, rom_path=sml_rom, script="noop")
