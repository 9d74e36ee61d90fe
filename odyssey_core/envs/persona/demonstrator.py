"""The programmatic demonstrator: the optimal next actions in any app state and whole recorded
demonstrations (the expert agent built on it is
:class:`~odyssey_core.agents.persona_expert.PersonaExpert`).

:func:`optimal_moves` knows the user (the app carries it) and works backwards from what the
results list must show: the right app open, every form field holding the user's value, every
filter chip group on the user's choice, the list at its top; on the trip, the user's flight
booked first. Every move that makes progress from ``state`` is optimal (any unfilled field
may come first; the back button and ``exit`` both go back); the first is the demonstrator's
own choice.

:func:`record_demonstration` plays one episode: search steps until the list shows the user's
pool, one pool step (``pool_found`` with the intent sentence), one recommend step per listed
candidate on its detail card, answered by the label oracle. With probability ``detour_p`` per
step (at most ``max_detours`` an episode, each kind once) it takes a human-like detour instead
(opening the wrong app or a wrong item, a needless scroll), flagged ``detour=True``; the step
after is an optimal way back. A text field is focused before it is typed into, except with
probability ``type_directly_p``. Click points are drawn inside the target box, not always at
its centre.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from odyssey_core.envs.persona.app import ROWS_PER_PAGE, AppState, PersonaApp, slug
from odyssey_core.envs.persona.catalog import APP_CHANNELS, CHANNEL_SPECS
from odyssey_core.envs.persona.episode import EpisodeRecord, StepRecord
from odyssey_core.envs.persona.screen import Box, Screen
from odyssey_core.protocol.gui import NO_POINT, NO_TEXT, GuiAction

__all__ = [
    "Move",
    "expected_stage",
    "optimal_moves",
    "point_in",
    "realise",
    "record_demonstration",
    "task_app",
]

MAX_SEARCH_STEPS = 80


@dataclass(frozen=True)
class Move:
    """An action type, the element it must land in (None for non-spatial ones) and its text."""

    action: str
    target: str | None = None
    text: str = NO_TEXT

    @property
    def key(self) -> tuple[str, str | None]:
        return self.action, self.target


GO_BACK = (Move("exit"), Move("click", "back"))
CLOSERS = {  # a sheet kind -> the controls that close it (``exit`` does too)
    "popup": ("popup-close", "popup-dismiss"),
    "filters": ("filters-done", "filters-close"),
    "dates": ("dates-close",),
}


def _same(current: str, wanted: str) -> bool:
    return current.strip().lower() == wanted.strip().lower()


def task_app(app: PersonaApp, state: AppState) -> str:
    """The app the user works in now: on the trip the flight until theirs is booked."""
    user = app.user
    for name in user.apps[:-1]:
        if user.choice(name, app.items(name)).id not in state.booked:
            return name
    return user.pool_app


def _close_sheet(state: AppState) -> tuple[Move, ...]:
    kind = (state.sheet or "").partition(":")[0]
    return Move("exit"), *(Move("click", control) for control in CLOSERS[kind])


def optimal_moves(app: PersonaApp, state: AppState) -> tuple[Move, ...]:
    """Every optimal next action in ``state``, the demonstrator's choice first. A ``pool_found``
    move means the search is over: the list shows the user's whole pool."""
    if state.sheet == "popup":
        return _close_sheet(state)
    user, task = app.user, task_app(app, state)
    if state.app != task:
        if state.sheet:
            return _close_sheet(state)
        return (Move("click", f"app-{task}"),) if state.app is None else GO_BACK
    spec, wants = CHANNEL_SPECS[task], user.wants[task]
    wrong_fields = [s for s in spec.form if not _same(state.field(task, s.name), wants[s.name])]
    wrong_chips = [s for s in spec.filters if state.chip(task, s.name) != wants[s.name]]

    if state.screen == "search":
        if state.sheet:  # a date sheet: pick the wanted day if that date is still wrong
            slot = state.sheet.partition(":")[2]
            if slot in [s.name for s in wrong_fields]:
                return (Move("click", f"day-{slug(wants[slot])}"),)
            return _close_sheet(state)
        moves: list[Move] = []
        for slot in wrong_fields:
            field = f"field-{slot.name}"
            if slot.kind == "date":
                moves.append(Move("click", field))
            elif state.focus == slot.name:
                moves.append(Move("type", field, wants[slot.name]))
            else:  # people focus the field first; typing straight into it works as well
                moves += [Move("click", field), Move("type", field, wants[slot.name])]
        return tuple(moves) or (Move("click", "search"),)

    if state.screen == "results":
        if wrong_fields:
            return _close_sheet(state) if state.sheet else GO_BACK
        if state.sheet == "filters":
            if wrong_chips:
                return tuple(
                    Move("click", f"chip-{s.name}-{slug(wants[s.name])}") for s in wrong_chips
                )
            return Move("click", "filters-done"), Move("click", "filters-close"), Move("exit")
        if state.sheet:
            return _close_sheet(state)
        if wrong_chips:
            return (Move("click", "filters"),)
        listed = [item.id for item in app.results(state)]
        if task != user.pool_app:  # the trip's flight: open the user's choice
            chosen = user.choice(task, app.items(task)).id
            if chosen in app.pool(state):
                return (Move("click", f"row-{chosen}"),)
            return (Move("scroll down" if listed.index(chosen) >= state.scroll else "scroll up"),)
        if state.scroll > 0:
            return (Move("scroll up"),)
        return (Move("pool_found", text=user.intent),)

    if state.screen == "detail":
        if task != user.pool_app and state.detail == user.choice(task, app.items(task)).id:
            return (Move("click", "book"),)
        return GO_BACK
    raise ValueError(f"no plan for screen {state.screen!r}")


