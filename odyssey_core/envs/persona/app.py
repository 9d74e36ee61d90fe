"""The phone-app model: an immutable :class:`AppState` and the screens and transitions of
:class:`PersonaApp`.

Screens: ``home`` (the five app icons), ``search`` (the app's form: typed fields, a date
field that opens a date sheet, fields the app fills from the user's profile), ``results`` (the
matching items, eight rows a page, a filter button that opens a chip sheet where the app has
filters) and ``detail`` (one item's card; in a trip's app before the last a book button).
A pop-up may cover a screen the first time it is entered; ``exit`` or its close
control dismisses it.

Transitions are pure: ``apply(state, action)`` returns a new state. A click resolves through
:meth:`Screen.hit` to the element's ``command`` (a click that hits nothing changes nothing);
``type`` fills the text field under the point; ``scroll up`` / ``scroll down`` move the list
half a page; ``exit`` closes the open sheet, else goes back one screen.

Commands (``verb:argument``): ``app:<channel>``, ``back``, ``focus:<slot>``, ``dates:<slot>``,
``pick:<slot>:<value>``, ``search``, ``filters``, ``chip:<slot>:<value>`` (toggles),
``close``, ``item:<id>``, ``book:<id>`` (booking a flight fills the hotel search with its
destination and date).

The first state has every prefilled field (:attr:`Slot.prefilled`) holding the user's value.

Layout is drawn on a 448 x 896 design grid and scaled to the screen, so every box is an exact
integer box inside the screen at any size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from odyssey_core.envs.persona.catalog import (
    APP_CHANNELS,
    CHANNEL_SPECS,
    DATES,
    ChannelSpec,
    Item,
    catalog,
    item_lines,
    matches,
)
from odyssey_core.envs.persona.screen import Box, Element, Screen
from odyssey_core.envs.persona.users import User
from odyssey_core.protocol.gui import GuiAction

__all__ = [
    "DESIGN_SIZE",
    "ROWS_PER_PAGE",
    "ROW_PITCH",
    "SCROLL_ROWS",
    "AppState",
    "PersonaApp",
    "slug",
]

DESIGN_SIZE: tuple[int, int] = (448, 896)  # the grid every layout below is written on
ROWS_PER_PAGE = 8  # a page holds the largest cell (movie showings: up to 8)
SCROLL_ROWS = 4  # a scroll moves half a page
ROW_PITCH = 84  # design units from one result row to the next
SCREENS: tuple[str, ...] = ("home", "search", "results", "detail")
CACHE_SIZE = 256

Pairs = tuple[tuple[str, str], ...]


def _set(pairs: Pairs, key: str, value: str | None) -> Pairs:
    kept = {k: v for k, v in pairs if k != key}
    if value is not None:
        kept[key] = value
    return tuple(sorted(kept.items()))


@dataclass(frozen=True)
class AppState:
    """Everything the app remembers. ``fields`` and ``filters`` map ``"<app>.<slot>"`` to a
    value (sorted pairs, so equal states compare and hash equal)."""

    app: str | None = None  # the open app; None on the home screen
    screen: str = "home"
    fields: Pairs = ()
    filters: Pairs = ()
    sheet: str | None = None  # "popup", "filters" or "dates:<slot>"
    focus: str | None = None  # the focused text field's slot
    scroll: int = 0  # the first result row shown
    detail: str | None = None  # the item the detail card shows
    booked: tuple[str, ...] = ()
    popup_seen: bool = False

    def field(self, app: str, slot: str) -> str:
        return dict(self.fields).get(f"{app}.{slot}", "")

    def chip(self, app: str, slot: str) -> str | None:
        return dict(self.filters).get(f"{app}.{slot}")

    def with_field(self, app: str, slot: str, value: str) -> AppState:
        return replace(self, fields=_set(self.fields, f"{app}.{slot}", value))

    def with_chip(self, app: str, slot: str, value: str | None) -> AppState:
        return replace(self, filters=_set(self.filters, f"{app}.{slot}", value), scroll=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "screen": self.screen,
            "fields": [list(p) for p in self.fields],
            "filters": [list(p) for p in self.filters],
            "sheet": self.sheet,
            "focus": self.focus,
            "scroll": self.scroll,
            "detail": self.detail,
            "booked": list(self.booked),
            "popup_seen": self.popup_seen,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AppState:
        return cls(
            app=data["app"],
            screen=str(data["screen"]),
            fields=tuple((str(k), str(v)) for k, v in data["fields"]),
            filters=tuple((str(k), str(v)) for k, v in data["filters"]),
            sheet=data["sheet"],
            focus=data["focus"],
            scroll=int(data["scroll"]),
            detail=data["detail"],
            booked=tuple(str(i) for i in data["booked"]),
            popup_seen=bool(data["popup_seen"]),
        )


class _Grid:
    """Design-grid boxes to screen pixels. A design box covers [x0, x1 + 1) design units;
    rounding both edges makes neighbouring boxes tile without gaps or overlap."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.sx, self.sy = width / DESIGN_SIZE[0], height / DESIGN_SIZE[1]

    def box(self, x0: float, y0: float, x1: float, y1: float) -> Box:
        px0 = min(self.width - 1, round(x0 * self.sx))
        py0 = min(self.height - 1, round(y0 * self.sy))
        px1 = min(self.width - 1, max(px0, round((x1 + 1) * self.sx) - 1))
        py1 = min(self.height - 1, max(py0, round((y1 + 1) * self.sy) - 1))
        return px0, py0, px1, py1


