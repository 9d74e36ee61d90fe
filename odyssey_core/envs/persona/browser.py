"""A real-browser renderer of a :class:`~odyssey_core.envs.persona.screen.Screen`, and a parity
check of the element tree against what headless Chromium draws and where its clicks land.

The element tree is the single truth that both renderers draw and that rewards check. The fast
renderer paints it with Pillow; this one turns it into an HTML page (:func:`screen_html`),
serves the page over loopback HTTP and drives Debian's ``/usr/bin/chromium`` with Playwright:

* :meth:`BrowserRenderer.render` is a screenshot, ``uint8[H, W, 3]``;
* :meth:`BrowserRenderer.element_boxes` measures every element with ``getBoundingClientRect``;
* :meth:`BrowserRenderer.shown_text` reads, per element, the lines of text visible in its box
  (every character the page laid out whose glyph lies inside the box, grouped by line);
* :meth:`BrowserRenderer.click` sends a real mouse click and reports which element got it.

Text is laid out once, by :func:`~odyssey_core.envs.persona.render.layout_text` (the Pillow
renderer's wrapping, sizes and places): the page draws those lines, one positioned block each,
in the same font (Pillow's bundled Aileron, embedded in the page), so both renderers show the
same words in the same lines.

:func:`check_parity` then asks, per screen, whether every measured box equals the tree's box,
whether each element shows the lines the Pillow renderer draws, and whether the browser's
clicked id equals :meth:`Screen.hit` at a set of probe points (corners, centres, points just
outside each box, seeded random points). A page that drifts from the tree (a box off by a pixel,
a row cut to its first line, a label that eats clicks meant for the button under it) shows up
there.

Pixels and points: a box ``(x0, y0, x1, y1)`` is inclusive, so its div is ``x1 - x0 + 1`` CSS
pixels wide and covers the half-open CSS interval ``[x0, x1 + 1)``. A point is a pixel index
and its click goes to the integer CSS point ``(x, y)``, which lies in the div exactly when
``x0 <= x <= x1`` (the tree's rule). Clicks stay integral because Chromium hit-tests a
fractional mouse point as the pixel area around it, which also reaches the neighbouring box.
"""

from __future__ import annotations

import base64
import html
import os
import random
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
from playwright.sync_api import BrowserContext, Page, Playwright, sync_playwright

from odyssey_core.common.images import decode_image
from odyssey_core.envs.persona.render import FastRenderer, bundled_font_bytes, layout_text
from odyssey_core.envs.persona.screen import Box, Element, Screen

__all__ = [
    "CHROMIUM",
    "DEBIAN_PACKAGES",
    "LAUNCH_FLAGS",
    "BrowserNotFoundError",
    "BrowserRenderer",
    "Mismatch",
    "PageServer",
    "ParityReport",
    "check_parity",
    "parity_points",
    "screen_html",
]

T = TypeVar("T")

CHROMIUM = Path("/usr/bin/chromium")
DEBIAN_PACKAGES: tuple[str, ...] = ("chromium", "chromium-driver")
# headless, no sandbox (root in a container), and nothing that reaches the network on its own
LAUNCH_FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--no-proxy-server",  # the pages are on loopback: no proxy from the environment
)

BACKGROUND = "#f3f4f6"
FONT_FAMILY = "OdysseyBundled"  # the Pillow renderer's font, embedded in every page
# Per role: the element's own look. Nothing here may change a box's size, so the outer div has
# no padding and no border (an inset shadow draws the border); text lines are positioned
# blocks inside it, where layout_text puts them.
ROLE_CSS: dict[str, str] = {
    "status_bar": "background:#111827;color:#f9fafb",
    "title": "color:#111827",
    "text": "color:#374151",
    "button": "background:#2563eb;color:#ffffff",
    "field": "background:#ffffff;color:#111827;box-shadow:inset 0 0 0 1px #9ca3af",
    "date": "background:#ffffff;color:#111827;box-shadow:inset 0 0 0 1px #d1d5db",
    "list_item": "background:#ffffff;color:#111827;box-shadow:inset 0 -1px 0 #e5e7eb",
    "image": "background:#cbd5e1;color:#475569",
    "sheet": "background:#ffffff;box-shadow:inset 0 2px 0 #9ca3af",
    "close": "background:#e5e7eb;color:#111827",
}
SELECTED_CSS: dict[str, str] = {
    "button": "background:#1e3a8a",
    "date": "background:#f59e0b;color:#111827;box-shadow:inset 0 0 0 1px #b45309",
    "list_item": "background:#dbeafe",
    "field": "box-shadow:inset 0 0 0 2px #2563eb",
}
SELECTED_DEFAULT_CSS = "outline:2px solid #f59e0b;outline-offset:-2px"

