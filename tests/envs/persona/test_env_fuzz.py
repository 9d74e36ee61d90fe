"""PersonaEnv.step on any model text: nothing escapes; an answer with nothing readable in it
(an overflowing point among them) is flagged ``invalid_action``, counted in
``fallback_count`` and changes nothing in the app."""

from __future__ import annotations

import pytest
from helpers_answers import gui_answers, gui_answers_with_hostile_point
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from odyssey_core.agents.persona_expert import PersonaExpert
from odyssey_core.envs.persona.env import LEGAL_ACTIONS, MODES, PersonaEnv
from odyssey_core.protocol.gui import GuiAction, format_gui_answer, parse_gui_answer

OVERFLOWING = '<think>top left</think><answer>{"action": "click", "point": [1e999, 5]}</answer>'

answers = st.one_of(
    gui_answers(),
    gui_answers_with_hostile_point(),
    st.text(max_size=80),
    st.sampled_from(LEGAL_ACTIONS),
)


@pytest.fixture(scope="module")
def envs():
    made = {mode: PersonaEnv(mode=mode, max_steps=8) for mode in MODES}
    yield made
    for env in made.values():
        env.close()


def test_an_overflowing_point_is_a_flagged_and_counted_no_op() -> None:
    env = PersonaEnv(mode="online")
    _, info = env.reset(seed=0)
    assert info["fallback_count"] == 0
    before = env.state
    observation, reward, terminated, truncated, info = env.step(OVERFLOWING)
    assert info["invalid_action"] and not info["format_valid"] and info["parsed"] is None
    assert info["parse_error"].startswith("point must be [x, y] of two finite numbers")
    assert info["fallback_count"] == 1 and env.state == before
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert observation.text.endswith("1. (unreadable answer)")
    move = PersonaExpert().act(env, observation, info)
    _, _, _, _, info = env.step(format_gui_answer(move, "the expert's move"))
    assert not info["invalid_action"] and info["fallback_count"] == 1
    assert env.reset(seed=0)[1]["fallback_count"] == 0
    env.close()


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 40),
    texts=st.lists(answers, min_size=1, max_size=6),
)
@example(mode="online", seed=0, texts=[OVERFLOWING])
@example(mode="replay", seed=0, texts=[OVERFLOWING])
def test_step_takes_any_text(envs, mode: str, seed: int, texts: list[str]) -> None:
    env = envs[mode]
    env.reset(seed=seed)
    fallbacks = 0
    for text in texts:
        named = text in env.legal_actions
        parsed = parse_gui_answer(text)
        unreadable = not named and parsed.action is None
        state = env.state
        observation, reward, terminated, truncated, info = env.step(text)
        fallbacks += unreadable
        assert reward == 0.0
        assert info["invalid_action"] is unreadable and info["fallback_count"] == fallbacks
        assert info["format_valid"] is (named or parsed.valid)
        assert info["parse_error"] == (None if named else parsed.error)
        if unreadable:
            assert info["parsed"] is None
            assert env.state == state  # the fallback: the app stays where it was
        else:
            assert info["parsed"] == (GuiAction(text) if named else parsed.action).to_json()
        if mode == "online" and unreadable:
            assert "(unreadable answer)" in observation.text
        assert env.observation_space.contains(observation.image)
        if terminated or truncated:
            break
