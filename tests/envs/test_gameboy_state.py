"""Every Game Boy game reads its state fresh after a load: odland always, Super Mario Land when
``ODYSSEY_SML_ROM`` names your ROM.

A game that read a cached value (PyBoy's wrapper fields refresh only in ``post_tick``, which
``load_state`` does not run) would report the state before the load, and the first reward of a
reused env would be 10 x (level start - the previous episode's final progress).
"""

from __future__ import annotations

import pytest

GAMES = ["odland", pytest.param("mario", marks=pytest.mark.needs_sml)]
TURN_KEYS = {"buttons", "invalid_action", "life_lost", "parse_error"}
RUN = ("b", "right")


def state_part(info: dict) -> dict:
    return {k: v for k, v in info.items() if k not in TURN_KEYS}


def run_right(env, turns: int) -> list[tuple[bytes, dict]]:
    """Play ``turns`` turns of running right; the state and info after each, until an end."""
    saved = []
    for _ in range(turns):
        _, _, terminated, truncated, info = env.step(RUN)
        if terminated or truncated:
            break
        assert env.state_info() == state_part(info)
        saved.append((env.save_state(), state_part(info)))
    return saved


@pytest.mark.parametrize("game", GAMES)
def test_info_right_after_load_state_is_the_info_when_saved(make_game_env, game) -> None:
    env = make_game_env(game, max_turns=100)
    _, start_info = env.reset(seed=0)
    start = env.save_state()
    saved = [(start, state_part(start_info)), *run_right(env, 8)]
    assert len(saved) >= 4 and saved[-1][1]["progress"] > start_info["progress"]
    # From the end of the run back to the level start, then forward again, state by state:
    # every load lands on a state other than the one the emulator was in.
    for state, info_when_saved in saved:
        env.load_state(state)
        assert env.state_info() == info_when_saved
    for state, info_when_saved in reversed(saved):
        env.load_state(state)
        assert env.state_info() == info_when_saved
        _, reward, _, _, info = env.step(RUN)
        if not info["life_lost"]:
            assert reward == pytest.approx(10 * (info["progress"] - info_when_saved["progress"]))


@pytest.mark.parametrize("game", GAMES)
def test_reset_from_a_state_reports_that_state(make_game_env, game) -> None:
    env = make_game_env(game, max_turns=100)
    env.reset(seed=0)
    saved = run_right(env, 6)
    state, info_when_saved = saved[len(saved) // 2]
    run_right(env, 3)  # move on, so the reset really has somewhere to go back to
    _, info = env.reset(options={"state": state})
    assert state_part(info) == {**info_when_saved, "turn": 0, "fallback_count": 0}


@pytest.mark.parametrize("game", GAMES)
def test_a_reused_env_starts_its_next_episode_at_the_level_start(make_game_env, game) -> None:
    env = make_game_env(game, max_turns=300)
    _, first = env.reset(seed=0)
    start_state = env.save_state()
    for episode in range(3):
        # Play far into the level (until a death or the turn limit) ...
        info = first
        for _ in range(300):
            _, _, terminated, truncated, info = env.step(RUN)
            if terminated or truncated:
                break
        assert info["progress"] > first["progress"] + 16, "the episode got somewhere"
        # ... then the next episode, by a plain reset or from the start state.
        options = {"state": start_state} if episode == 1 else None
        _, again = env.reset(seed=episode + 1, options=options)
        assert state_part(again) == state_part(first)
        _, reward, _, _, after = env.step(("right",))
        assert reward >= 0, f"first reward after a reset is {reward}"
        assert reward == pytest.approx(10 * (after["progress"] - again["progress"]))
        env.reset(seed=episode + 1, options=options)


def test_an_env_that_only_loads_a_state_knows_the_levels_goal() -> None:
    """odland reads the goal from RAM, so a fresh env reset from a save state reports the same
    max_progress as one that started the level itself."""
    from odyssey_core.envs.registry import make_env

    source = make_env("odland-1-2")
    _, info = source.reset(seed=0)
    state = source.save_state()
    source.close()
    fresh = make_env("odland-1-2")
    try:
        _, loaded = fresh.reset(seed=0, options={"state": state})
    finally:
        fresh.close()
    assert info["max_progress"] is not None
    assert loaded["max_progress"] == info["max_progress"]
