"""The env ``step`` that calls each parser, on any model text: odland on the real emulator
(both configured fallbacks) and the cards games. Nothing escapes; an answer the parser
rejects plays the env's fallback, is flagged ``invalid_action`` and counted in
``fallback_count``. (PersonaEnv, the espo format's env: ``tests/envs/persona``.)"""

from __future__ import annotations

import pytest
from helpers_answers import gtr_answers, odysseus_answers
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from odyssey_core.envs import make_env
from odyssey_core.protocol import GAMEBOY_SPACE, parse_response
from odyssey_core.protocol.gtr_format import parse_gtr_response

ENV_BUDGET = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
CARDS = ("cards-numberline", "cards-ezpoints", "cards-points24", "cards-blackjack")


@pytest.fixture(scope="module", params=["noop", "random"])
def odland(request, odland_rom):
    env = make_env("odland-1-1", max_turns=40, invalid_action=request.param)
    yield env
    env.close()


@pytest.fixture(scope="module")
def cards():
    made = {name: make_env(name) for name in CARDS}
    yield made
    for env in made.values():
        env.close()


@ENV_BUDGET
@given(
    texts=st.lists(st.one_of(odysseus_answers(GAMEBOY_SPACE.buttons), st.text()), max_size=4),
    seed=st.integers(0, 5),
)
@example(texts=["<answer>['right', 1e999]</answer>", "<answer>[NaN]</answer>"], seed=0)
def test_odland_step_takes_any_text(odland, texts: list[str], seed: int) -> None:
    odland.reset(seed=seed)
    fallbacks = 0
    legal = {GAMEBOY_SPACE.canonical(a) for a in GAMEBOY_SPACE.legal_actions()}
    for text in texts:
        parsed = parse_response(text)
        _, _, terminated, truncated, info = odland.step(text)
        fallbacks += not parsed.valid
        assert info["invalid_action"] is (not parsed.valid)
        assert info["fallback_count"] == fallbacks and info["parse_error"] == parsed.error
        assert GAMEBOY_SPACE.canonical(info["buttons"]) in legal
        if parsed.valid:
            assert info["buttons"] == parsed.buttons
        elif odland.config.invalid_action == "noop":
            assert info["buttons"] == ("noop",)
        if terminated or truncated:
            break


def _step_cards(env, texts: list[str]) -> None:
    legal = list(env.legal_actions)
    fallbacks = 0
    for text in texts:
        named = text in legal
        parsed = parse_gtr_response(text, legal)
        _, _, terminated, truncated, info = env.step(text)
        invalid = not named and not parsed.valid
        fallbacks += invalid
        assert info["invalid_action"] is invalid and info["fallback_count"] == fallbacks
        assert info["parse_error"] == (None if named else parsed.error)
        assert info["action"] in legal  # the fallback: a random legal action
        if not invalid:
            assert info["action"] == (text if named else parsed.action)
        if terminated or truncated:
            break


@pytest.mark.parametrize("name", CARDS)
def test_cards_hostile_action_values_fall_back(cards, name: str) -> None:
    cards[name].reset(seed=0)
    texts = ['{"action": 1e999}', '{"action": NaN}', '"action": [["hit"]]', '"action": ""']
    _step_cards(cards[name], texts)


@ENV_BUDGET
@given(name=st.sampled_from(CARDS), seed=st.integers(0, 50), data=st.data())
def test_cards_step_takes_any_text(cards, name: str, seed: int, data) -> None:
    env = cards[name]
    env.reset(seed=seed)
    legal = list(env.legal_actions)
    answer = st.one_of(gtr_answers(legal), st.text(), st.sampled_from(legal))
    _step_cards(env, data.draw(st.lists(answer, min_size=1, max_size=4)))
