"""The two renderers of the persona app agree on the app's own states: the screens the
demonstrator walks through in every channel, drawn by Pillow (the tree's boxes) and in headless
Chromium, have the same element boxes, and a real click at any probe point causes the same state
transition as the tree's hit test."""

from __future__ import annotations

import random

import pytest

from odyssey_core.envs.persona.app import AppState, PersonaApp
from odyssey_core.envs.persona.browser import BrowserRenderer, check_parity, parity_points
from odyssey_core.envs.persona.dataset import generate_episodes
from odyssey_core.envs.persona.demonstrator import optimal_moves, realise
from odyssey_core.envs.persona.screen import Screen
from odyssey_core.protocol.gui import GuiAction


def walk(app: PersonaApp, limit: int = 40) -> list[AppState]:
    """The states of the demonstrator's optimal path (search stage) from the first screen."""
    states = [app.initial_state()]
    for _ in range(limit):
        moves = optimal_moves(app, states[-1])
        if not moves or moves[0].action == "pool_found":
            break
        action = realise(moves[0], app.screen(states[-1]))
        states.append(app.apply(states[-1], action))
    return states


@pytest.fixture(scope="module")
def app_states() -> list[tuple[PersonaApp, AppState]]:
    out = []
    seen_channels = set()
    for episode in generate_episodes("tiny", 0):
        if episode.channel in seen_channels:
            continue
        seen_channels.add(episode.channel)
        app = PersonaApp(episode.scenario, episode.width, episode.height)
        states = walk(app)
        # a detail card and a scrolled list too, where the path has them
        out += [(app, s) for s in states]
    assert len(seen_channels) == 6
    return out


@pytest.fixture(scope="module")
def browser():
    with BrowserRenderer() as renderer:
        yield renderer


def test_boxes_and_clicks_agree_on_every_state_of_the_demonstrated_paths(
    app_states, browser
) -> None:
    screens: list[Screen] = []
    names = set()
    for app, state in app_states:
        screen = app.screen(state)
        screens.append(screen)
        names.add(screen.name)
    report = check_parity(screens, browser, points_per_element=1, seed=3)
    assert report.ok, str(report)
    assert len(names) >= 4  # home, search form, results, pop-ups, cards ...


def test_a_real_click_makes_the_same_transition_as_the_tree(app_states, browser) -> None:
    rng = random.Random(5)
    checked = 0
    for app, state in app_states[::3]:
        screen = app.screen(state)
        points = parity_points(screen, 1, rng)[:40]
        for point, clicked in zip(points, browser.clicks(screen, points), strict=True):
            if not (0 <= point[0] < screen.width and 0 <= point[1] < screen.height):
                continue
            through_tree = app.apply(state, GuiAction("click", point))
            if clicked is None:  # the browser's click landed on nothing: nothing may happen
                assert through_tree == state, (screen.name, point)
            else:  # the element the browser clicked, clicked at its centre, does the same
                centre = screen.element(clicked).center
                assert app.apply(state, GuiAction("click", centre)) == through_tree
            checked += 1
    assert checked > 100
