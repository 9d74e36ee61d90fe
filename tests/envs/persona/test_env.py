"""PersonaEnv in replay and online modes: Gymnasium's checker, teacher-forced replay, live play
to success with the expert, the answer forms it accepts, and its registration."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from odyssey_core.agents.persona_expert import PersonaExpert
from odyssey_core.envs import make_env
from odyssey_core.envs.gym_compat import DictObservation
from odyssey_core.envs.persona.env import MAX_TEXT, PersonaEnv, turn_text
from odyssey_core.envs.persona.render import FastRenderer
from odyssey_core.envs.persona.specs import PERSONA_CHANNELS, PERSONA_ENVS
from odyssey_core.protocol.gui import GuiAction, format_gui_answer, parse_gui_answer

NEXT_KEYS = {
    "stage",
    "step_index",
    "episode_id",
    "channel",
    "screen_size",
    "intent",
    "intent_slots",
    "fallback_count",
}
ANSWERED_KEYS = {
    "answered_stage",
    "gold",
    "target_box",
    "optimal",
    "candidate",
    "label",
    "parsed",
    "format_valid",
    "parse_error",
    "invalid_action",
    "goal_reached",
}


def play(env: PersonaEnv, agent, episode_id: str) -> tuple[int, dict]:
    observation, info = env.reset(options={"episode": episode_id})
    agent.reset(env)
    turns = 0
    while True:
        observation, reward, terminated, truncated, info = env.step(
            agent.act(env, observation, info)
        )
        assert reward == 0.0
        turns += 1
        if terminated or truncated:
            return turns, info


@pytest.mark.parametrize("mode", ["replay", "online"])
def test_gymnasiums_checker_passes(mode: str) -> None:
    env = DictObservation(PersonaEnv(mode=mode))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped.*")
        check_env(env, skip_render_check=True)
    for seed in range(3):
        observation, _ = env.reset(seed=seed)
        assert env.observation_space.contains(observation)
        env.step(0)
    env.close()


def test_replay_shows_the_recorded_steps_whatever_the_agent_answers() -> None:
    env = PersonaEnv(mode="replay")
    episode = env.episodes[3]
    observation, info = env.reset(options={"episode": episode.episode_id})
    assert set(info) == NEXT_KEYS and info["stage"] == "search" and info["step_index"] == 0
    assert info["screen_size"] == [224, 448] and info["intent"] == episode.intent
    renderer = FastRenderer()
    for k, step in enumerate(episode.steps):
        assert np.array_equal(observation.image, renderer.render(step.screen))
        assert episode.request in observation.text and "224 x 448 pixels" in observation.text
        shown = [s.gold.describe() for s in episode.steps[:k]]
        assert all(f"{n}. {line}" in observation.text for n, line in enumerate(shown, start=1))
        observation, _, terminated, truncated, info = env.step("scroll left")  # never gold
        assert set(info) == NEXT_KEYS | ANSWERED_KEYS
        assert info["answered_stage"] == step.stage and info["gold"] == step.gold.to_json()
        assert info["target_box"] == (list(step.target_box) if step.target_box else None)
        assert info["optimal"] == [list(o) for o in step.optimal]
        assert info["candidate"] == step.candidate
        assert info["label"] == (step.gold.text if step.stage == "recommend" else None)
        assert info["parsed"] == GuiAction("scroll left").to_json() and info["format_valid"]
        assert terminated == (k == len(episode.steps) - 1) and not truncated
    assert info["stage"] is None
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("exit")
    env.close()


def test_the_expert_replays_every_demonstrated_step() -> None:
    env = PersonaEnv(mode="replay", channel="travel")
    for episode in env.episodes:
        turns, _ = play(env, PersonaExpert(), episode.episode_id)
        assert turns == len(episode.steps)
    env.close()


@pytest.mark.parametrize("channel", [None, "travel"])
def test_the_expert_plays_online_to_success(channel: str | None) -> None:
    env = PersonaEnv(mode="online", channel=channel)
    for episode in env.episodes:
        turns, info = play(env, PersonaExpert(), episode.episode_id)
        assert info["success"] and info["goal_reached"], episode.episode_id
        assert info["recommended"] == info["yes_set"] == sorted(episode.yes_items)
        assert turns <= len(episode.steps) + 2  # no detours, maybe a focus click or two more
    env.close()


def test_online_answers_drive_the_app_and_the_recommendations_decide() -> None:
    env = PersonaEnv(mode="online", channel="hotel")
    episode = env.episodes[0]
    observation, info = env.reset(options={"episode": episode.episode_id})
    first = observation.image
    # model text: click the hotels icon; the env reads it and the app moves
    icon = env.app.screen(env.state).element("app-hotel").center
    text = format_gui_answer(GuiAction("click", icon), "open the hotel app")
    observation, _, _, _, info = env.step(text)
    assert info["format_valid"] and info["parsed"]["point"] == list(icon)
    assert info["answered_stage"] == "search" and info["optimal"] == [["click", "app-hotel"]]
    assert info["target_box"] == list(
        env.app.screen(env.app.initial_state()).element("app-hotel").box
    )
    assert env.state.screen == "search" and not np.array_equal(observation.image, first)
    assert "1. click" in observation.text
    # an unreadable answer changes nothing and is flagged
    before = env.state
    _, _, terminated, _, info = env.step("I would like to click somewhere")
    assert info["invalid_action"] and not info["format_valid"] and info["parse_error"]
    assert env.state == before and not terminated
    # the expert finds the pool; then every candidate is answered No
    expert = PersonaExpert()
    while info["stage"] != "pool":
        _, _, _, _, info = env.step(expert.act(env, observation, info))
    _, _, terminated, _, info = env.step(GuiAction("pool_found", input_text=episode.intent))
    assert info["answered_stage"] == "pool" and info["stage"] == "recommend"
    assert env.candidates == list(episode.candidates)
    while not terminated:
        assert info["stage"] == "recommend" and env.candidate is not None
        observation, _, terminated, _, info = env.step(
            '<think>not for them</think><answer>{"action": "recommendation", '
            '"point": [-100, -100], "input_text": "No"}</answer>'
        )
        assert info["label"] in ("Yes", "No") and info["candidate"] in episode.candidates
    assert info["recommended"] == [] and info["yes_set"] == sorted(episode.yes_items)
    assert not info["success"] and not info["goal_reached"]
    env.close()


def test_online_ends_at_once_without_a_list_and_truncates_at_max_steps() -> None:
    env = PersonaEnv(mode="online", max_steps=3)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(GuiAction("pool_found", input_text="anything"))
    assert terminated and not truncated and info["recommended"] == [] and not info["success"]
    env.reset(seed=0)
    results = [env.step(env.legal_actions.index("exit")) for _ in range(3)]
    assert [r[2:4] for r in results] == [(False, False), (False, False), (False, True)]
    assert results[-1][4]["success"] is False
    env.close()


def test_turn_text_is_printable_and_bounded() -> None:
    history = [f'type "{"x" * 300}" at [1, 2]'] * 60 + ["pool_found \u201cquotes\u201d"]
    text = turn_text("Hotels in Z\u00fcrich?", history, 448, 896)
    assert len(text) <= MAX_TEXT and text.isascii()
    assert "earlier actions not shown" in text and "61. pool_found ?quotes?" in text
    assert turn_text("Hi", [], 10, 20).endswith("Actions so far: none.")


def test_episodes_are_picked_by_option_or_seed_and_bad_arguments_are_named() -> None:
    env = PersonaEnv(channel="hotel")
    assert {e.channel for e in env.episodes} == {"hotel"} and env.env_id == "persona-hotel"
    ids = {env.reset(seed=s)[1]["episode_id"] for s in range(20)}
    assert ids == {e.episode_id for e in env.episodes}
    assert env.reset(seed=5)[1] == env.reset(seed=5)[1]
    with pytest.raises(KeyError, match="no episode 'nope'"):
        env.reset(options={"episode": "nope"})
    with pytest.raises(ValueError, match="no hotel val episodes"):
        PersonaEnv(channel="hotel", split="val")
    with pytest.raises(ValueError, match="mode must be"):
        PersonaEnv(mode="live")
    with pytest.raises(ValueError, match="unknown channel"):
        PersonaEnv(channel="cars")
    with pytest.raises(TypeError, match="unsupported action"):
        env.step(3.5)
    parsed = parse_gui_answer("<think>t</think><answer>{'action': 'exit'}</answer>")
    assert env.step(parsed)[4]["parsed"] == GuiAction("exit").to_json()
    env.close()


def test_the_specs_make_every_channel_through_the_registry_and_gymnasium() -> None:
    assert [s.name for s in PERSONA_ENVS] == [
        "persona",
        *(f"persona-{c}" for c in PERSONA_CHANNELS),
    ]
    for spec in PERSONA_ENVS:
        env = make_env(spec.name)
        _, info = env.reset(seed=0)
        assert spec.name == env.env_id and env.mode == "replay"
        assert spec.name == "persona" or info["channel"] == spec.kwargs["channel"]
        env.close()
    gym_env = gymnasium.make("odyssey/persona-food")
    observation, _ = gym_env.reset(seed=0)
    assert gym_env.observation_space.contains(observation)
    gym_env.close()


def test_random_answers_online_never_break_the_env() -> None:
    rng = np.random.default_rng(0)
    env = PersonaEnv(mode="online", max_steps=60)
    for seed in range(4):
        env.reset(seed=seed)
        for _ in range(60):
            clickable = [e for e in env.app.screen(env.state) if e.clickable]
            kinds = ["click", "type", "scroll down", "exit", "pool_found"]
            kind = kinds[rng.choice(5, p=[0.6, 0.15, 0.1, 0.1, 0.05])]
            if kind in ("click", "type") and rng.random() < 0.8:
                point = clickable[rng.integers(len(clickable))].center
            else:
                point = (int(rng.integers(224)), int(rng.integers(448)))
            action = GuiAction(kind, point if kind in ("click", "type") else (-100, -100), "Rome")
            _, _, terminated, truncated, info = env.step(action)
            assert info["stage"] in ("search", "pool", "recommend", None)
            assert info["target_box"] is None or len(info["target_box"]) == 4
            if terminated or truncated:
                assert set(info["recommended"]) <= set(env.candidates or [])
                break
    env.close()
