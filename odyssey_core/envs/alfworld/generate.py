"""Household games for the ALFWorld text engine, generated from a seed (no dataset download).

A game is a room (kitchen, living room, bedroom, bathroom) with receptacles and objects, and a
task of one of ALFWorld's six types. :func:`generate_game` builds it; :meth:`HouseholdGame.write`
lays it out the way the official ``json_2.1.1`` data is laid out, so alfworld's own loader and
tools read it too:

    <folder>/initial_state.pddl   the PDDL problem (objects, initial facts, goal)
    <folder>/traj_data.json       task type and targets (``pddl_params``), the task text
    <folder>/game.tw-pddl         what the TextWorld PDDL engine loads: alfworld's domain and
                                  grammar (shipped in the alfworld package), this problem,
                                  ``solvable`` and an optional ``walkthrough``

Generation itself is plain Python; only writing ``game.tw-pddl`` needs the alfworld package (for
its domain and grammar files). Every game is solvable by construction: the target objects start
where they can be taken, the tool receptacle (sink, microwave, fridge) and the lamp exist, and
the goal does not already hold.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from odyssey_core.envs.alfworld.catalog import (
    CLEANABLE,
    COOLABLE,
    HEATABLE,
    OBJECTS,
    OPENABLE,
    ROOMS,
    display_name,
)

__all__ = [
    "GENERATOR_VERSION",
    "TASK_SHORT_NAMES",
    "TASK_TYPES",
    "HouseholdGame",
    "TaskSpec",
    "alfworld_data_files",
    "generate_game",
    "write_games",
]

GENERATOR_VERSION = 1

#: ALFWorld's six task types, in its own order (``alfred_tw_env.TASK_TYPES``)
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
#: the column names of ALFWorld result tables (Pick, Look, Clean, Heat, Cool, Pick2)
TASK_SHORT_NAMES: dict[str, str] = dict(
    zip(TASK_TYPES, ("pick", "look", "clean", "heat", "cool", "pick2"), strict=True)
)

# The receptacle whose use the task needs, and which objects that use applies to.
_TOOL = {
    "pick_clean_then_place_in_recep": ("SinkBasin", CLEANABLE),
    "pick_heat_then_place_in_recep": ("Microwave", HEATABLE),
    "pick_cool_then_place_in_recep": ("Fridge", COOLABLE),
}
_ROOMS_FOR_TASK = {
    "pick_and_place_simple": ("kitchen", "living room", "bedroom", "bathroom"),
    "look_at_obj_in_light": ("living room", "bedroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
    "pick_two_obj_and_place": ("kitchen", "living room", "bedroom", "bathroom"),
}
LAMP = "DeskLamp"
_INSIDE = frozenset({"Cabinet", "Drawer", "Fridge", "Microwave", "SinkBasin", "BathtubBasin"}) | {
    "GarbageCan",
    "Safe",
}


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _into(receptacle_type: str) -> str:
    """``"in a fridge"`` / ``"on a countertop"``."""
    name = display_name(receptacle_type)
    return f"{'in' if receptacle_type in _INSIDE else 'on'} {_article(name)} {name}"


@dataclass(frozen=True)
class TaskSpec:
    """What a game asks for, with ALFRED type names (``"Mug"``, ``"CounterTop"``)."""

    task_type: str
    object_target: str
    parent_target: str = ""  # where the object must end up; empty for look_at_obj_in_light
    toggle_target: str = ""  # the lamp of look_at_obj_in_light

    def __post_init__(self) -> None:
        if self.task_type not in TASK_TYPES:
            raise ValueError(
                f"unknown task type {self.task_type!r}; known: {', '.join(TASK_TYPES)}"
            )

    @property
    def short_name(self) -> str:
        return TASK_SHORT_NAMES[self.task_type]

    def description(self) -> str:
        """The task in one sentence, written for this project."""
        obj = display_name(self.object_target)
        a_obj = f"{_article(obj)} {obj}"
        if self.task_type == "look_at_obj_in_light":
            return f"examine {a_obj} by the light of the {display_name(self.toggle_target)}"
        where = _into(self.parent_target)
        if self.task_type == "pick_two_obj_and_place":
            kind = OBJECTS.get(self.object_target)
            plural = kind.plural_name if kind else obj + "s"
            return f"put two {plural} {where}"
        verb = {
            "pick_clean_then_place_in_recep": "clean",
            "pick_heat_then_place_in_recep": "heat",
            "pick_cool_then_place_in_recep": "cool",
        }.get(self.task_type)
        if verb is None:
            return f"put {a_obj} {where}"
        return f"{verb} {a_obj}, then put it {where}"

    def pddl_params(self) -> dict[str, Any]:
        """The ``pddl_params`` block of ``traj_data.json``."""
        return {
            "object_target": self.object_target,
            "parent_target": self.parent_target,
            "toggle_target": self.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        }

    @classmethod
    def from_traj_data(cls, traj_data: dict[str, Any]) -> TaskSpec:
        params = traj_data.get("pddl_params") or {}
        return cls(
            task_type=str(traj_data["task_type"]),
            object_target=str(params.get("object_target") or ""),
            parent_target=str(params.get("parent_target") or ""),
            toggle_target=str(params.get("toggle_target") or ""),
        )

    def goal_pddl(self) -> str:
        obj = f"{self.object_target}Type"
        if self.task_type == "look_at_obj_in_light":
            return (
                "(:goal (and\n"
                "    (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and\n"
                f"        (objectType ?ot {self.toggle_target}Type) (toggleable ?ot)"
                " (isToggled ?ot)\n"
                "        (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r)))\n"
                f"    (exists (?o - object ?a - agent) (and (objectType ?o {obj}) (holds ?a ?o)))))"
            )
        recep = f"{self.parent_target}Type"
        if self.task_type == "pick_two_obj_and_place":
            return (
                "(:goal (exists (?r - receptacle ?o1 - object ?o2 - object) (and\n"
                f"    (receptacleType ?r {recep}) (not (= ?o1 ?o2))\n"
                f"    (objectType ?o1 {obj}) (inReceptacle ?o1 ?r)\n"
                f"    (objectType ?o2 {obj}) (inReceptacle ?o2 ?r))))"
            )
        state = {
            "pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o)",
            "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o)",
            "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o)",
        }.get(self.task_type, "")
        return (
            "(:goal (exists (?r - receptacle ?o - object) (and\n"
            f"    (objectType ?o {obj}) (receptacleType ?r {recep}) (inReceptacle ?o ?r)"
            + (f"\n    {state}" if state else "")
            + ")))"
        )


@dataclass(frozen=True)
class HouseholdGame:
    """One generated game: the room's receptacles, its objects and where each starts."""

    task: TaskSpec
    seed: int
    room: str
    receptacles: tuple[tuple[str, str], ...]  # (PDDL id, ALFRED type)
    objects: tuple[tuple[str, str, str], ...]  # (PDDL id, ALFRED type, receptacle id)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        target = self.task.parent_target or self.task.toggle_target
        room = self.room.replace(" ", "")
        return f"{self.task.task_type}-{self.task.object_target}-None-{target}-{room}"

    @property
    def trial(self) -> str:
        return f"trial_odyssey_s{self.seed}"

    def problem_pddl(self) -> str:
        """The PDDL problem for alfworld's ``alfred`` domain."""
        receptacle_types = sorted({t for _, t in self.receptacles})
        object_types = sorted({t for _, t, _ in self.objects})
        location = {rid: f"loc_bar_{i + 1}" for i, (rid, _) in enumerate(self.receptacles)}
        declare = ["agent1 - agent"]
        declare += [f"{t}Type - otype" for t in object_types]
        declare += [f"{t}Type - rtype" for t in receptacle_types]
        declare += [f"{oid} - object" for oid, _, _ in self.objects]
        declare += [f"{rid} - receptacle" for rid, _ in self.receptacles]
        declare += ["loc_bar_0 - location"] + [f"{loc} - location" for loc in location.values()]

        facts = ["(= (total-cost) 0)", "(atLocation agent1 loc_bar_0)"]
        for rid, rtype in self.receptacles:
            facts.append(f"(receptacleAtLocation {rid} {location[rid]})")
            facts.append(f"(receptacleType {rid} {rtype}Type)")
            if rtype in OPENABLE:
                facts.append(f"(openable {rid})")
        for oid, otype, rid in self.objects:
            facts.append(f"(objectType {oid} {otype}Type)")
            facts.append(f"(inReceptacle {oid} {rid})")
            facts.append(f"(objectAtLocation {oid} {location[rid]})")
            if otype == LAMP:
                facts.append(f"(toggleable {oid})")  # a desk lamp stays where it is
                continue
            facts.append(f"(pickupable {oid})")
            for prop, kinds in (("heatable", HEATABLE), ("coolable", COOLABLE)):
                if otype in kinds:
                    facts.append(f"({prop} {oid})")
            if otype in CLEANABLE:
                facts.append(f"(cleanable {oid})")
        for rtype in receptacle_types:
            for otype in object_types:
                if otype in OBJECTS and rtype in OBJECTS[otype].homes:
                    facts.append(f"(canContain {rtype}Type {otype}Type)")

        lines = [
            f"(define (problem odyssey_{self.task.short_name}_s{self.seed})",
            "  (:domain alfred)",
            "  (:objects",
            *(f"    {d}" for d in declare),
            "  )",
            "  (:init",
            *(f"    {f}" for f in facts),
            "  )",
            "  " + self.task.goal_pddl().replace("\n", "\n  "),
            "  (:metric minimize (total-cost))",
            ")",
        ]
        return "\n".join(lines) + "\n"

    def traj_data(self) -> dict[str, Any]:
        """The ``traj_data.json`` fields alfworld's loader and experts read, plus provenance."""
        return {
            "task_type": self.task.task_type,
            "task_id": f"odyssey_{self.task.short_name}_s{self.seed}",
            "pddl_params": self.task.pddl_params(),
            "turk_annotations": {
                "anns": [{"task_desc": self.task.description(), "high_descs": [], "votes": []}]
            },
            "scene": {
                "generator": "odyssey",
                "generator_version": GENERATOR_VERSION,
                "seed": self.seed,
                "room": self.room,
            },
        }

    def game_data(self, walkthrough: list[str] | None = None) -> dict[str, Any]:
        """The ``game.tw-pddl`` content (needs the alfworld package for domain and grammar)."""
        domain_path, grammar_path = alfworld_data_files()
        grammar = grammar_path.read_text().replace("UNKNOWN GOAL", self.task.description())
        return {
            "pddl_domain": domain_path.read_text(),
            "grammar": grammar,
            "pddl_problem": self.problem_pddl(),
            "solvable": True,  # by construction; write_games(..., solve=True) checks it
            "walkthrough": walkthrough,
        }

    def write(self, folder: str | Path, walkthrough: list[str] | None = None) -> Path:
        """Write the three files into ``folder``; returns the path of ``game.tw-pddl``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        _write_atomically(out / "initial_state.pddl", self.problem_pddl())
        _write_atomically(out / "traj_data.json", json.dumps(self.traj_data(), indent=1))
        game_file = out / "game.tw-pddl"  # last: its presence means the folder is complete
        _write_atomically(game_file, json.dumps(self.game_data(walkthrough)))
        return game_file


def _write_atomically(path: Path, text: str) -> None:
    """Write then rename, so envs sharing a game folder never read a half-written file."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def alfworld_data_files() -> tuple[Path, Path]:
    """alfworld's PDDL domain and TextWorld grammar, found without importing alfworld."""
    import importlib.util

    from odyssey_core.envs.alfworld.engine import missing_alfworld_error

    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise missing_alfworld_error()
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    domain, grammar = data / "alfred.pddl", data / "alfred.twl2"
    if not (domain.is_file() and grammar.is_file()):
        raise FileNotFoundError(f"alfworld is installed but lacks {domain} or {grammar}")
    return domain, grammar


