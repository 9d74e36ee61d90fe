"""What the engine's facts say about the room, and which of a task's sub-goals hold.

:func:`scene_from_facts` reads the PDDL facts (``inreceptacle(mug 1, cabinet 2)``,
``holds(agent1, apple 1)``, ``ishot(...)``, ...) into a :class:`Scene`: the receptacles and
whether they are open, where each object is, what the agent faces and holds. The drawn view,
the prompt and the rewards all read the scene, never the raw facts.

Sub-goals (GTR's :math:`g_{sub}`, one reward each the first time they hold in an episode):

=============================== =====================================================
task type                       sub-goals, in order (the goal itself pays separately)
=============================== =====================================================
pick_and_place_simple           hold a target object
look_at_obj_in_light            hold one; stand at the lamp while holding it
pick_clean/heat/cool_then_...   hold one; a target object is clean / hot / cool
pick_two_obj_and_place          hold one; one target object is in a goal receptacle
=============================== =====================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from odyssey_core.envs.alfworld.generate import TaskSpec

__all__ = ["Item", "Receptacle", "Scene", "scene_from_facts", "subgoal_names", "subgoals_reached"]

Fact = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Receptacle:
    name: str  # "cabinet 2"
    kind: str  # "cabinet"
    openable: bool
    opened: bool

    @property
    def shows_contents(self) -> bool:
        return self.opened or not self.openable


@dataclass(frozen=True)
class Item:
    name: str  # "mug 1"
    kind: str  # "mug"
    place: str | None  # the receptacle it is in or on; None when held (or on the floor)
    held: bool = False
    hot: bool = False
    cool: bool = False
    clean: bool = False
    on: bool = False  # a lamp that is switched on

    @property
    def states(self) -> tuple[str, ...]:
        return tuple(
            word
            for word, flag in (("hot", self.hot), ("cool", self.cool), ("clean", self.clean))
            if flag
        ) + (("on",) if self.on else ())


@dataclass(frozen=True)
class Scene:
    receptacles: tuple[Receptacle, ...]
    items: tuple[Item, ...]
    facing: tuple[str, ...]  # receptacles at the agent's location; empty in mid-room

    def receptacle(self, name: str) -> Receptacle:
        for receptacle in self.receptacles:
            if receptacle.name == name:
                return receptacle
        raise KeyError(name)

    @property
    def held(self) -> tuple[Item, ...]:
        return tuple(item for item in self.items if item.held)

    def contents(self, receptacle: str) -> tuple[Item, ...]:
        return tuple(item for item in self.items if item.place == receptacle)

    @property
    def visible(self) -> tuple[Item, ...]:
        """Objects the agent can see: in or on what it faces, when that is open or has no door."""
        seen = []
        for name in self.facing:
            if self.receptacle(name).shows_contents:
                seen.extend(self.contents(name))
        return tuple(seen)

    def key(self) -> tuple:
        """A hashable summary, equal exactly when the scenes are equal."""
        return (self.receptacles, self.items, self.facing)


def _kind(type_name: str) -> str:
    name = type_name.strip().lower()
    return name[: -len("type")] if name.endswith("type") else name


def scene_from_facts(facts: Iterable[Fact]) -> Scene:
    by_predicate: dict[str, list[tuple[str, ...]]] = {}
    for predicate, args in facts:
        by_predicate.setdefault(predicate.lower(), []).append(args)

    def unary(name: str) -> set[str]:
        return {args[0] for args in by_predicate.get(name, ()) if args}

    openable, opened = unary("openable"), unary("opened")
    hot, cool, clean = unary("ishot"), unary("iscool"), unary("isclean")
    lit = unary("ison")
    held = {args[1] for args in by_predicate.get("holds", ()) if len(args) == 2}
    place = {args[0]: args[1] for args in by_predicate.get("inreceptacle", ()) if len(args) == 2}
    receptacle_kind = {a[0]: _kind(a[1]) for a in by_predicate.get("receptacletype", ())}
    object_kind = {a[0]: _kind(a[1]) for a in by_predicate.get("objecttype", ())}
    location_of = {a[0]: a[1] for a in by_predicate.get("receptacleatlocation", ())}
    agent_at = {a[1] for a in by_predicate.get("atlocation", ()) if len(a) == 2}

    receptacles = tuple(
        Receptacle(name, kind, name in openable, name in opened)
        for name, kind in sorted(receptacle_kind.items(), key=lambda kv: _natural(kv[0]))
    )
    items = tuple(
        Item(
            name=name,
            kind=kind,
            place=None if name in held else place.get(name),
            held=name in held,
            hot=name in hot,
            cool=name in cool,
            clean=name in clean,
            on=name in lit,
        )
        for name, kind in sorted(object_kind.items(), key=lambda kv: _natural(kv[0]))
    )
    facing = tuple(r.name for r in receptacles if location_of.get(r.name) in agent_at)
    return Scene(receptacles, items, facing)


def _natural(name: str) -> tuple[str, int]:
    """``"cabinet 10"`` sorts after ``"cabinet 9"``."""
    stem, _, number = name.rpartition(" ")
    return (stem, int(number)) if number.isdigit() else (name, 0)


# -- sub-goals --------------------------------------------------------------------------------

_STATE_WORD = {
    "pick_clean_then_place_in_recep": ("clean", "clean"),
    "pick_heat_then_place_in_recep": ("heat", "hot"),
    "pick_cool_then_place_in_recep": ("cool", "cool"),
}


def subgoal_names(task: TaskSpec) -> list[str]:
    obj = task.object_target.lower()
    names = [f"take a {obj}"]
    if task.task_type == "look_at_obj_in_light":
        names.append(f"bring the {obj} to the {task.toggle_target.lower()}")
    elif task.task_type in _STATE_WORD:
        names.append(f"{_STATE_WORD[task.task_type][0]} the {obj}")
    elif task.task_type == "pick_two_obj_and_place":
        names.append(f"put one {obj} in a {task.parent_target.lower()}")
    return names


def subgoals_reached(task: TaskSpec, scene: Scene) -> list[bool]:
    """Which sub-goals of :func:`subgoal_names` hold in ``scene`` (in the same order)."""
    obj = task.object_target.lower()
    targets = [item for item in scene.items if item.kind == obj]
    holding = any(item.held for item in targets)
    reached = [holding]
    if task.task_type == "look_at_obj_in_light":
        lamp = task.toggle_target.lower()
        at_lamp = any(item.kind == lamp and item.place in scene.facing for item in scene.items)
        reached.append(holding and at_lamp)
    elif task.task_type in _STATE_WORD:
        state = _STATE_WORD[task.task_type][1]
        reached.append(any(state in item.states for item in targets))
    elif task.task_type == "pick_two_obj_and_place":
        parent = task.parent_target.lower()
        kinds = {r.name: r.kind for r in scene.receptacles}
        reached.append(any(kinds.get(item.place or "") == parent for item in targets))
    return reached
