"""The alfworld / TextWorld PDDL engine behind the ALFWorld env, imported only when used.

:class:`TextWorldEngine` drives TextWorld's ``PddlEnv`` (Fast Downward underneath) with
alfworld's own wrappers, exactly as ``alfworld.agents.environment.AlfredTWEnv`` does: the
demangler turns PDDL ids such as ``Mug_bar_2`` into the names commands use (``mug 1``). Every
call returns an :class:`EngineSnapshot`: the feedback text, the admissible commands, the facts
with readable names, whether the goal holds and, when asked for, the PDDL planner's plan from
the current state to the goal (alfworld's "planner" expert).

:func:`find_game_files` lists the playable games of an official ALFWorld data folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ALFWORLD_INSTALL_HINT",
    "EngineSnapshot",
    "TextWorldEngine",
    "find_game_files",
    "missing_alfworld_error",
    "require_alfworld",
]

ALFWORLD_INSTALL_HINT = "pip install 'odyssey-core[alfworld]'"

Fact = tuple[str, tuple[str, ...]]


def missing_alfworld_error(cause: BaseException | None = None) -> ImportError:
    detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
    return ImportError(
        "The ALFWorld environments need the alfworld package and TextWorld's PDDL engine "
        f"(textworld[pddl], fast-downward-textworld), which are not installed{detail}. "
        f"Install them with: {ALFWORLD_INSTALL_HINT}"
    )


def require_alfworld() -> None:
    """Raise a clear ImportError when the alfworld extra is missing."""
    try:
        import alfworld  # noqa: F401
        import fast_downward  # noqa: F401
        import textworld  # noqa: F401
    except ImportError as exc:
        raise missing_alfworld_error(exc) from exc


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's state after a load, reset or step."""

    feedback: str
    admissible_commands: tuple[str, ...]
    facts: tuple[Fact, ...]  # (predicate, argument names), names as the commands use them
    won: bool
    expert_plan: tuple[str, ...]  # empty when not requested or when no plan exists


class TextWorldEngine:
    """One TextWorld PDDL environment (one private copy of Fast Downward's library)."""

    def __init__(self, *, expert_plan: bool = True) -> None:
        require_alfworld()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs import PddlEnv

        infos = textworld.EnvInfos(
            admissible_commands=True,
            facts=True,
            won=True,
            policy_commands=expert_plan,
            extras=["gamefile"],
        )
        self.expert_plan = expert_plan
        self._pddl = _closing_pddl_env(PddlEnv)(infos)
        self._env = AlfredInfos(AlfredDemangler(self._pddl, shuffle=False))
        self.game_file: Path | None = None

    def load(self, game_file: str | Path) -> EngineSnapshot:
        """Load a ``game.tw-pddl`` file and reset it."""
        path = Path(game_file)
        self._env.load(str(path))
        self.game_file = path
        return self.reset()

    def reset(self) -> EngineSnapshot:
        if self.game_file is None:
            raise RuntimeError("load a game first")
        return self._snapshot(self._env.reset())

    def step(self, command: str) -> EngineSnapshot:
        state, _, _ = self._env.step(command)
        return self._snapshot(state)

    def close(self) -> None:
        # The library copy is dropped, not dlclose()d: unloading Fast Downward and loading a
        # fresh copy later crashes the process (TextWorld never unloads it either).
        self._pddl.downward_lib = None
        self.game_file = None

    @staticmethod
    def _snapshot(state: Any) -> EngineSnapshot:
        facts = tuple(
            sorted(
                (fact.name, tuple(arg.name.strip() for arg in fact.arguments))
                for fact in state["facts"]
            )
        )
        plan = state.get("policy_commands") or ()
        return EngineSnapshot(
            feedback=str(state["feedback"]).strip(),
            admissible_commands=tuple(state["admissible_commands"]),
            facts=facts,
            won=bool(state["won"]),
            expert_plan=tuple(plan),
        )


def _closing_pddl_env(pddl_env: type) -> type:
    """``PddlEnv`` whose ``load`` closes the game file it reads.

    TextWorld's ``PddlEnv.load`` reads a path with ``json.load(open(path))`` and never closes
    the file, so every load leaked a descriptor (``ResourceWarning: unclosed file``). This
    subclass reads the file inside a ``with`` block and hands the parsed data to TextWorld,
    keeping the path as the game file exactly as a path load would.
    """

    class ClosingPddlEnv(pddl_env):  # type: ignore[misc, valid-type]
        def load(self, filename_or_data: Any) -> None:
            if isinstance(filename_or_data, str | os.PathLike):
                with open(filename_or_data, encoding="utf-8") as handle:
                    data = json.load(handle)
                super().load(data)
                self._game_file = os.fspath(filename_or_data)
            else:
                super().load(filename_or_data)

    return ClosingPddlEnv


def find_game_files(data_path: str | Path, task_types: Sequence[str]) -> list[Path]:
    """Playable ``game.tw-pddl`` files under an official ALFWorld data folder, sorted.

    The same filter as alfworld's ``AlfredTWEnv.collect_game_files``: a ``traj_data.json`` of
    one of ``task_types`` next to a ``game.tw-pddl`` marked solvable; sliced and movable-
    receptacle trials are skipped (the text engine does not support them).
    """
    root = Path(os.path.expandvars(str(data_path))).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(
            f"ALFWorld data folder {root} does not exist (point data_path at the json_2.1.1 "
            "folder of the official data, or a split inside it)"
        )
    wanted = set(task_types)
    found = []
    for traj_path in sorted(root.rglob("traj_data.json")):
        folder = traj_path.parent
        game_file = folder / "game.tw-pddl"
        if "movable" in str(folder) or "Sliced" in str(folder) or not game_file.is_file():
            continue
        traj = json.loads(traj_path.read_text())
        if traj.get("task_type") not in wanted:
            continue
        if not json.loads(game_file.read_text()).get("solvable"):
            continue
        found.append(game_file)
    return found