PAGE_CSS = """
@font-face { font-family: "%(family)s"; font-display: block;
  src: url(data:font/ttf;base64,%(font)s) format("truetype"); }
html, body { margin: 0; padding: 0; overflow: hidden; background: %(bg)s; }
#screen { position: absolute; left: 0; top: 0; overflow: hidden; width: %(w)dpx;
  height: %(h)dpx; font-family: "%(family)s"; font-weight: normal; user-select: none;
  font-kerning: normal; text-rendering: optimizeLegibility; }
.el { position: absolute; box-sizing: border-box; overflow: hidden; margin: 0; padding: 0;
  border: 0; pointer-events: none; }
.el.clickable, .el.role-sheet { pointer-events: auto; }
.el * { pointer-events: none; }
.el .line { position: absolute; margin: 0; padding: 0; white-space: pre; overflow: visible; }
.el .line.centered { left: 0; right: 0; text-align: center; }
.el .placeholder { color: #9ca3af; }
.el .secondary { color: #4b5563; }
"""

# A click is recorded for the element it lands on. Only clickable elements and sheets take
# pointer events (CSS above), so the target is the topmost clickable element or sheet, or the
# screen itself; a sheet and the bare screen record null, like Screen.hit.
PAGE_SCRIPT = """
window.odysseyClicks = [];
document.addEventListener("click", (event) => {
  const el = event.target.closest("[data-id]");
  window.odysseyClicks.push(el !== null && el.dataset.clickable === "1" ? el.dataset.id : null);
}, true);
"""

JS_BOXES = """() => Array.from(document.querySelectorAll("#screen > [data-id]"), (el) => {
  const r = el.getBoundingClientRect();
  return [el.dataset.id, r.left, r.top, r.right, r.bottom];
})"""
# Per element, the text visible in its box: every laid-out character whose glyph's centre lies
# inside the element's rect (the div clips the rest), grouped into lines by vertical position,
# top to bottom. Only the page's geometry is read, not how the page was built.
JS_SHOWN_TEXT = """() => Array.from(document.querySelectorAll("#screen > [data-id]"), (el) => {
  const box = el.getBoundingClientRect();
  const lines = [];
  const range = document.createRange();
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node !== null; node = walker.nextNode()) {
    if (getComputedStyle(node.parentElement).visibility !== "visible") continue;
    for (let i = 0; i < node.length; i++) {
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rects = range.getClientRects();
      if (rects.length === 0 || rects[0].width === 0) continue;  // collapsed white space
      const r = rects[0];
      const cx = (r.left + r.right) / 2, cy = (r.top + r.bottom) / 2;
      if (cx < box.left || cx >= box.right || cy < box.top || cy >= box.bottom) continue;
      let line = lines.find((l) => Math.abs(l.cy - cy) < r.height / 2);
      if (line === undefined) {
        line = { cy: cy, chars: [] };
        lines.push(line);
      }
      line.chars.push([r.left, node.data[i]]);
    }
  }
  lines.sort((a, b) => a.cy - b.cy);
  const text = lines.map((l) => l.chars.sort((a, b) => a[0] - b[0]).map((c) => c[1]).join(""));
  return [el.dataset.id, text.map((t) => t.trim()).filter((t) => t.length > 0)];
})"""
JS_FONT_READY = f"""async () => {{ await document.fonts.load('16px "{FONT_FAMILY}"');
  await document.fonts.ready; return document.fonts.check('16px "{FONT_FAMILY}"'); }}"""
JS_VIEWPORT = """() => { const d = document.documentElement;
  return [d.clientWidth, d.clientHeight, d.scrollWidth, d.scrollHeight]; }"""


