"""The noisy programmatic corrector: the oracle with a VLM corrector's mistakes injected."""

from __future__ import annotations

from typing import Any

import pytest

from odyssey_core.envs.cards.games import BlackjackEnv, EZPointsEnv, NumberlineEnv, Points24Env
from odyssey_core.recipes.gtr.corrector import (
    CORRECTOR_SETTINGS,
    CORRECTORS,
    Correction,
    EpisodeMemory,
    NoisyProgrammaticCorrector,
    build_corrector,
    describe_corrector,
    make_corrector,
)


def states() -> list[tuple[Any, str, str | None, dict[str, Any]]]:
    """(observation, thought, action, info) for right and wrong thoughts in every card game."""
    out = []
    for seed in range(4):
        env = NumberlineEnv()
        obs, info = env.reset(seed=seed)
        right = "+" if info["current"] < info["target"] else "-"
        good = f'"target": {info["target"]}, "current": {info["current"]}'
        out += [(obs, good, right, info), (obs, '"target": 99, "current": 0', "+", info)]
        out.append((obs, "", None, info))
    for cards in (["5S", "7H"], ["2S", "10C"]):
        env = EZPointsEnv()
        obs, info = env.reset(seed=0, options={"cards": cards})
        a, b = (c[:-1] for c in cards)
        good = f'"cards": ["{a}", "{b}"], "formula": "{a}+{b}"'
        out += [(obs, good, a, info), (obs, '"cards": ["3", "3"], "formula": "3+3"', "3", info)]
    env = Points24Env()
    obs, info = env.reset(seed=0, options={"cards": ["QS", "3H", "4D", "2C"]})
    out += [(obs, '"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2"', "10", info)]
    out += [(obs, '"cards": ["K", "K", "K", "K"]', "*", info)]
    obs, info = env.reset(seed=0, options={"cards": ["KD", "KH", "JC", "JH"]})  # no solution
    out += [(obs, '"cards": ["K", "K", "J", "J"], "formula": "10+10"', "10", info)]
    env = BlackjackEnv()
    obs, info = env.reset(seed=3)
    out += [
        (obs, f"my total is {info['player_total']}", "hit", info),
        (obs, "total 2", "stand", info),
    ]
    return out


def run(corrector, cases) -> list[Correction]:
    return [corrector.correct(obs, th, act, info, EpisodeMemory()) for obs, th, act, info in cases]


def key(c: Correction) -> tuple:
    return (c.corrected_thought, c.action, c.agrees, c.solvable)


def test_error_rate_zero_is_the_programmatic_corrector() -> None:
    cases = states()
    noisy = run(make_corrector("noisy_programmatic", error_rate=0.0, seed=5), cases)
    exact = run(make_corrector("programmatic"), cases)
    assert [key(c) for c in noisy] == [key(c) for c in exact]
    assert [c.evaluation for c in noisy] == [c.evaluation for c in exact]


def test_error_rate_one_always_errs_and_stays_well_formed() -> None:
    cases = states()
    corrector = make_corrector("noisy_programmatic", error_rate=1.0, seed=1)
    noisy = run(corrector, cases)
    exact = run(make_corrector("programmatic"), cases)
    for case, wrong, right in zip(cases, noisy, exact, strict=True):
        assert key(wrong) != key(right), case[1]
        assert wrong.valid and wrong.corrected_thought.strip()
        assert wrong.action in case[3]["legal_actions"]
        assert wrong.as_response() is not None
        assert wrong.details["injected_error"]
    assert corrector.metrics()["injected_errors"] == len(cases)
    assert corrector.oracle is False


def test_injected_share_matches_the_error_rate() -> None:
    cases = states()
    corrector = NoisyProgrammaticCorrector(error_rate=0.3, seed=0)
    n = 2000
    for i in range(n):
        obs, th, act, info = cases[i % len(cases)]
        corrector.correct(obs, th, act, info)
    share = corrector.metrics()["injected_errors"] / n
    # binomial(2000, 0.3): s.d. of the share is about 0.010; 5 s.d. either side
    assert abs(share - 0.3) < 0.05


def test_same_seed_same_corrections() -> None:
    cases = states() * 3
    a = run(NoisyProgrammaticCorrector(error_rate=0.5, seed=11), cases)
    b = run(NoisyProgrammaticCorrector(error_rate=0.5, seed=11), cases)
    c = run(NoisyProgrammaticCorrector(error_rate=0.5, seed=12), cases)
    assert [key(x) for x in a] == [key(x) for x in b]
    assert [key(x) for x in a] != [key(x) for x in c]


def test_presets_validate_the_error_rate() -> None:
    from odyssey_core.recipes.gtr.settings import load_gtr_settings

    assert "noisy_programmatic" in CORRECTORS.names()
    assert "noisy_programmatic" in CORRECTOR_SETTINGS
    spec = {"name": "noisy_programmatic", "error_rate": 1.5}
    with pytest.raises(ValueError, match="error_rate"):
        load_gtr_settings("tiny", {"rollout": {"corrector": spec}})
    with pytest.raises(ValueError, match="error_rate"):
        build_corrector("noisy_programmatic", {"error_rate": -0.1})
    with pytest.raises(ValueError, match=r"error_rate must be in \[0, 1\]"):
        NoisyProgrammaticCorrector(error_rate=1.5)
    spec = {"name": "noisy_programmatic", "error_rate": 0.25, "seed": 3}
    settings = load_gtr_settings("tiny", {"rollout": {"corrector": spec}})
    built = build_corrector(settings.rollout.corrector, settings.rollout.corrector_kwargs)
    assert isinstance(built, NoisyProgrammaticCorrector)
    assert (built.error_rate, built.seed) == (0.25, 3)


def test_described_as_not_an_oracle_with_its_error_rate() -> None:
    described = describe_corrector("noisy_programmatic", {"error_rate": 0.2})
    assert described["oracle"] is False
    assert "not an oracle" in described["label"] and "20%" in described["label"]
