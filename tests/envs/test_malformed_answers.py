"""A malformed answer under ``malformed_penalty`` (the public Odysseus release's handling): the
emulator is not stepped, the turn is penalised, and the next prompt says why. Real emulator."""

from __future__ import annotations

import pytest

from odyssey_core.envs import make_env
from odyssey_core.envs.pyboy.env import MALFORMED_NOTE, unpack_state

RIGHT = "<perception>ground</perception><reasoning>go on</reasoning><answer>['right']</answer>"
GARBAGE = "I would like to go right, please"


@pytest.fixture()
def make(odland_rom):
    made = []

    def build(**kwargs):
        env = make_env("odland-1-1", **kwargs)
        made.append(env)
        return env

    yield build
    for env in made:
        env.close()


def walk(env, turns: int) -> None:
    env.reset(seed=0)
    for _ in range(turns):
        env.step(RIGHT)


def test_a_malformed_answer_costs_the_penalty_and_leaves_the_game_where_it_was(make) -> None:
    env = make(malformed_penalty=-100.0, max_turns=50)
    walk(env, 3)
    before = env.save_state()
    emulator_before, frame_before, _ = unpack_state(before)
    progress_before = env.state_info()["progress"]

    observation, reward, terminated, truncated, info = env.step(GARBAGE)
    assert reward == -100.0 and not terminated and not truncated
    assert info["invalid_action"] is True and info["buttons"] == ()
    assert info["parse_error"] == "no_answer" and info["life_lost"] is False
    assert info["turn"] == 4 and info["fallback_count"] == 1
    assert info["progress"] == progress_before
    emulator_after, frame_after, _ = unpack_state(env.save_state())
    assert emulator_after == emulator_before  # not one frame ran
    assert (frame_after == frame_before).all() and (observation.image == frame_before).all()
    assert observation.text.startswith(MALFORMED_NOTE)
    assert observation.text.endswith(make().reset(seed=0)[0].text.replace("turn 0", "turn 4"))

    # The next readable answer plays from exactly where the game was, and the note is gone.
    observation, reward, _, _, info = env.step(RIGHT)
    assert MALFORMED_NOTE not in observation.text and info["invalid_action"] is False
    twin = make(malformed_penalty=-100.0, max_turns=50)
    twin.load_state(before)
    _, twin_reward, _, _, twin_info = twin.step(RIGHT)
    assert reward == twin_reward > 0 and info["progress"] == twin_info["progress"]


def test_malformed_answers_still_count_towards_the_turn_limit(make) -> None:
    env = make(malformed_penalty=-100.0, max_turns=3)
    env.reset(seed=0)
    results = [env.step(GARBAGE) for _ in range(3)]
    assert [r[1] for r in results] == [-100.0, -100.0, -100.0]
    assert [r[3] for r in results] == [False, False, True]  # truncated at the limit
    with pytest.raises(RuntimeError, match="reset"):
        env.step(RIGHT)


def test_the_note_survives_a_save_and_load(make) -> None:
    env = make(malformed_penalty=-5.0)
    walk(env, 1)
    env.step(GARBAGE)
    state = env.save_state()
    other = make(malformed_penalty=-5.0)
    other.reset(seed=1)
    other.load_state(state)
    observation, _, _, _, _ = other.step(GARBAGE)
    assert observation.text.startswith(MALFORMED_NOTE)


def test_without_the_penalty_a_malformed_answer_presses_the_fallback_as_before(make) -> None:
    env = make(max_turns=50)
    walk(env, 2)
    emulator_before, _, _ = unpack_state(env.save_state())
    progress_before = env.state_info()["progress"]
    observation, reward, _, _, info = env.step(GARBAGE)
    assert info["buttons"] == ("noop",) and info["invalid_action"] is True
    assert reward == pytest.approx(10 * (info["progress"] - progress_before))
    assert MALFORMED_NOTE not in observation.text
    assert unpack_state(env.save_state())[0] != emulator_before  # the game ran on


def test_answers_from_code_are_never_malformed(make) -> None:
    env = make(malformed_penalty=-100.0)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(("right",))
    assert reward >= 0 and info["buttons"] == ("right",)