class BrowserNotFoundError(RuntimeError):
    """Headless Chromium is not installed where the renderer looks for it."""


def _element_html(element: Element, z: int, screen_width: int, font_scale: float) -> str:
    """One absolutely positioned div; z-index follows paint order; one positioned block per
    line of text, where :func:`layout_text` puts it."""
    x0, y0, x1, y1 = element.box
    w, h = x1 - x0 + 1, y1 - y0 + 1
    style = f"left:{x0}px;top:{y0}px;width:{w}px;height:{h}px;z-index:{z};"
    style += ROLE_CSS[element.role]
    classes = ["el", f"role-{element.role}"]
    if element.clickable:
        classes.append("clickable")
    if element.selected:
        classes.append("selected")
        style += ";" + SELECTED_CSS.get(element.role, SELECTED_DEFAULT_CSS)
    layout = layout_text(element, screen_width, font_scale)
    lines = []
    for k, line in enumerate(layout.lines):
        kinds = ["line"]
        if layout.centered:
            kinds.append("centered")
        if layout.placeholder:
            kinds.append("placeholder")
        elif element.role == "list_item" and k > 0:
            kinds.append("secondary")
        top = layout.top + k * layout.line_height
        place = f"top:{top}px;height:{layout.line_height}px;line-height:{layout.line_height}px;"
        place += f"font-size:{layout.size}px;"
        if not layout.centered:
            place += f"left:{layout.pad}px;"
        lines.append(f'<div class="{" ".join(kinds)}" style="{place}">{html.escape(line)}</div>')
    body = "".join(lines)
    return (
        f'<div class="{" ".join(classes)}" data-id="{html.escape(element.id, quote=True)}" '
        f'data-role="{element.role}" data-clickable="{int(element.clickable)}" '
        f'style="{html.escape(style, quote=True)}">{body}</div>'
    )


FONT_BASE64 = base64.b64encode(bundled_font_bytes()).decode("ascii")  # read once, per import


def screen_html(screen: Screen, font_scale: float = 1.0) -> str:
    """A self-contained page (inline CSS, font and script, nothing fetched) that draws
    ``screen`` at exactly ``width x height`` CSS pixels: one absolutely positioned div per
    element, in paint order, each with ``data-id``, showing the lines :func:`layout_text` lays
    out (``font_scale`` as the Pillow renderer's); a click handler logs the id that received
    each click in ``window.odysseyClicks`` (null when no clickable element got it)."""
    css = PAGE_CSS % {
        "bg": BACKGROUND,
        "w": screen.width,
        "h": screen.height,
        "family": FONT_FAMILY,
        "font": FONT_BASE64,
    }
    divs = "\n".join(
        _element_html(e, z, screen.width, font_scale)
        for z, e in enumerate(screen.elements, start=1)
    )
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8">'
        '<link rel="icon" href="data:,">'  # no favicon request
        f"<title>{html.escape(screen.name)}</title><style>{css}</style></head>\n"
        f'<body><div id="screen" data-screen="{html.escape(screen.name, quote=True)}">\n'
        f"{divs}\n</div><script>{PAGE_SCRIPT}</script></body></html>\n"
    )


class _PageHandler(BaseHTTPRequestHandler):
    server: _LoopbackServer

    def do_GET(self) -> None:
        body = self.server.pages.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per page load would drown the test output


class _LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    pages: dict[str, bytes]


