"""The two renderers of the persona app agree on the app's own states: the screens the
demonstrator walks through in every channel, plus a scrolled result list and a detail card per
channel, drawn by Pillow and in headless Chromium at 224x448 and 448x896, have the same element
boxes and show the same lines of text in every element (a result row keeps its name and its
summary line), and a real click at any probe point causes the same state transition as the
tree's hit test."""

from __future__ import annotations

import dataclasses
import random

import pytest

from odyssey_core.envs.persona.app import ROWS_PER_PAGE, AppState, PersonaApp
from odyssey_core.envs.persona.browser import (
    BrowserRenderer,
    check_parity,
    parity_points,
    screen_html,
)
from odyssey_core.envs.persona.catalog import item_lines
from odyssey_core.envs.persona.dataset import generate_episodes
from odyssey_core.envs.persona.demonstrator import optimal_moves, realise
from odyssey_core.envs.persona.render import FastRenderer
from odyssey_core.envs.persona.screen import Screen
from odyssey_core.protocol.gui import GuiAction

SIZES: tuple[tuple[int, int], ...] = ((224, 448), (448, 896))


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


def click(app: PersonaApp, state: AppState, element_id: str) -> AppState:
    return app.apply(state, GuiAction("click", app.screen(state).element(element_id).center))


def scrolled_and_card(app: PersonaApp, states: list[AppState]) -> list[AppState]:
    """From the path's first result list (no sheet open): the list scrolled down twice (the
    second scroll stops at the list's end where the list is short), and the detail card of
    the first row shown there, reached by clicking that row."""
    listed = next(s for s in states if s.screen == "results" and s.sheet is None)
    if len(app.results(listed)) <= ROWS_PER_PAGE:  # the search went straight to the pool:
        listed = dataclasses.replace(listed, fields=(), filters=())  # the whole catalogue
    assert len(app.results(listed)) > ROWS_PER_PAGE  # long enough to scroll
    once = app.apply(listed, GuiAction("scroll down"))
    twice = app.apply(once, GuiAction("scroll down"))
    assert 0 < once.scroll <= twice.scroll
    card = click(app, twice, f"row-{app.pool(twice)[0]}")
    assert card.screen == "detail" and card.detail == app.pool(twice)[0]
    return [once, twice, card]


@pytest.fixture(scope="module")
def app_states() -> list[tuple[dict, AppState]]:
    """(scenario, state) pairs: every channel's demonstrated path, a scrolled list, a card."""
    out = []
    seen_channels = set()
    for episode in generate_episodes("tiny", 0):
        if episode.channel in seen_channels:
            continue
        seen_channels.add(episode.channel)
        app = PersonaApp(episode.scenario, episode.width, episode.height)
        states = walk(app)
        out += [(episode.scenario, s) for s in states + scrolled_and_card(app, states)]
    assert len(seen_channels) == 7
    return out


def screens_at(app_states: list[tuple[dict, AppState]], size: tuple[int, int]) -> list[Screen]:
    """The states' screens drawn at ``size`` (states do not depend on the screen's size)."""
    apps: dict[int, PersonaApp] = {}
    screens = []
    for scenario, state in app_states:
        app = apps.setdefault(id(scenario), PersonaApp(scenario, *size))
        screens.append(app.screen(state))
    return screens


@pytest.fixture(scope="module")
def browser():
    with BrowserRenderer() as renderer:
        yield renderer


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_boxes_and_text_agree_on_paths_scrolled_lists_and_cards(app_states, browser, size) -> None:
    screens = screens_at(app_states, size)
    assert {"home", "search", "results", "detail", "results+filters"} <= {s.name for s in screens}
    assert any(state.scroll > 0 for _, state in app_states)
    report = check_parity(screens, browser, clicks=False)
    assert report.ok, str(report)
    assert report.screens == len(screens)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_result_row_shows_its_name_and_summary_in_both_renderers(
    app_states, browser, size
) -> None:
    """The row's two lines, whole: the item's name, then its first card line."""
    fast = FastRenderer()
    rows = 0
    for (scenario, state), screen in zip(app_states, screens_at(app_states, size), strict=True):
        if screen.name != "results":
            continue
        app = PersonaApp(scenario, *size)
        shown = browser.shown_text(screen)
        drawn = fast.shown_text(screen)
        for item_id in app.pool(state):
            item = app.item(item_id)
            want = (item.name, item_lines(item)[0])
            assert drawn[f"row-{item_id}"] == want, (screen.name, item_id)
            assert shown[f"row-{item_id}"] == want, (screen.name, item_id)
            rows += 1
    assert rows > 50


