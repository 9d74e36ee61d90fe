"""The app model, its catalogue and its users: transitions by clicks at element centres and at
arbitrary points inside and outside boxes, layouts at several sizes, the label oracle."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from odyssey_core.envs.persona.app import ROWS_PER_PAGE, AppState, PersonaApp
from odyssey_core.envs.persona.catalog import (
    APP_CHANNELS,
    CHANNEL_SPECS,
    CHANNELS,
    Item,
    catalog,
)
from odyssey_core.envs.persona.users import Preference, User, sample_user
from odyssey_core.protocol.gui import GuiAction

SIZES = ((224, 448), (448, 896), (300, 520))


def make_app(
    channel: str = "hotel", *, seed: int = 0, size: tuple[int, int] = (224, 448), popup=None
) -> PersonaApp:
    user = sample_user(channel, random.Random(f"test:{channel}:{seed}"))
    scenario = {"catalog_seed": 0, "user": user.to_json(), "popup": popup}
    return PersonaApp(scenario, *size)


def click(app: PersonaApp, state: AppState, element_id: str) -> AppState:
    return app.apply(state, GuiAction("click", app.screen(state).element(element_id).center))


def type_into(app: PersonaApp, state: AppState, element_id: str, text: str) -> AppState:
    point = app.screen(state).element(element_id).center
    return app.apply(state, GuiAction("type", point, text))


def hotel_user(**wants: str) -> dict:
    return User(
        channel="hotel",
        archetype="business traveller",
        wants={"hotel": {"city": "Rome", "date": "Jun 9", "stars": "4", "price": "mid", **wants}},
        top_m=2,
        ambiguity="vague",
        request="Somewhere to stay in Rome?",
        intent="A 4-star mid-range hotel in Rome from Jun 9; preferring being close to the centre.",
    ).to_json()


def test_clicking_centres_walks_a_hotel_search_to_the_users_pool() -> None:
    app = PersonaApp({"catalog_seed": 0, "user": hotel_user(), "popup": None}, 224, 448)
    state = click(app, app.initial_state(), "app-hotel")
    assert (state.app, state.screen) == ("hotel", "search")
    state = click(app, state, "field-city")
    assert state.focus == "city"
    state = type_into(app, state, "field-city", "  rome ")
    assert state.field("hotel", "city") == "rome"
    state = click(app, state, "field-date")
    assert state.sheet == "dates:date"
    state = click(app, state, "day-jun_9")
    assert (state.sheet, state.field("hotel", "date")) == (None, "Jun 9")
    state = click(app, state, "search")
    rome = [i.id for i in catalog("hotel", 0) if i["city"] == "Rome"]
    assert state.screen == "results" and app.pool(state) == rome[:ROWS_PER_PAGE]
    state = click(app, state, "filters")
    state = click(app, click(app, state, "chip-stars-4"), "chip-price-mid")
    state = click(app, state, "filters-done")
    user = User.from_json(hotel_user())
    wanted = [i.id for i in catalog("hotel", 0) if user.meets("hotel", i)]
    assert state.sheet is None and app.pool(state) == wanted  # listing order, all on one page
    assert len(wanted) in CHANNEL_SPECS["hotel"].items_per_cell
    state = click(app, state, f"row-{wanted[1]}")
    assert (state.screen, state.detail) == ("detail", wanted[1])
    assert app.pool(state) == []  # no list on a detail card
    state = app.apply(state, GuiAction("exit"))
    assert state.screen == "results" and app.pool(state) == wanted


def test_a_click_anywhere_in_a_box_counts_and_just_outside_does_not() -> None:
    app = make_app()
    state = click(app, app.initial_state(), "app-hotel")
    screen = app.screen(state)
    x0, y0, x1, y1 = screen.element("search").box
    rng = random.Random(0)
    inside = [(x0, y0), (x1, y1), (x0, y1), (x1, y0)]
    inside += [(rng.randint(x0, x1), rng.randint(y0, y1)) for _ in range(20)]
    for point in inside:
        assert app.apply(state, GuiAction("click", point)).screen == "results", point
    for point in [(x0 - 1, y0), (x1 + 1, y1), (x0, y1 + 1), (x1, y0 - 1)]:
        assert screen.hit(point) is None  # the page background around the button
        assert app.apply(state, GuiAction("click", point)) == state, point


def test_clicks_on_nothing_clickable_and_point_free_actions_change_nothing() -> None:
    app = make_app()
    state = click(app, app.initial_state(), "app-hotel")
    for element_id in ("status", "title", "label-city"):
        assert click(app, state, element_id) == state
    for kind in ("scroll up", "scroll down", "scroll left", "scroll right", "recommendation"):
        assert app.apply(state, GuiAction(kind)) == state  # no list on the search form
    assert app.apply(state, GuiAction("type", (1, 1), "Rome")) == state  # not on a field
    # typing onto a field's box fills that field, focused or not
    assert type_into(app, state, "field-city", "Lisbon").field("hotel", "city") == "Lisbon"


def test_a_popup_covers_its_screen_once_and_exit_or_close_dismisses_it() -> None:
    app = make_app("movie", popup="search")
    state = click(app, app.initial_state(), "app-movie")
    assert state.sheet == "popup" and app.screen(state).name == "search+popup"
    sheet = app.screen(state).element("popup-sheet").box
    assert app.screen(state).hit(((sheet[0] + sheet[2]) // 2, sheet[3] - 2)) is None  # swallowed
    closed = [app.apply(state, GuiAction("exit"))]
    closed += [click(app, state, "popup-close"), click(app, state, "popup-dismiss")]
    assert all(c.sheet is None and c.screen == "search" for c in closed)
    state = closed[0]
    home = app.apply(state, GuiAction("exit"))
    assert (home.app, home.screen) == (None, "home")
    again = click(app, home, "app-movie")
    assert again.sheet is None  # shown only the first time


def test_scrolling_moves_half_a_page_within_bounds_and_chips_toggle() -> None:
    app = make_app("hotel")
    state = click(app, app.initial_state(), "app-hotel")
    state = click(app, type_into(app, state, "field-city", "Paris"), "search")
    n = len(app.results(state))
    assert n > 2 * ROWS_PER_PAGE
    assert app.apply(state, GuiAction("scroll up")).scroll == 0
    down = app.apply(state, GuiAction("scroll down"))
    assert down.scroll == 4 and app.pool(down) == [i.id for i in app.results(state)[4:12]]
    bottom = down
    for _ in range(n):
        bottom = app.apply(bottom, GuiAction("scroll down"))
    assert bottom.scroll == n - ROWS_PER_PAGE
    sheet = click(app, down, "filters")
    assert app.apply(sheet, GuiAction("scroll down")) == sheet  # the sheet holds the page
    cheap = click(app, sheet, "chip-price-budget")
    assert cheap.chip("hotel", "price") == "budget" and cheap.scroll == 0
    assert click(app, cheap, "chip-price-luxury").chip("hotel", "price") == "luxury"
    assert click(app, cheap, "chip-price-budget").chip("hotel", "price") is None


def test_booking_the_trips_flight_fills_the_hotel_search() -> None:
    app = make_app("travel")
    state = click(app, app.initial_state(), "app-flight")
    state = type_into(app, state, "field-destination", "Tokyo")
    state = click(app, click(app, state, "field-date"), "day-jun_14")
    state = click(app, state, "search")
    first = app.pool(state)[0]
    state = click(app, click(app, state, f"row-{first}"), "book")
    assert (state.screen, state.booked) == ("home", (first,))
    assert "banner" in [e.id for e in app.screen(state)]
    hotel = click(app, state, "app-hotel")
    assert hotel.field("hotel", "city") == "Tokyo" and hotel.field("hotel", "date") == "Jun 14"


def _reachable(app: PersonaApp, depth: int) -> list[AppState]:
    """States reached by clicking every clickable centre, breadth first, plus scrolls."""
    seen, frontier = {app.initial_state()}, [app.initial_state()]
    for _ in range(depth):
        nxt = []
        for state in frontier:
            actions = [GuiAction("click", e.center) for e in app.screen(state) if e.clickable]
            actions += [GuiAction("scroll down"), GuiAction("exit")]
            for action in actions:
                new = app.apply(state, action)
                if new not in seen:
                    seen.add(new)
                    nxt.append(new)
        frontier = nxt
    return list(seen)


@pytest.mark.parametrize("size", SIZES)
def test_every_screen_keeps_its_boxes_inside_and_its_ids_unique(size: tuple[int, int]) -> None:
    checked = 0
    for channel in ("hotel", "travel"):
        app = make_app(channel, size=size, popup="results")
        states = _reachable(app, 4)
        states += [app.detail_state(s, i) for s in states[:5] for i in app.pool(s)[:1]]
        for state in states:
            screen = app.screen(state)
            ids = [e.id for e in screen]
            assert len(ids) == len(set(ids))
            for e in screen:
                x0, y0, x1, y1 = e.box
                assert 0 <= x0 <= x1 < size[0] and 0 <= y0 <= y1 < size[1], (screen.name, e)
                assert all(isinstance(v, int) for v in e.box)
            assert app.screen(state) == screen  # the same state, the same screen
            checked += 1
    assert checked > 50


def test_apply_is_pure_and_deterministic() -> None:
    a, b = make_app("flight", seed=3), make_app("flight", seed=3)
    state = a.initial_state()
    rng = random.Random(1)
    for _ in range(40):
        clickable = [e for e in a.screen(state) if e.clickable]
        action = GuiAction("click", rng.choice(clickable).center)
        before = state
        state = a.apply(state, action)
        assert b.apply(before, action) == state
        assert AppState.from_json(state.to_json()) == state


def test_each_filter_combination_has_one_page_of_items_and_catalogues_are_seeded() -> None:
    for channel in APP_CHANNELS:
        spec = CHANNEL_SPECS[channel]
        items = catalog(channel, 0)
        assert len({i.id for i in items}) == len(items)
        filtering = [s for s in spec.slots if s.filters]
        for values in itertools.product(*(s.values for s in filtering)):
            cell = [
                i
                for i in items
                if all(i[s.name] == v for s, v in zip(filtering, values, strict=True))
            ]
            assert len(cell) in spec.items_per_cell
            assert len(cell) <= ROWS_PER_PAGE
        assert catalog.__wrapped__(channel, 0) == items
        assert catalog.__wrapped__(channel, 1) != items
        for item in items:
            assert all(ord(c) < 128 for c in item.name)


def test_preference_ranks_by_min_max_scaled_weighted_sum() -> None:
    def item(name: str, price: int, rating: float) -> Item:
        return Item(name, "hotel", name, (("nightly", price), ("rating", rating)))

    a, b, c = item("A", 100, 8.0), item("B", 200, 9.0), item("C", 300, 6.0)
    # price scaled 0, .5, 1 (weight -1); rating scaled 2/3, 1, 0 (weight .5):
    # A = 0 + 1/3, B = -.5 + .5 = 0, C = -1 + 0
    preference = Preference((("nightly", -1.0), ("rating", 0.5)), "cheap")
    assert [i.id for i in preference.rank([c, b, a])] == ["A", "B", "C"]
    # a tie (B and a copy of B) goes to the smaller id
    assert [i.id for i in preference.rank([b, item("B0", 200, 9.0)])] == ["B", "B0"]


def test_the_label_oracle_says_yes_to_the_top_m_meeting_every_explicit_slot() -> None:
    user = User.from_json(hotel_user())
    items = catalog("hotel", 0)
    meeting = [i for i in items if user.meets("hotel", i)]
    assert len(meeting) == 4 and all(i["city"] == "Rome" for i in meeting)

    def scaled(i: Item, key: str) -> float:
        values = [m[key] for m in meeting]
        return (i[key] - min(values)) / (max(values) - min(values))

    # the business traveller: -1 x distance + 0.2 x rating, both min-max scaled
    best = sorted(meeting, key=lambda i: -(-scaled(i, "distance") + 0.2 * scaled(i, "rating")))
    assert [i.id for i in user.ranked("hotel", items)] == [i.id for i in best]
    yes = user.yes_items(items)
    assert len(yes) == user.top_m == 2
    for i in items:
        assert user.label(i, items) == ("Yes" if i.id in yes else "No")
    outsider = next(i for i in items if i["city"] != "Rome")
    assert user.label(outsider, items) == "No"


@pytest.mark.parametrize("channel", CHANNELS)
def test_users_state_their_intent_in_words_and_slots(channel: str) -> None:
    levels = {}
    for k in range(12):
        user = sample_user(channel, random.Random(k))
        assert User.from_json(user.to_json()) == user
        assert user.request and user.request.isascii() and user.intent.isascii()
        slots = user.intent_slots()
        assert set(slots) >= {s.name for app in user.apps for s in CHANNEL_SPECS[app].slots}
        assert slots["preference"] in user.intent
        levels[user.ambiguity] = user.request
    assert set(levels) == {"specified", "partial", "vague"}
    specified = sample_user(channel, random.Random(0), "specified")
    for app in specified.apps:  # a fully specified request names every typed value
        for slot in CHANNEL_SPECS[app].form:
            if slot.kind == "text":
                assert specified.wants[app][slot.name] in specified.request


def test_prefilled_fields_start_with_the_users_value_and_a_filterless_app_shows_no_filters() -> (
    None
):
    app = make_app("flight")
    origin = app.user.wants["flight"]["origin"]
    assert app.initial_state().field("flight", "origin") == origin  # the home airport
    state = click(app, app.initial_state(), "app-flight")
    assert app.screen(state).element("field-origin").value == origin
    medicine = make_app("medicine")
    state = click(medicine, medicine.initial_state(), "app-medicine")
    state = type_into(medicine, state, "field-symptom", "cough")
    state = click(medicine, type_into(medicine, state, "field-age", "child"), "search")
    ids = [e.id for e in medicine.screen(state)]
    assert "filters" not in ids and "active" not in ids
    listed = medicine.results(state)
    assert listed and all(i["symptom"] == "cough" and i["age"] == "child" for i in listed)


def test_a_trips_banner_names_the_next_app() -> None:
    app = make_app("travel_dining")
    hotel = app.user.choice("hotel", app.items("hotel"))
    state = replace(app.initial_state(), booked=(hotel.id,))
    banner = app.screen(state).element("banner").text
    assert hotel.name in banner and "restaurants" in banner
    assert app.user.apps == ("hotel", "food")