# -- generation -------------------------------------------------------------------------------


def _choice(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


def _instance_id(kind: str, number: int) -> str:
    # "_bar_" is how ALFRED writes "|" in PDDL; alfworld's demangler turns "Mug_bar_2" into
    # "mug <n>". Sinks and bathtubs carry a "Basin" suffix so they demangle to "sinkbasin <n>".
    if kind == "SinkBasin":
        return f"Sink_bar_{number}_bar_SinkBasin"
    if kind == "BathtubBasin":
        return f"Bathtub_bar_{number}_bar_BathtubBasin"
    return f"{kind}_bar_{number}"


def generate_game(
    task_type: str,
    seed: int,
    *,
    distractors: tuple[int, int] = (4, 8),
) -> HouseholdGame:
    """A solvable game of ``task_type``, the same for the same ``(task_type, seed)``.

    ``distractors`` is the (min, max) number of objects unrelated to the task.
    """
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; known: {', '.join(TASK_TYPES)}")
    rng = np.random.default_rng([int(seed), TASK_TYPES.index(task_type), GENERATOR_VERSION])
    room = ROOMS[_choice(rng, _ROOMS_FOR_TASK[task_type])]

    receptacles: list[tuple[str, str]] = []
    for rtype, (low, high) in room.receptacles.items():
        for number in range(1, int(rng.integers(low, high + 1)) + 1):
            receptacles.append((_instance_id(rtype, number), rtype))
    present = {t for _, t in receptacles}
    by_type: dict[str, list[str]] = {}
    for rid, rtype in receptacles:
        by_type.setdefault(rtype, []).append(rid)

    tool, tool_kinds = _TOOL.get(task_type, ("", None))
    lamp_spots = [t for t in room.lamp_on if t in present]
    # An object type qualifies when the room has somewhere to put it that is not where it must
    # end up (and not the tool: a mug in the sink is not clean yet).
    options: list[tuple[str, str, list[str]]] = []  # (object, parent, start receptacle types)
    for otype in room.objects:
        homes = [t for t in OBJECTS[otype].homes if t in present]
        if tool_kinds is not None and otype not in tool_kinds:
            continue
        if task_type == "look_at_obj_in_light":
            if homes and lamp_spots:
                options.append((otype, "", homes))
            continue
        for parent in homes:
            if parent == tool:
                continue
            starts = [t for t in homes if t not in (parent, tool)]
            if starts:
                options.append((otype, parent, starts))
    if not options:  # the catalogue guarantees options for every room a task may pick
        raise RuntimeError(f"no {task_type} task fits the {room.name}")
    otype, parent, starts = _choice(rng, options)
    task = TaskSpec(task_type, otype, parent, LAMP if task_type == "look_at_obj_in_light" else "")

    placed: list[tuple[str, str]] = []  # (object type, receptacle id)
    n_targets = int(rng.integers(2, 4)) if task_type == "pick_two_obj_and_place" else 1
    if task_type == "look_at_obj_in_light":
        placed.append((LAMP, _choice(rng, by_type[_choice(rng, lamp_spots)])))
    for _ in range(n_targets):
        placed.append((otype, _choice(rng, by_type[_choice(rng, starts)])))
    others = [o for o in room.objects if o != otype and any(t in present for t in OBJECTS[o].homes)]
    for _ in range(int(rng.integers(distractors[0], distractors[1] + 1))):
        kind = _choice(rng, others)
        homes = [t for t in OBJECTS[kind].homes if t in present]
        placed.append((kind, _choice(rng, by_type[_choice(rng, homes)])))

    counts: dict[str, int] = {}
    objects = []
    for kind, rid in placed:
        counts[kind] = counts.get(kind, 0) + 1
        objects.append((_instance_id(kind, counts[kind]), kind, rid))
    return HouseholdGame(
        task=task,
        seed=int(seed),
        room=room.name,
        receptacles=tuple(receptacles),
        objects=tuple(objects),
    )


def write_games(
    out_dir: str | Path,
    count: int,
    *,
    task_types: Sequence[str] = TASK_TYPES,
    seed: int = 0,
    solve: bool = True,
) -> list[Path]:
    """``count`` games per task type under ``out_dir``, in the official folder layout.

    With ``solve``, each game is played by the PDDL planner first (as ``alfworld-generate``
    does); its plan is stored as the ``walkthrough`` and a game it cannot solve is an error.
    """
    from odyssey_core.envs.alfworld.engine import TextWorldEngine

    engine = TextWorldEngine(expert_plan=True) if solve else None
    written = []
    try:
        for task_type in task_types:
            for k in range(count):
                game = generate_game(task_type, seed + k)
                folder = Path(out_dir) / game.name / game.trial
                game_file = game.write(folder)
                if engine is not None:
                    snapshot = engine.load(game_file)
                    if not snapshot.expert_plan:
                        raise RuntimeError(f"the planner found no plan for {game_file}")
                    game.write(folder, walkthrough=list(snapshot.expert_plan))
                written.append(game_file)
    finally:
        if engine is not None:
            engine.close()
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Write generated ALFWorld games in the official json_2.1.1 folder layout."
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--count", type=int, default=10, help="games per task type")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task-types", nargs="*", default=list(TASK_TYPES), choices=TASK_TYPES)
    parser.add_argument("--no-solve", action="store_true", help="skip the planner check")
    args = parser.parse_args(argv)
    files = write_games(
        args.out_dir,
        args.count,
        task_types=args.task_types,
        seed=args.seed,
        solve=not args.no_solve,
    )
    print(f"wrote {len(files)} games under {args.out_dir}")