def expected_stage(app: PersonaApp, state: AppState) -> str:
    """``"pool"`` when the list already shows the user's pool, else ``"search"``."""
    return "pool" if optimal_moves(app, state)[0].action == "pool_found" else "search"


def point_in(box: Box, rng: random.Random | None) -> tuple[int, int]:
    """A click point in ``box``: uniform over its middle 60% (the centre without ``rng``)."""
    x0, y0, x1, y1 = box
    if rng is None:
        return (x0 + x1) // 2, (y0 + y1) // 2
    mx, my = 0.2 * (x1 - x0), 0.2 * (y1 - y0)
    return round(rng.uniform(x0 + mx, x1 - mx)), round(rng.uniform(y0 + my, y1 - my))


def realise(move: Move, screen: Screen, rng: random.Random | None = None) -> GuiAction:
    """The :class:`GuiAction` of ``move`` on ``screen``, with a point inside its target."""
    if move.target is None:
        return GuiAction(move.action, NO_POINT, move.text)
    target = screen.element(move.target)
    point = point_in(target.box, rng)
    hit = screen.hit(point)
    if hit is None or hit.id != move.target:  # partly covered: fall back to the centre
        point = target.center
    return GuiAction(move.action, point, move.text)


def _detour(
    app: PersonaApp, state: AppState, task: str, rng: random.Random, used: set[str]
) -> Move | None:
    """A human-like wrong turn from ``state`` of a kind not in ``used`` ("app", "item",
    "scroll"), or None where none fits."""
    options: dict[str, Move] = {}
    if state.sheet:
        return None
    if state.screen == "home":
        options["app"] = Move("click", f"app-{rng.choice([a for a in APP_CHANNELS if a != task])}")
    elif state.screen == "results" and state.app == task:
        shown = app.pool(state)
        if task != app.user.pool_app:
            shown = [i for i in shown if i != app.user.choice(task, app.items(task)).id]
        if shown:
            options["item"] = Move("click", f"row-{rng.choice(shown)}")
        spec, wants = CHANNEL_SPECS[task], app.user.wants[task]
        unfiltered = any(state.chip(task, s.name) != wants[s.name] for s in spec.filters)
        if unfiltered and len(app.results(state)) > state.scroll + ROWS_PER_PAGE:
            options["scroll"] = Move("scroll down")  # the filters will reset the list anyway
    kinds = sorted(set(options) - used)
    if not kinds:
        return None
    kind = rng.choice(kinds)
    used.add(kind)
    return options[kind]


def record_demonstration(
    app: PersonaApp,
    episode_id: str,
    rng: random.Random,
    *,
    detour_p: float = 0.15,
    max_detours: int = 2,
    type_directly_p: float = 0.5,
    split: str = "train",
    image_dir: str = "screens",
) -> EpisodeRecord:
    """One demonstrated episode of ``app``'s user. Screenshots are named
    ``<image_dir>/<episode_id>/<index>.png``; rendering them is the dataset writer's job."""
    user = app.user
    steps: list[StepRecord] = []

    def add(stage: str, state: AppState, gold: GuiAction, **extra: Any) -> None:
        image = f"{image_dir}/{episode_id}/{len(steps):02d}.png"
        screen = app.screen(state)
        steps.append(StepRecord(len(steps), stage, screen, image, gold, **extra))

    state, detours, kinds = app.initial_state(), 0, set()
    while True:
        moves = optimal_moves(app, state)
        if moves[0].action == "pool_found":
            break
        if len(steps) >= MAX_SEARCH_STEPS:
            raise RuntimeError(f"{episode_id}: the search did not finish in {len(steps)} steps")
        detour = None
        if detours < max_detours and rng.random() < detour_p:
            detour = _detour(app, state, task_app(app, state), rng, kinds)
        move = detour or moves[0]
        if detour is None and move.action == "click" and len(moves) > 1:
            straight = moves[1]  # typing into a field without focusing it first also works
            if straight.key == ("type", move.target) and rng.random() < type_directly_p:
                move = straight
        action = realise(move, app.screen(state), rng)
        target = move.target if action.spatial else None
        optimal = tuple(m.key for m in moves)
        add("search", state, action, target_id=target, optimal=optimal, detour=detour is not None)
        detours += detour is not None
        state = app.apply(state, action)

    add(
        "pool",
        state,
        GuiAction("pool_found", NO_POINT, user.intent),
        optimal=(("pool_found", None),),
    )
    candidates = app.pool(state)
    yes = user.yes_items(app.items(user.pool_app))
    for candidate in candidates:
        label = "Yes" if candidate in yes else "No"
        gold = GuiAction("recommendation", NO_POINT, label)
        card = app.detail_state(state, candidate)
        add("recommend", card, gold, optimal=(("recommendation", None),), candidate=candidate)
    return EpisodeRecord(
        episode_id=episode_id,
        channel=user.channel,
        request=user.request,
        intent=user.intent,
        intent_slots=user.intent_slots(),
        yes_items=tuple(i for i in yes if i in candidates),
        width=app.width,
        height=app.height,
        steps=tuple(steps),
        ambiguity=user.ambiguity,
        split=split,
        scenario=dict(app.scenario),
    )
