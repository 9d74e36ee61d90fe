"""The gym_cards re-implementations: rules, seeding, registration, action forms, solver."""

from __future__ import annotations

import itertools
import time
from fractions import Fraction

import gymnasium
import numpy as np
import pytest

from odyssey_core.envs import ENVIRONMENTS, make_env
from odyssey_core.envs.base import Observation
from odyssey_core.envs.cards import solver
from odyssey_core.envs.cards.games import (
    BlackjackEnv,
    EZPointsEnv,
    NumberlineEnv,
    Points24Env,
    hand_total,
)
from odyssey_core.envs.cards.render import Card
from odyssey_core.envs.cards.specs import CARDS_ENVS
from odyssey_core.protocol.gtr_format import parse_gtr_response
from odyssey_core.recipes.gtr.prompts import gtr_system_prompt

CARDS_NAMES = [spec.name for spec in CARDS_ENVS]


def test_specs_are_registered_and_gym_works() -> None:
    assert CARDS_NAMES == [
        "cards-numberline",
        "cards-ezpoints",
        "cards-points24",
        "cards-blackjack",
    ]
    for spec in CARDS_ENVS:
        assert ENVIRONMENTS.get(spec.name) == spec
    for name in CARDS_NAMES:
        env = make_env(name)
        obs, info = env.reset(seed=0)
        assert isinstance(obs, Observation) and obs.image.dtype == np.uint8
        assert obs.image.shape == env.observation_space.shape
        assert "Legal actions" in obs.text and info["game"] == env.game
        gym_env = gymnasium.make(f"odyssey/{name}")
        gobs, _ = gym_env.reset(seed=0)
        assert gym_env.observation_space.contains(gobs)
        gym_env.close()


@pytest.mark.parametrize("name", CARDS_NAMES)
def test_same_seed_same_deal(name: str) -> None:
    a, b = make_env(name), make_env(name)
    oa, ia = a.reset(seed=11)
    ob, ib = b.reset(seed=11)
    assert ia == ib and np.array_equal(oa.image, ob.image)
    deals = {str(make_env(name).reset(seed=s)[1]["state_key"]) for s in range(12)}
    assert len(deals) > 1


def test_numberline_rules() -> None:
    env = NumberlineEnv()
    for seed in range(30):
        _, info = env.reset(seed=seed)
        assert 0 <= info["target"] <= 5 and 0 <= info["current"] <= 5
        assert info["target"] != info["current"]
        steps, done = 0, False
        while not done:  # walking straight at the target always takes <= 5 steps
            move = "+" if info["current"] < info["target"] else "-"
            _, reward, done, _, info = env.step(move)
            steps += 1
        assert reward == 1.0 and info["success"] and steps <= 5
    env.reset(seed=0, options={"target": 3, "current": 2})
    assert env.step("-")[1] == -1.0  # away from the target
    assert env.step("+")[1] == 0.0  # closer, not there yet
    assert env.step("+")[1:3] == (1.0, True)


