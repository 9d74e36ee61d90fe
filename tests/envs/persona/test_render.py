"""The Pillow renderer: same screen, same bytes; everything drawn inside its box; styles by
role (selection and field values show)."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from odyssey_core.envs.persona.app import AppState, PersonaApp
from odyssey_core.envs.persona.render import BACKGROUND, ROLE_STYLES, FastRenderer
from odyssey_core.envs.persona.screen import Element, Screen
from odyssey_core.envs.persona.users import sample_user
from odyssey_core.protocol.gui import GuiAction


def screens(size: tuple[int, int]) -> list[Screen]:
    """A hotel app's home, form (with a value), date sheet, results, filters and a card."""
    user = sample_user("hotel", random.Random(5))
    app = PersonaApp({"catalog_seed": 0, "user": user.to_json(), "popup": None}, *size)

    def click(state: AppState, element_id: str) -> AppState:
        return app.apply(state, GuiAction("click", app.screen(state).element(element_id).center))

    home = app.initial_state()
    form = click(home, "app-hotel").with_field("hotel", "city", "Paris")
    dates = click(form, "field-date")
    results = click(form, "search")
    sheet = click(click(results, "filters"), "chip-stars-4")
    card = app.detail_state(results, app.pool(results)[0])
    return [app.screen(s) for s in (home, form, dates, results, sheet, card)]


@pytest.mark.parametrize("size", [(224, 448), (448, 896)])
def test_same_screen_gives_byte_identical_pixels(size: tuple[int, int]) -> None:
    for screen in screens(size):
        a = FastRenderer().render(screen)
        b = FastRenderer().render(Screen.from_json(screen.to_json()))
        assert a.dtype == np.uint8 and a.shape == (size[1], size[0], 3)
        assert a.tobytes() == b.tobytes()


def _covered(screen: Screen, index: int) -> bool:
    """Whether a later element's box overlaps element ``index``'s box."""
    x0, y0, x1, y1 = screen.elements[index].box
    for later in screen.elements[index + 1 :]:
        a0, b0, a1, b1 = later.box
        if a0 <= x1 and x0 <= a1 and b0 <= y1 and y0 <= b1:
            return True
    return False


def test_nothing_is_drawn_outside_the_boxes_and_every_element_shows_in_its_box() -> None:
    background = np.array(BACKGROUND, np.uint8)
    for screen in screens((224, 448)):
        image = FastRenderer().render(screen)
        outside = np.ones(image.shape[:2], bool)
        for e in screen:
            x0, y0, x1, y1 = e.box
            outside[y0 : y1 + 1, x0 : x1 + 1] = False
        assert (image[outside] == background).all(), screen.name
        for k, e in enumerate(screen.elements):
            if _covered(screen, k):
                continue
            x0, y0, x1, y1 = e.box
            region = image[y0 : y1 + 1, x0 : x1 + 1]
            visible = ROLE_STYLES[e.role].fill is not None or bool(e.text or e.value)
            if visible:
                assert (region != background).any(axis=-1).any(), (screen.name, e.id)


def test_selection_and_field_values_are_drawn() -> None:
    renderer = FastRenderer()
    chip = Element("chip", "button", (10, 10, 69, 39), "4", "chip:stars:4")
    field = Element("city", "field", (10, 50, 109, 79), "City", "focus:city")

    def pixels(*elements: Element) -> np.ndarray:
        return renderer.render(Screen("s", 120, 100, elements))

    plain, chosen = pixels(chip), pixels(replace(chip, selected=True))
    assert tuple(chosen[12, 30]) == (37, 99, 235) != tuple(plain[12, 30])  # filled when chosen
    empty, typed = pixels(field), pixels(replace(field, value="Lisbon"))
    assert not np.array_equal(empty, typed)
    focused = pixels(replace(field, selected=True))
    assert tuple(focused[50, 60]) == (37, 99, 235)  # the focused field's blue border


def test_long_text_is_cut_to_its_box() -> None:
    long = Element("t", "text", (5, 5, 54, 20), "a very long label " * 10)
    image = FastRenderer().render(Screen("s", 80, 40, (long,)))
    outside = np.ones(image.shape[:2], bool)
    outside[5:21, 5:55] = False
    assert (image[outside] == np.array(BACKGROUND, np.uint8)).all()
    assert (image[5:21, 5:55] != np.array(BACKGROUND, np.uint8)).any()
