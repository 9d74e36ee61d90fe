"""The browser renderer in real headless Chromium (Debian's ``/usr/bin/chromium``, which
``make setup`` installs): measured boxes and real clicks agree with the element tree, a page
that disagrees with the tree is reported, and screenshots have the screen's size and colours.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterator

import numpy as np
import pytest

from odyssey_core.envs.persona.browser import (
    BrowserNotFoundError,
    BrowserRenderer,
    Mismatch,
    check_parity,
    parity_points,
    screen_html,
)
from odyssey_core.envs.persona.screen import Element, Screen

W, H = 120, 200


def page_screen() -> Screen:
    """Overlapping elements: a label over a button (it must not block the button), two
    overlapping buttons (the later wins), a button without a command, edge-touching bars."""
    return Screen(
        "page",
        W,
        H,
        (
            Element("status", "status_bar", (0, 0, W - 1, 9), "9:41"),
            Element("city", "field", (4, 14, 115, 29), "City", command="focus:city", value="Rome"),
            Element("search", "button", (60, 34, 115, 49), "Search", command="search"),
            Element("label", "text", (64, 38, 100, 45), "label over the button"),
            Element("under", "button", (4, 34, 40, 49), "Under", command="under"),
            Element("over", "button", (30, 40, 55, 60), "Over", command="over", selected=True),
            Element("dead", "button", (4, 64, 40, 79), "no command"),
            Element("inert", "text", (4, 66, 20, 70), "on a dead button"),
            Element("item-0", "list_item", (0, 84, W - 1, 113), "Hotel One", command="open:0"),
            Element("photo", "image", (2, 86, 27, 111)),
            Element("dot", "button", (70, 120, 70, 120), command="dot"),  # a single pixel
            Element("tab-bar", "button", (0, H - 16, W - 1, H - 1), "Tabs", command="tabs"),
        ),
    )


def sheet_screen() -> Screen:
    """A sheet over the lower page with a close button and a chip on it; a button after the
    sheet that pokes out above it."""
    page = page_screen()
    return Screen(
        "sheet",
        W,
        H,
        (
            *page.elements,
            Element("sheet", "sheet", (0, 60, W - 1, H - 1)),
            Element("chip", "button", (6, 80, 50, 95), "Pool", command="chip:pool"),
            Element("day", "date", (60, 80, 80, 95), "12", command="date:12", selected=True),
            Element("close", "close", (W - 14, 60, W - 1, 73), command="close"),
            Element("poke", "button", (90, 50, 110, 70), "Poke", command="poke"),
        ),
    )


def small_screen() -> Screen:
    """Another size, so the viewport is resized between screens."""
    return Screen(
        "small",
        40,
        30,
        (
            Element("all", "button", (0, 0, 39, 29), command="all"),
            Element("corner", "close", (30, 0, 39, 9), command="close"),
        ),
    )


def shifted(screen: Screen, element_id: str, dx: int) -> Screen:
    """``screen`` with one element moved ``dx`` pixels right."""
    moved = []
    for e in screen.elements:
        if e.id == element_id:
            x0, y0, x1, y1 = e.box
            e = dataclasses.replace(e, box=(x0 + dx, y0, x1 + dx, y1))
        moved.append(e)
    return dataclasses.replace(screen, elements=tuple(moved))


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserRenderer]:
    with BrowserRenderer() as renderer:  # fails with the Debian packages to install if absent
        yield renderer


def test_parity_holds_on_hand_built_screens(browser: BrowserRenderer) -> None:
    screens = [page_screen(), sheet_screen(), small_screen()]
    report = check_parity(screens, browser, points_per_element=3, seed=7)
    assert report.ok, str(report)
    assert (report.screens, report.elements) == (3, 12 + 17 + 2)
    assert report.points > 200


def test_measured_boxes_are_the_tree_boxes(browser: BrowserRenderer) -> None:
    screen = sheet_screen()
    assert browser.element_boxes(screen) == {e.id: e.box for e in screen}
    assert browser.viewport(screen) == (W, H, W, H)


def test_clicks_follow_hit_rules(browser: BrowserRenderer) -> None:
    page, sheet = page_screen(), sheet_screen()
    points_and_ids = [
        ((60, 34), "search"),  # top-left corner: borders are inside
        ((115, 49), "search"),  # bottom-right corner
        ((116, 49), None),  # one pixel right of it
        ((70, 40), "search"),  # under the label: the label does not block
        ((35, 45), "over"),  # where two buttons overlap, the later one
        ((10, 70), None),  # a button without a command answers nothing
        ((70, 120), "dot"),
        ((71, 120), None),
        ((0, H - 1), "tab-bar"),  # the screen's bottom-left pixel
        ((W - 1, 0), None),  # the status bar is not clickable
    ]
    points = [p for p, _ in points_and_ids]
    assert browser.clicks(page, points) == [want for _, want in points_and_ids]
    assert browser.click(sheet, (10, 190)) is None  # the sheet swallows the tab bar
    assert browser.click(sheet, (40, 59)) == "over"  # just above the sheet
    assert browser.click(sheet, (40, 60)) is None  # the sheet's top row covers it
    assert browser.click(sheet, (W - 1, 60)) == "close"
    assert browser.click(sheet, (100, 55)) == "poke"
    assert browser.click(sheet, (100, 65)) == "poke"  # listed after the sheet: on top of it
    assert browser.click(sheet, (-1, 10)) is None  # off the screen: nothing is clicked
    with pytest.raises(ValueError, match="pixel index"):
        browser.click(page, (60.5, 34))


def test_parity_reports_a_shifted_box() -> None:
    screen = page_screen()
    with BrowserRenderer(html_for=lambda s: screen_html(shifted(s, "search", 1))) as lying:
        report = check_parity([screen], lying, points_per_element=1)
    assert not report.ok
    boxes = [m for m in report.mismatches if m.kind != "click"]
    assert boxes == [Mismatch("page", "box", "search", (60, 34, 115, 49), (61, 34, 116, 49))]
    clicks = {m.point: (m.expected, m.measured) for m in report.mismatches if m.kind == "click"}
    assert clicks[(60, 34)] == ("search", None)  # the tree's left border, not drawn
    assert clicks[(116, 41)] == (None, "search")  # drawn one pixel past the tree's box
    assert (70, 40) not in clicks
    assert "expected (60, 34, 115, 49), measured (61, 34, 116, 49)" in str(report)


def test_parity_reports_a_label_that_eats_clicks() -> None:
    """Drawn as a sheet, the label over the search button swallows its clicks: every box
    still agrees, so only the clicks (and the label's text, a sheet's one line) can tell."""
    screen = page_screen()
    label = screen.element("label")

    def blocking_label(s: Screen) -> str:
        drawn = [dataclasses.replace(e, role="sheet") if e.id == "label" else e for e in s]
        return screen_html(dataclasses.replace(s, elements=tuple(drawn)))

    with BrowserRenderer(html_for=blocking_label) as lying:
        report = check_parity([screen], lying, points_per_element=2)
    assert not report.ok
    assert {(m.kind, m.element_id) for m in report.mismatches if m.kind != "click"} == {
        ("text", "label")
    }
    clicks = [m for m in report.mismatches if m.kind == "click"]
    assert all(label.contains(m.point) for m in clicks)
    assert {(m.element_id, m.expected, m.measured) for m in clicks} == {("search", "search", None)}
    assert label.center in {m.point for m in clicks}


def test_parity_reports_missing_and_extra_elements(browser: BrowserRenderer) -> None:
    drawn, tree = page_screen(), small_screen()
    browser.html_for = lambda s: screen_html(drawn)
    try:
        report = check_parity([tree], browser, points_per_element=0)
    finally:
        browser.html_for = screen_html
    kinds = {(m.kind, m.element_id) for m in report.mismatches}
    assert ("viewport", None) in kinds  # a 120x200 page in a 40x30 viewport scrolls
    assert {("missing", "all"), ("missing", "corner")} <= kinds
    assert ("extra", "search") in kinds


def test_render_is_an_rgb_image_of_the_screen(browser: BrowserRenderer) -> None:
    screen = page_screen()
    image = browser.render(screen)
    assert image.shape == (H, W, 3)
    assert image.dtype == np.uint8
    background = image[125, 100]  # nothing is drawn there
    assert tuple(background) == (0xF3, 0xF4, 0xF6)
    x0, y0, x1, y1 = screen.element("search").box
    assert tuple(image[y0, x0]) == (0x25, 0x63, 0xEB)  # the button's blue, at its corner
    assert tuple(image[y1, x1]) == (0x25, 0x63, 0xEB)
    assert tuple(image[y0, x0 - 1]) == tuple(background)  # and not a pixel further
    assert (image[y0 : y1 + 1, x0 : x1 + 1] != background).any(axis=-1).all()
    small = browser.render(small_screen())
    assert small.shape == (30, 40, 3)


def test_works_inside_a_running_event_loop(browser: BrowserRenderer) -> None:
    """Playwright's sync API refuses a thread with a running asyncio loop; the renderer's own
    worker thread has none, so an async caller can use it."""

    async def click_search() -> str | None:
        return browser.click(page_screen(), (61, 35))

    assert asyncio.run(click_search()) == "search"


def test_page_is_self_contained() -> None:
    screen = sheet_screen()
    page = screen_html(screen)
    assert "http:" not in page and "https:" not in page and "src=" not in page
    for e in screen:
        assert f'data-id="{e.id}"' in page
    assert "Rome" in page  # a field shows its value


def test_parity_points_probe_borders_and_just_outside() -> None:
    screen = small_screen()
    points = parity_points(screen, 0, random.Random(0))
    assert len(points) == len(set(points))
    assert all(0 <= x < 40 and 0 <= y < 30 for x, y in points)
    assert {(30, 0), (39, 9), (34, 4), (29, 4), (29, 10), (34, 10)} <= set(points)


def test_missing_chromium_names_the_debian_packages(tmp_path) -> None:
    with pytest.raises(BrowserNotFoundError, match=r"chromium chromium-driver.*make setup"):
        BrowserRenderer(executable=tmp_path / "chromium")


def test_close_removes_the_profile() -> None:
    renderer = BrowserRenderer()
    profile = renderer.profile_dir
    assert profile.is_dir()
    renderer.close()
    assert not profile.exists()
    with pytest.raises(RuntimeError, match="closed"):
        renderer.render(small_screen())