def test_numberline_panels_show_each_number_in_its_own_third() -> None:
    env = NumberlineEnv(layout="panels")
    frames = {}
    for target, current in [(1, 4), (3, 4), (3, 0)]:
        obs, _ = env.reset(seed=0, options={"target": target, "current": current})
        frames[target, current] = obs.image
    third = env.image_size[0] // 3
    left, middle, right = (slice(None, third), slice(third, 2 * third), slice(2 * third, None))

    def same(a: tuple[int, int], b: tuple[int, int], columns: slice) -> bool:
        return np.array_equal(frames[a][:, columns], frames[b][:, columns])

    # the target lives in the left third, the current number in the right one
    assert same((1, 4), (3, 4), right) and not same((1, 4), (3, 4), left)
    assert same((3, 4), (3, 0), left) and not same((3, 4), (3, 0), right)
    # the middle third is bare table below the labels, so no patch sees both numbers
    table = frames[1, 4][env.image_size[1] // 4 :, middle]
    assert (table == table[0, 0]).all()
    # the rules do not depend on the layout
    env.reset(seed=0, options={"target": 3, "current": 2})
    assert env.step("-")[1] == -1.0 and env.step("+")[1] == 0.0
    assert env.step("+")[1:3] == (1.0, True)
    with pytest.raises(ValueError, match="layout must be one of lines, panels"):
        NumberlineEnv(layout="grid")


def test_ezpoints_always_solvable_in_four_steps() -> None:
    env = EZPointsEnv()
    for seed in range(25):
        _, info = env.reset(seed=seed)
        assert info["solvable"] and len(info["cards"]) == 2
        formula = solver.solve(info["card_values"], 12, ("+", "-"))[0]
        tokens = [*solver.tokenize(formula), "="]
        assert len(tokens) == 4
        for token in tokens:
            _, reward, done, _, info = env.step(token)
        assert done and reward == 10.0 and info["success"]


def test_points24_rules() -> None:
    env = Points24Env()
    env.reset(seed=0, options={"cards": ["QS", "3H", "4D", "2C"]})
    _, reward, _, _, info = env.step("5")  # not on a card
    assert reward == -1.0 and info["illegal"] and info["formula"] == ""
    for token in ["10", "+", "3", "*", "4"]:
        assert env.step(token)[1] == 0.0
    _, reward, _, _, info = env.step("3")  # its card is already used
    assert reward == -1.0 and info["formula"] == "10+3*4"
    for token in ["+", "2"]:
        env.step(token)
    _, reward, done, _, info = env.step("=")
    assert done and reward == 10.0 and info["success"]
    # "=" on a wrong or incomplete formula: -1 and the episode ends
    env.reset(seed=0, options={"cards": ["QS", "3H", "4D", "2C"]})
    env.step("10")
    assert env.step("=")[1:3] == (-1.0, True)
    with pytest.raises(RuntimeError):
        env.step("+")
    # GTR App. A.1: the episode terminates at T = 20 (not truncated: nothing to bootstrap) and
    # its last step earns the outcome, -1 for a formula that does not make 24 ...
    env.reset(seed=1)
    steps = [env.step("+") for _ in range(20)]
    assert all(step[1:4] == (0.0, False, False) for step in steps[:-1])
    _, reward, terminated, truncated, info = steps[-1]
    assert (reward, terminated, truncated) == (-1.0, True, False) and info["time_limit"]
    assert not info["success"]
    with pytest.raises(RuntimeError):
        env.step("+")
    # ... also when the 20th action is illegal (one terminal -1, as '=' gives) ...
    env.reset(seed=0, options={"cards": ["QS", "3H", "4D", "2C"]})
    for _ in range(19):
        env.step("5")
    assert env.step("5")[1:4] == (-1.0, True, False)
    # ... and 10 when the formula then uses every card and makes 24
    env.reset(seed=0, options={"cards": ["QS", "3H", "4D", "2C"]})
    for token in ["5"] * 13 + ["10", "+", "3", "*", "4", "+"]:
        env.step(token)
    _, reward, terminated, _, info = env.step("2")
    assert (reward, terminated, info["success"], info["time_limit"]) == (10.0, True, True, True)
    # the other games' step limits are no part of their rules: they truncate
    ez = EZPointsEnv(max_steps=3)
    ez.reset(seed=0)
    assert [ez.step("+")[2:4] for _ in range(3)][-1] == (False, True)
    # J/Q/K count 10; some deals have no solution
    env.reset(seed=0, options={"cards": ["AS", "AH", "AD", "AC"]})
    assert env.step("=")[4]["solvable"] is False
    assert any(not Points24Env().reset(seed=s)[1]["solvable"] for s in range(40))
    assert all(Points24Env(only_solvable=True).reset(seed=s)[1]["solvable"] for s in range(10))


def test_action_forms_and_fallback_counting() -> None:
    env = Points24Env()
    env.reset(seed=3)
    assert env.step('thinking... "action": "("')[4]["action"] == "("
    info = env.step(env.legal_actions.index("+"))[4]
    assert info["action"] == "+" and not info["invalid_action"]
    info = env.step(parse_gtr_response('"action": "*"', env.legal_actions))[4]
    assert info["action"] == "*"
    info = env.step("I have no idea")[4]
    assert info["invalid_action"] and info["parse_error"] == "no_action"
    assert info["fallback_count"] == 1 and info["action"] in env.legal_actions
    with pytest.raises(ValueError):
        env.step(99)
    with pytest.raises(TypeError):
        env.step(3.5)


def test_blackjack_rules() -> None:
    outcomes = set()
    for seed in range(60):
        env = BlackjackEnv()
        _, info = env.reset(seed=seed)
        assert len(info["player_cards"]) == 2 and len(info["dealer_cards"]) == 2
        done, reward = False, 0.0
        while not done:
            move = "hit" if info["player_total"] < 15 else "stand"
            _, reward, done, _, info = env.step(move)
        assert reward in (-1.0, 0.0, 1.0)
        if info["outcome"] != "bust":
            dealer = [Card(c[:-1], c[-1]) for c in info["dealer_cards"]]
            assert hand_total(dealer)[0] >= 17  # the dealer drew to 17
        outcomes.add(info["outcome"])
    assert {"win", "lose"} <= outcomes


def test_solver_exact_and_distinct() -> None:
    assert solver.solve24([3, 3, 8, 8]) == ("8/(3-8/3)",)
    assert solver.evaluate_tokens("8/(3-8/3)") == Fraction(24)
    assert solver.evaluate_tokens("1/(1-1)") is None and solver.evaluate_tokens("1+") is None
    sols = solver.solve24([1, 2, 3, 4])
    assert len(sols) == len(set(sols)) and "(1+2+3)*4" in sols and "4*(3+2+1)" not in sols
    for formula in sols:
        assert solver.evaluate_tokens(formula) == 24
        assert sorted(solver.uses_numbers(formula)) == [1, 2, 3, 4]
    assert not solver.solvable([1, 1, 1, 1])
    # the classic count: 566 of the 715 multisets of 1..10 reach 24
    start = time.perf_counter()
    combos = itertools.combinations_with_replacement(range(1, 11), 4)
    assert sum(solver.solvable(c) for c in combos) == 566
    assert time.perf_counter() - start < 15
    # prefix completion works whatever order the agent types in
    assert solver.next_tokens("8/(3-", [3, 3, 8, 8]) == {"8", "("}
    assert solver.next_tokens("3*8", [3, 8], 24) == {"="}
    assert solver.completions("8*", [3, 3, 8, 8]) == []
    assert solver.solve([5, 7], 12, ("+", "-")) == ("5+7",)


# the system prompts list exactly what each env accepts (EZPoints' once offered '*', which its
# env rejects): every card env, with its default settings and with another operator set
PROMPT_CASES = [(name, {}) for name in CARDS_NAMES] + [
    ("cards-ezpoints", {"operators": ("+", "*")}),
    ("cards-ezpoints", {"operators": ("+", "-", "*"), "target": 10}),
]


@pytest.mark.parametrize(("name", "kwargs"), PROMPT_CASES)
def test_system_prompt_lists_exactly_the_legal_actions(name: str, kwargs: dict) -> None:
    import re

    env = make_env(name, **kwargs)
    prompt = gtr_system_prompt(name, kwargs)
    quoted = set(re.findall(r"'([^'\s]{1,5})'", prompt))
    words = {a for a in env.legal_actions if not a.isdigit()}
    assert {q for q in quoted if not q.isdigit()} == words
    numbers = sorted(int(a) for a in env.legal_actions if a.isdigit())
    if numbers:  # the formula games name the range of card values and their target
        assert f"'{numbers[0]}' to '{numbers[-1]}'" in prompt
        assert f"equals {env.target}" in prompt
    assert {q for q in quoted if q.isdigit()} == (
        {str(numbers[0]), str(numbers[-1])} if numbers else set()
    )
    if name == "cards-ezpoints" and not kwargs:
        assert "'*'" not in prompt and "*" not in env.legal_actions