def one_line_rows(screen: Screen) -> str:
    """A page that draws each result row's text on one line, cut at the row's edge."""
    flat = tuple(
        dataclasses.replace(e, role="title", text=e.text.replace("\n", " "))
        if e.role == "list_item"
        else e
        for e in screen
    )
    return screen_html(dataclasses.replace(screen, elements=flat))


def test_parity_reports_rows_cut_to_one_line(app_states, browser) -> None:
    screens = [s for s in screens_at(app_states, SIZES[0]) if s.name == "results"][:2]
    browser.html_for = one_line_rows
    try:
        report = check_parity(screens, browser, clicks=False)
    finally:
        browser.html_for = screen_html
    rows = {(s.name, e.id) for s in screens for e in s if e.role == "list_item"}
    assert rows and {(m.screen, m.element_id) for m in report.mismatches} == rows
    assert {m.kind for m in report.mismatches} == {"text"}
    first = report.mismatches[0]
    assert len(first.expected) == 2 and len(first.measured) == 1


def distinct_layouts(screens: list[Screen]) -> list[Screen]:
    """One screen per layout: which element a click lands on depends only on the elements'
    roles, boxes and whether they take clicks (text takes none; each element's id on the page
    is checked with its box on every screen), so screens equal in those probe the same."""
    by_layout: dict[tuple, Screen] = {}
    for screen in screens:
        key = tuple((e.role, e.box, e.clickable) for e in screen)
        by_layout.setdefault(key, screen)
    return list(by_layout.values())


def test_clicks_agree_on_every_layout_of_the_demonstrated_paths(app_states, browser) -> None:
    screens = distinct_layouts(screens_at(app_states, SIZES[0]))
    assert {"detail", "results", "results+filters", "search+dates"} <= {s.name for s in screens}
    report = check_parity(screens, browser, points_per_element=1, seed=3)
    assert report.ok, str(report)
    assert report.points > 1000


def uncovered_point(screen: Screen, element_id: str) -> tuple[int, int]:
    """A point where the tree's hit test answers ``element_id``: its centre unless a later
    element (a sheet) covers it there, else the first such point of a grid over its box."""
    element = screen.element(element_id)
    x0, y0, x1, y1 = element.box
    step = max(1, min(x1 - x0, y1 - y0) // 8)
    grid = [(x, y) for y in range(y0, y1 + 1, step) for x in range(x0, x1 + 1, step)]
    for point in [element.center, *grid]:
        hit = screen.hit(point)
        if hit is not None and hit.id == element_id:
            return point
    raise AssertionError(f"{screen.name}: {element_id!r} is covered everywhere in the tree")


def test_a_real_click_makes_the_same_transition_as_the_tree(app_states, browser) -> None:
    rng = random.Random(5)
    checked = 0
    apps: dict[int, PersonaApp] = {}
    for scenario, state in app_states[::3]:
        app = apps.setdefault(id(scenario), PersonaApp(scenario, *SIZES[0]))
        screen = app.screen(state)
        points = parity_points(screen, 1, rng)[:40]
        for point, clicked in zip(points, browser.clicks(screen, points), strict=True):
            if not (0 <= point[0] < screen.width and 0 <= point[1] < screen.height):
                continue
            through_tree = app.apply(state, GuiAction("click", point))
            if clicked is None:  # the browser's click landed on nothing: nothing may happen
                assert through_tree == state, (screen.name, point)
            else:  # the element the browser clicked, clicked where it is on top, does the same
                on_top = uncovered_point(screen, clicked)
                assert app.apply(state, GuiAction("click", on_top)) == through_tree
            checked += 1
    assert checked > 100