class PageServer:
    """A loopback HTTP server (a thread, an OS-chosen port) serving the latest published page."""

    def __init__(self) -> None:
        self._count = 0
        self._httpd = _LoopbackServer(("127.0.0.1", 0), _PageHandler)
        self._httpd.pages = {}
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="persona-page-server", daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def publish(self, page: str) -> str:
        """Serve ``page`` (replacing the previous one) and answer its URL."""
        self._count += 1
        path = f"/screen/{self._count}.html"
        self._httpd.pages = {path: page.encode("utf-8")}  # one page at a time
        return self.base_url + path

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class BrowserRenderer:
    """Headless Chromium showing one screen at a time: one browser and one page reused across
    calls; a page equal to the one shown is not loaded again.

    ``html_for`` turns a screen into its page (:func:`screen_html`); a test passes another to
    draw a page that disagrees with the tree. Playwright's sync API allows one instance per
    thread and none inside a running asyncio loop, so each renderer drives its browser from a
    worker thread of its own: any thread may call it, and several renderers can be open at
    once; each call is one job there, so calls from several threads do not interleave.
    Close it (or use ``with``): that ends the browser and removes its profile.
    """

    def __init__(
        self,
        executable: str | Path = CHROMIUM,
        *,
        html_for: Callable[[Screen], str] = screen_html,
        timeout_ms: float = 15_000,
    ) -> None:
        executable = Path(executable)
        if not executable.is_file():
            raise BrowserNotFoundError(
                f"headless Chromium not found at {executable}: install the Debian packages "
                f"{' '.join(DEBIAN_PACKAGES)} (`make setup` installs them; by hand: "
                f"apt-get install -y --no-install-recommends {' '.join(DEBIAN_PACKAGES)})"
            )
        self.html_for = html_for
        self.profile_dir = Path(tempfile.mkdtemp(prefix="persona-chromium-"))  # --user-data-dir
        self._shown: str | None = None  # the shown page's html
        self._size: tuple[int, int] | None = None
        self._playwright: Playwright | None = None
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._server: PageServer | None = None
        self._worker: ThreadPoolExecutor | None = None
        try:
            self._server = PageServer()
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="persona-browser")
            self._run(self._launch, str(executable), timeout_ms)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> BrowserRenderer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the browser (through Playwright), the page server, and delete the profile."""
        worker, self._worker = self._worker, None
        try:
            if worker is not None:
                try:
                    worker.submit(self._quit).result()
                finally:
                    worker.shutdown(wait=True)
        finally:
            if self._server is not None:
                self._server.close()
                self._server = None
            shutil.rmtree(self.profile_dir, ignore_errors=True)

    def show(self, screen: Screen) -> None:
        """Load ``screen``'s page at its exact size (nothing to do when it is already shown)."""
        self._run_on(screen, lambda: None)

    def render(self, screen: Screen) -> np.ndarray:
        """The screenshot of ``screen``: ``uint8[height, width, 3]`` RGB."""
        png = self._run_on(screen, self._screenshot)
        image = decode_image(png)
        if image.shape != (screen.height, screen.width, 3):
            raise RuntimeError(
                f"screenshot of {screen.name!r} is {image.shape}, expected "
                f"{(screen.height, screen.width, 3)}"
            )
        return image

    def element_boxes(self, screen: Screen) -> dict[str, Box]:
        """Every drawn element's box, measured: the CSS rect ``[left, right) x [top, bottom)``
        back to inclusive pixels ``(left, top, right - 1, bottom - 1)``, rounded to integers."""
        return {
            str(eid): (round(left), round(top), round(right) - 1, round(bottom) - 1)
            for eid, left, top, right, bottom in self._run_on(screen, self._evaluate, JS_BOXES)
        }

    def shown_text(self, screen: Screen) -> dict[str, tuple[str, ...]]:
        """Per drawn element id, the lines of text visible inside its box, top to bottom, each
        stripped (read from the laid-out page: a character clipped by the box is not shown)."""
        return {
            str(eid): tuple(str(line) for line in lines)
            for eid, lines in self._run_on(screen, self._evaluate, JS_SHOWN_TEXT)
        }

    def viewport(self, screen: Screen) -> tuple[int, int, int, int]:
        """``(clientWidth, clientHeight, scrollWidth, scrollHeight)`` of the shown page: all
        four equal the screen's size when nothing scrolls or overflows."""
        cw, ch, sw, sh = (int(v) for v in self._run_on(screen, self._evaluate, JS_VIEWPORT))
        return cw, ch, sw, sh

    def clicks(self, screen: Screen, points: Iterable[tuple[int, int]]) -> list[str | None]:
        """One real mouse click per point (pixel indices), in order: the id of the clickable
        element that received each, or None. A point off the screen clicks nothing: None."""
        points = [_pixel(p) for p in points]
        inside = [0 <= x < screen.width and 0 <= y < screen.height for x, y in points]
        sent = [p for p, on in zip(points, inside, strict=True) if on]
        log = self._run_on(screen, self._click_all, sent)
        if len(log) != sum(inside):
            raise RuntimeError(
                f"screen {screen.name!r}: {sum(inside)} clicks sent, {len(log)} recorded"
            )
        answers = iter(log)
        return [next(answers) if on else None for on in inside]

    def click(self, screen: Screen, point: tuple[int, int]) -> str | None:
        """The id of the element that received a real mouse click at ``point``, or None."""
        return self.clicks(screen, [point])[0]

    # everything below runs on the worker thread, the only one that touches Playwright

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._worker is None:
            raise RuntimeError("the browser renderer is closed")
        return self._worker.submit(fn, *args).result()

    def _run_on(self, screen: Screen, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` with ``screen`` shown, as one job: calls from several threads do not
        interleave a page load between showing a screen and using it."""
        page = self.html_for(screen)

        def job() -> T:
            self._show(page, screen.width, screen.height)
            return fn(*args)

        return self._run(job)

    def _launch(self, executable: str, timeout_ms: float) -> None:
        self._playwright = sync_playwright().start()
        self._context = self._playwright.chromium.launch_persistent_context(
            self.profile_dir,
            executable_path=executable,
            headless=True,
            args=list(LAUNCH_FLAGS),
            viewport={"width": 360, "height": 640},
            device_scale_factor=1,
            timeout=timeout_ms,
            # Chromium keeps its crash-report folder under XDG_CONFIG_HOME whatever the
            # --user-data-dir; pointing it into the profile keeps the home directory clean
            env={
                **os.environ,
                "XDG_CONFIG_HOME": str(self.profile_dir / "xdg-config"),
                "XDG_CACHE_HOME": str(self.profile_dir / "xdg-cache"),
            },
        )
        self._context.set_default_timeout(timeout_ms)
        self._page = self._context.pages[0] if self._context.pages else self._context.new_page()

    def _quit(self) -> None:
        context, playwright = self._context, self._playwright
        self._context = self._playwright = self._page = None
        try:
            if context is not None:
                context.close()
        finally:
            if playwright is not None:
                playwright.stop()

    def _show(self, page: str, width: int, height: int) -> None:
        assert self._page is not None and self._server is not None
        if page == self._shown and self._size == (width, height):
            return
        if self._size != (width, height):
            self._page.set_viewport_size({"width": width, "height": height})
            self._size = (width, height)
        self._page.goto(self._server.publish(page), wait_until="load")
        if not self._page.evaluate(JS_FONT_READY):
            raise RuntimeError(
                f"Chromium did not load the embedded font {FONT_FAMILY!r}: the page would fall "
                "back to a system font and lay its text out unlike the Pillow renderer"
            )
        self._shown = page

    def _screenshot(self) -> bytes:
        assert self._page is not None
        return self._page.screenshot(type="png", animations="disabled", caret="hide")

    def _evaluate(self, script: str) -> Any:
        assert self._page is not None
        return self._page.evaluate(script)

    def _click_all(self, points: list[tuple[int, int]]) -> list[str | None]:
        assert self._page is not None
        self._page.evaluate("() => { window.odysseyClicks = []; }")
        for x, y in points:
            self._page.mouse.click(x, y)  # integral: an exact point hit test
        return self._page.evaluate("() => window.odysseyClicks")


def _pixel(point: tuple[float, float]) -> tuple[int, int]:
    x, y = point
    if int(x) != x or int(y) != y:
        raise ValueError(f"a click point is a pixel index (integers), got {point!r}")
    return int(x), int(y)


@dataclass(frozen=True)
class Mismatch:
    """One disagreement: ``kind`` is ``viewport``, ``box``, ``text`` (the lines shown differ
    from the Pillow renderer's), ``missing`` (in the tree, not on the page), ``extra`` (on the
    page, not in the tree) or ``click`` (at ``point``)."""

    screen: str
    kind: str
    element_id: str | None
    expected: Any
    measured: Any
    point: tuple[int, int] | None = None

    def __str__(self) -> str:
        at = "" if self.point is None else f" at {list(self.point)}"
        return (
            f"{self.screen}: {self.kind} {self.element_id!r}{at}: expected {self.expected!r}, "
            f"measured {self.measured!r}"
        )


@dataclass
class ParityReport:
    """What :func:`check_parity` compared and every mismatch it found."""

    mismatches: list[Mismatch] = field(default_factory=list)
    screens: int = 0
    elements: int = 0
    points: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        head = (
            f"parity {'ok' if self.ok else 'FAILED'}: {self.screens} screens, "
            f"{self.elements} elements, {self.points} click points, "
            f"{len(self.mismatches)} mismatches"
        )
        return "\n".join([head, *(f"  {m}" for m in self.mismatches)])


def parity_points(
    screen: Screen, points_per_element: int, rng: random.Random
) -> list[tuple[int, int]]:
    """Probe points, on the screen, without repeats: for every element its centre, its four
    corners (borders are inside), the four pixels diagonally outside its corners and the four
    just outside its edge midpoints; ``points_per_element`` random pixels inside its box and as
    many anywhere on the screen."""
    points: list[tuple[int, int]] = []
    for e in screen.elements:
        x0, y0, x1, y1 = e.box
        cx, cy = e.center
        points += [(cx, cy), (x0, y0), (x1, y0), (x0, y1), (x1, y1)]
        points += [(x0 - 1, y0 - 1), (x1 + 1, y0 - 1), (x0 - 1, y1 + 1), (x1 + 1, y1 + 1)]
        points += [(x0 - 1, cy), (x1 + 1, cy), (cx, y0 - 1), (cx, y1 + 1)]
        for _ in range(points_per_element):
            points.append((rng.randint(x0, x1), rng.randint(y0, y1)))
            points.append((rng.randrange(screen.width), rng.randrange(screen.height)))
    on_screen = (p for p in points if 0 <= p[0] < screen.width and 0 <= p[1] < screen.height)
    return list(dict.fromkeys(on_screen))


def check_parity(
    screens: Sequence[Screen],
    browser: BrowserRenderer,
    points_per_element: int = 2,
    seed: int = 0,
    fast: FastRenderer | None = None,
    clicks: bool = True,
) -> ParityReport:
    """Compare each screen's tree with the browser's page: the viewport is exactly the screen
    (no scrollbars), every element's measured box equals its tree box, every element shows the
    lines of text ``fast`` (default :class:`FastRenderer`) draws for it, and, with ``clicks``,
    at every :func:`parity_points` point the id a real click reaches equals
    ``screen.hit(point)``."""
    rng = random.Random(seed)
    fast = fast or FastRenderer()
    report = ParityReport()
    for screen in screens:
        report.screens += 1
        report.elements += len(screen.elements)
        want_view = (screen.width, screen.height, screen.width, screen.height)
        got_view = browser.viewport(screen)
        if got_view != want_view:
            report.mismatches.append(Mismatch(screen.name, "viewport", None, want_view, got_view))
        measured = browser.element_boxes(screen)
        for e in screen.elements:
            got_box = measured.get(e.id)
            if got_box is None:
                report.mismatches.append(Mismatch(screen.name, "missing", e.id, e.box, None))
            elif got_box != e.box:
                report.mismatches.append(Mismatch(screen.name, "box", e.id, e.box, got_box))
        tree_ids = {e.id for e in screen.elements}
        for eid in sorted(set(measured) - tree_ids):
            report.mismatches.append(Mismatch(screen.name, "extra", eid, None, measured[eid]))
        shown = browser.shown_text(screen)
        for eid, drawn in fast.shown_text(screen).items():
            # runs of spaces read as one: what is compared is the words and their lines
            want_text = tuple(" ".join(line.split()) for line in drawn if line.strip())
            got_text = shown.get(eid)
            got_text = None if got_text is None else tuple(" ".join(t.split()) for t in got_text)
            if got_text is not None and got_text != want_text:
                report.mismatches.append(Mismatch(screen.name, "text", eid, want_text, got_text))
        if not clicks:
            continue
        points = parity_points(screen, points_per_element, rng)
        report.points += len(points)
        for point, got in zip(points, browser.clicks(screen, points), strict=True):
            hit = screen.hit(point)
            want = None if hit is None else hit.id
            if got != want:
                report.mismatches.append(
                    Mismatch(screen.name, "click", want or got, want, got, point=point)
                )
    return report