def slug(value: str) -> str:
    """A value as it appears in element ids: ``"1 stop"`` -> ``chip-stops-1_stop``."""
    return value.lower().replace(" ", "_")


class PersonaApp:
    """The app world of one scenario: its catalogues, its user and its pop-up.

    ``scenario`` (JSON-able, stored in :attr:`EpisodeRecord.scenario`): ``catalog_seed``,
    ``user`` (:meth:`User.to_json`) and ``popup`` (the screen a pop-up covers the first
    time it is entered: ``"search"``, ``"results"`` or None).
    """

    def __init__(self, scenario: dict[str, Any], width: int, height: int) -> None:
        if width < 112 or height < 224:
            raise ValueError(f"screen {width}x{height} is too small (at least 112x224)")
        self.scenario = dict(scenario)
        self.user = User.from_json(scenario["user"])
        self.catalog_seed = int(scenario["catalog_seed"])
        self.popup_screen: str | None = scenario.get("popup")
        if self.popup_screen not in (None, "search", "results"):
            raise ValueError(f"a pop-up covers 'search' or 'results', not {self.popup_screen!r}")
        self.width, self.height = int(width), int(height)
        self._grid = _Grid(self.width, self.height)
        self._items = {item.id: item for app in APP_CHANNELS for item in self.items(app)}
        # small caches, oldest out first: both are pure functions of their keys
        self._listed: dict[tuple, list[Item]] = {}
        self._built: dict[AppState, Screen] = {}

    # -- the world ------------------------------------------------------------------------------
    def items(self, app: str) -> tuple[Item, ...]:
        return catalog(app, self.catalog_seed)

    def item(self, item_id: str) -> Item:
        return self._items[item_id]

    def initial_state(self) -> AppState:
        """The home screen, every prefilled field holding the user's value."""
        state = AppState()
        for app in self.user.apps:
            for slot in CHANNEL_SPECS[app].form:
                if slot.prefilled:
                    state = state.with_field(app, slot.name, self.user.wants[app][slot.name])
        return state

    def results(self, state: AppState) -> list[Item]:
        """Every item the open app lists for its current form and chips, in listing order."""
        if state.app is None:
            return []
        spec = CHANNEL_SPECS[state.app]
        wanted = [(s, state.field(state.app, s.name)) for s in spec.form]
        wanted += [(s, state.chip(state.app, s.name) or "") for s in spec.filters]
        wanted = [(s, v) for s, v in wanted if v.strip()]  # an empty field or no chip: any
        key = (state.app, tuple((s.name, v) for s, v in wanted))
        if key not in self._listed:
            if len(self._listed) >= CACHE_SIZE:
                self._listed.pop(next(iter(self._listed)))
            items = self.items(state.app)
            self._listed[key] = [i for i in items if all(matches(i, s, v) for s, v in wanted)]
        return list(self._listed[key])

    def pool(self, state: AppState) -> list[str]:
        """The item ids the results list shows now, top to bottom ([] off the results)."""
        if state.screen != "results":
            return []
        return [i.id for i in self.results(state)[state.scroll : state.scroll + ROWS_PER_PAGE]]

    def detail_state(self, state: AppState, item_id: str) -> AppState:
        """``state`` with the detail card of ``item_id`` open (how a candidate is shown)."""
        return replace(state, screen="detail", detail=item_id, sheet=None, focus=None)

    # -- transitions ----------------------------------------------------------------------------
    def apply(self, state: AppState, action: GuiAction) -> AppState:
        new = self._transition(state, action)
        entered = (new.app, new.screen) != (state.app, state.screen)
        if entered and new.screen == self.popup_screen and not new.popup_seen:
            new = replace(new, sheet="popup", popup_seen=True, focus=None)
        return new

    def _transition(self, state: AppState, action: GuiAction) -> AppState:
        kind = action.action
        if kind in ("click", "type"):
            element = self.screen(state).hit(action.point)
            if element is None or element.command is None:
                return state
            if kind == "click":
                return self._command(state, element.command)
            if element.role != "field" or state.app is None:
                return state
            slot = element.command.partition(":")[2]
            return replace(state.with_field(state.app, slot, action.text.strip()), focus=slot)
        if kind == "exit":
            return replace(state, sheet=None) if state.sheet else self._back(state)
        if kind in ("scroll up", "scroll down") and state.screen == "results" and not state.sheet:
            last = max(0, len(self.results(state)) - ROWS_PER_PAGE)
            step = SCROLL_ROWS if kind == "scroll down" else -SCROLL_ROWS
            return replace(state, scroll=min(last, max(0, state.scroll + step)))
        return state  # sideways scrolls, and the stage actions the env handles

    def _back(self, state: AppState) -> AppState:
        if state.screen == "detail":
            return replace(state, screen="results", detail=None)
        if state.screen == "results":
            return replace(state, screen="search", scroll=0)
        if state.screen == "search":
            return replace(state, app=None, screen="home", focus=None)
        return state

    def _command(self, state: AppState, command: str) -> AppState:
        verb, _, argument = command.partition(":")
        slot, _, value = argument.partition(":")
        if verb == "app":
            return replace(state, app=argument, screen="search", focus=None, scroll=0, detail=None)
        if verb == "back":
            return self._back(state)
        if verb == "focus":
            return replace(state, focus=argument)
        if verb == "dates":
            return replace(state, sheet=f"dates:{argument}", focus=None)
        if verb == "pick" and state.app is not None:
            return replace(state.with_field(state.app, slot, value), sheet=None)
        if verb == "search":
            return replace(state, screen="results", scroll=0, focus=None)
        if verb == "filters":
            return replace(state, sheet="filters")
        if verb == "chip" and state.app is not None:
            current = state.chip(state.app, slot)
            return state.with_chip(state.app, slot, None if current == value else value)
        if verb == "close":
            return replace(state, sheet=None)
        if verb == "item":
            return replace(state, screen="detail", detail=argument)
        if verb == "book":
            booked = state.booked if argument in state.booked else (*state.booked, argument)
            if state.app == "flight":  # the hotel search starts from the trip: there, that day
                flight = self.item(argument)
                state = state.with_field("hotel", "city", flight["destination"])
                state = state.with_field("hotel", "date", state.field("flight", "date"))
            return replace(state, app=None, screen="home", detail=None, booked=booked)
        raise ValueError(f"unknown command {command!r}")

    # -- screens --------------------------------------------------------------------------------
    def screen(self, state: AppState) -> Screen:
        """The element tree of ``state`` (cached: a step asks for it several times)."""
        if state not in self._built:
            if len(self._built) >= CACHE_SIZE:
                self._built.pop(next(iter(self._built)))
            self._built[state] = self._build(state)
        return self._built[state]

    def _build(self, state: AppState) -> Screen:
        if state.screen not in SCREENS:
            raise ValueError(f"unknown screen {state.screen!r}; screens: {SCREENS}")
        g = self._grid
        elements = [Element("status", "status_bar", g.box(0, 0, 447, 27), "9:41    5G  100%")]
        if state.screen == "home" or state.app is None:
            elements += self._home(state)
        else:
            spec = CHANNEL_SPECS[state.app]
            elements += [
                Element("back", "button", g.box(8, 34, 63, 77), "<", command="back"),
                Element("title", "title", g.box(72, 34, 439, 77), spec.title),
            ]
            build = {"search": self._search, "results": self._results, "detail": self._detail}
            elements += build[state.screen](state, spec)
        if state.sheet == "popup":
            elements += self._popup(state)
        elif state.sheet == "filters" and state.app is not None:
            elements += self._filter_sheet(state, CHANNEL_SPECS[state.app])
        elif state.sheet and state.sheet.startswith("dates:") and state.app is not None:
            elements += self._date_sheet(state, state.sheet.partition(":")[2])
        name = state.screen if not state.sheet else f"{state.screen}+{state.sheet.split(':')[0]}"
        return Screen(name, self.width, self.height, tuple(elements))

    def _home(self, state: AppState) -> list[Element]:
        g = self._grid
        out = [
            Element("heading", "title", g.box(24, 48, 423, 95), "Good morning"),
            Element("subtitle", "text", g.box(24, 100, 423, 131), "What do you need today?"),
        ]
        for k, app in enumerate(APP_CHANNELS):
            x, y = 24 + 140 * (k % 3), 150 + 150 * (k // 3)
            box = g.box(x, y, x + 119, y + 119)
            out.append(Element(f"app-{app}", "button", box, CHANNEL_SPECS[app].title, f"app:{app}"))
        if state.booked:
            names = ", ".join(self.item(i).name for i in state.booked)
            apps = self.user.apps
            following = apps[min(len(state.booked), len(apps) - 1)]
            text = f"Trip: {names} booked. Now find {CHANNEL_SPECS[following].noun}."
            out.append(Element("banner", "text", g.box(24, 470, 423, 549), text))
        return out

    def _search(self, state: AppState, spec: ChannelSpec) -> list[Element]:
        g = self._grid
        out = []
        for k, slot in enumerate(spec.form):
            y = 100 + 100 * k
            out.append(Element(f"label-{slot.name}", "text", g.box(24, y, 423, y + 27), slot.label))
            box = g.box(24, y + 30, 423, y + 85)
            value = state.field(spec.name, slot.name)
            if slot.kind == "date":
                element = Element(
                    f"field-{slot.name}",
                    "date",
                    box,
                    "Pick a date",
                    f"dates:{slot.name}",
                    value=value,
                )
            else:
                element = Element(
                    f"field-{slot.name}",
                    "field",
                    box,
                    slot.label,
                    f"focus:{slot.name}",
                    selected=state.focus == slot.name,
                    value=value,
                )
            out.append(element)
        y = 100 + 100 * len(spec.form) + 20
        out.append(Element("search", "button", g.box(24, y, 423, y + 63), "Search", "search"))
        return out

    def _results(self, state: AppState, spec: ChannelSpec) -> list[Element]:
        g = self._grid
        results = self.results(state)
        query = [state.field(spec.name, s.name) for s in spec.form]
        summary = f"{', '.join(q for q in query if q) or 'Everything'} - {len(results)} {spec.noun}"
        chips = [(s.label, state.chip(spec.name, s.name)) for s in spec.filters]
        active = ", ".join(f"{label}: {c}" for label, c in chips if c) or "No filters"
        out = [Element("summary", "text", g.box(16, 90, 431, 121), summary)]
        if spec.filters:
            out += [
                Element("filters", "button", g.box(16, 128, 151, 175), "Filters", "filters"),
                Element("active", "text", g.box(164, 128, 431, 175), active),
            ]
        page = results[state.scroll : state.scroll + ROWS_PER_PAGE]
        for r, item in enumerate(page):
            y = 188 + ROW_PITCH * r
            text = f"{item.name}\n{item_lines(item)[0]}"
            box = g.box(16, y, 431, y + ROW_PITCH - 9)
            out.append(Element(f"row-{item.id}", "list_item", box, text, f"item:{item.id}"))
        if page:
            where = f"Showing {state.scroll + 1}-{state.scroll + len(page)} of {len(results)}"
        else:
            where = "No results. Try another search."
        out.append(Element("page", "text", g.box(16, 860, 431, 887), where))
        return out

    def _detail(self, state: AppState, spec: ChannelSpec) -> list[Element]:
        g = self._grid
        if state.detail is None:
            raise ValueError("a detail screen needs the item it shows")
        item = self.item(state.detail)
        out = [
            Element("photo", "image", g.box(16, 90, 431, 329), item.name),
            Element("name", "title", g.box(16, 340, 431, 383), item.name),
        ]
        for k, line in enumerate(item_lines(item)):
            y = 392 + 44 * k
            out.append(Element(f"line-{k}", "text", g.box(16, y, 431, y + 35), line))
        if spec.name in self.user.apps[:-1]:  # the trip's first app: take this one
            text = f"Book this {spec.noun.rstrip('s')}"
            out.append(Element("book", "button", g.box(24, 780, 423, 843), text, f"book:{item.id}"))
        return out

    def _popup(self, state: AppState) -> list[Element]:
        g = self._grid
        title = CHANNEL_SPECS[state.app].title if state.app else "Odyssey"
        text = f"Sign in to {title} today and save 10% on your first order."
        return [
            Element("popup-sheet", "sheet", g.box(40, 300, 407, 619)),
            Element("popup-title", "title", g.box(64, 320, 351, 359), "Special offer"),
            Element("popup-close", "close", g.box(363, 312, 395, 344), "x", "close"),
            Element("popup-text", "text", g.box(64, 372, 383, 471), text),
            Element("popup-dismiss", "button", g.box(64, 540, 383, 595), "Not now", "close"),
        ]

    def _filter_sheet(self, state: AppState, spec: ChannelSpec) -> list[Element]:
        g = self._grid
        out = [
            Element("filters-sheet", "sheet", g.box(0, 340, 447, 895)),
            Element("filters-title", "title", g.box(24, 356, 380, 395), "Filters"),
            Element("filters-close", "close", g.box(392, 352, 431, 391), "x", "close"),
        ]
        for k, slot in enumerate(spec.filters):
            y = 412 + 130 * k
            out.append(Element(f"group-{slot.name}", "text", g.box(24, y, 423, y + 27), slot.label))
            n = len(slot.values)
            width = (400 - 12 * (n - 1)) / n
            for c, value in enumerate(slot.values):
                x = 24 + c * (width + 12)
                box = g.box(x, y + 34, x + width - 1, y + 93)
                chip = Element(
                    f"chip-{slot.name}-{slug(value)}",
                    "button",
                    box,
                    value,
                    f"chip:{slot.name}:{value}",
                    selected=state.chip(spec.name, slot.name) == value,
                )
                out.append(chip)
        out.append(
            Element("filters-done", "button", g.box(24, 812, 423, 871), "Show results", "close")
        )
        return out

    def _date_sheet(self, state: AppState, slot: str) -> list[Element]:
        g = self._grid
        chosen = state.field(state.app or "", slot)
        out = [
            Element("dates-sheet", "sheet", g.box(0, 380, 447, 895)),
            Element("dates-title", "title", g.box(24, 396, 380, 435), "Pick a day in June"),
            Element("dates-close", "close", g.box(392, 392, 431, 431), "x", "close"),
        ]
        for k, day in enumerate(DATES):
            x, y = 28 + 56 * (k % 7), 452 + 76 * (k // 7)
            out.append(
                Element(
                    f"day-{slug(day)}",
                    "date",
                    g.box(x, y, x + 51, y + 63),
                    day,
                    f"pick:{slot}:{day}",
                    selected=day == chosen,
                    value=day.split()[1],  # a day cell shows its day number
                )
            )
        return out
