"""ALFWorld as a turn environment: alfworld's TextWorld engine, a drawn view, GTR's rewards.

Each episode plays one household game: a generated one (see
:mod:`odyssey_core.envs.alfworld.generate`; the reset seed picks the task type and the game) or,
with ``data_path``, one of the official ALFWorld games. Following GTR (Appendix A.2):

* the observation is a picture of the scene plus text with the task, the actions taken so far
  and the admissible actions; the engine's own scene description is left out of the text
  (``show_feedback=True`` adds it back);
* reward = 50 when the goal is reached (the episode ends), +1 for each sub-goal the first
  time it holds (see :mod:`odyssey_core.envs.alfworld.scene`), -1 for an inadmissible action,
  which leaves the state exactly as it was;
* the episode is truncated after ``max_steps`` actions.

An action is the model's answer (read with
:func:`~odyssey_core.protocol.gtr_format.parse_gtr_response` against the admissible commands),
a :class:`~odyssey_core.protocol.gtr_format.GTRParsed`, a command string, or an index into
``legal_actions`` (the admissible commands of the current state). ``info`` carries what a
programmatic corrector needs: the admissible commands, the goal, the sub-goals reached and the
PDDL planner's plan from the current state (``expert_plan``).
"""

from __future__ import annotations

import json
import re
import shutil
import string
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from odyssey_core.envs.alfworld.engine import EngineSnapshot, TextWorldEngine, find_game_files
from odyssey_core.envs.alfworld.generate import (
    TASK_SHORT_NAMES,
    TASK_TYPES,
    TaskSpec,
    generate_game,
)
from odyssey_core.envs.alfworld.render import render_scene
from odyssey_core.envs.alfworld.scene import (
    Scene,
    scene_from_facts,
    subgoal_names,
    subgoals_reached,
)
from odyssey_core.envs.base import Observation, StepResult, TurnEnv
from odyssey_core.protocol.gtr_format import GTRParsed, parse_gtr_response

__all__ = ["AlfWorldEnv", "resolve_task_types"]

GOAL_REWARD = 50.0
SUBGOAL_REWARD = 1.0
INADMISSIBLE_REWARD = -1.0
ANSWER_HINT = (
    'Answer with your thoughts, then the action on its own as "action": "<one admissible action>".'
)
_BY_SHORT_NAME = {short: full for full, short in TASK_SHORT_NAMES.items()}
_TASK_RE = re.compile(r"your task is to:\s*(.+?)\s*$", re.IGNORECASE | re.DOTALL)


def resolve_task_types(task_types: str | Sequence[str] | None) -> tuple[str, ...]:
    """ALFWorld task types from full names or short ones (``pick``, ``heat``, ``pick2``)."""
    if task_types is None:
        return TASK_TYPES
    names = [task_types] if isinstance(task_types, str) else list(task_types)
    resolved = []
    for name in names:
        full = _BY_SHORT_NAME.get(name, name)
        if full not in TASK_TYPES:
            known = ", ".join(list(TASK_TYPES) + list(_BY_SHORT_NAME))
            raise ValueError(f"unknown ALFWorld task type {name!r}; known: {known}")
        resolved.append(full)
    if not resolved:
        raise ValueError("task_types must name at least one task type")
    return tuple(dict.fromkeys(resolved))


def _room_of(traj_data: dict[str, Any]) -> str:
    """The room of a game: ours record it; ALFRED's floor plans are numbered by room."""
    scene = traj_data.get("scene") or {}
    if scene.get("room"):
        return str(scene["room"])
    number = scene.get("scene_num")
    if number is None:
        digits = re.findall(r"\d+", str(scene.get("floor_plan", "")))
        number = int(digits[0]) if digits else None
    rooms = {0: "kitchen", 2: "living room", 3: "bedroom", 4: "bathroom"}
    return rooms.get(int(number) // 100, "room") if number is not None else "room"


def _clean_command(text: str) -> str:
    return " ".join(text.split()).lower()


class AlfWorldEnv(TurnEnv):
    """One ALFWorld household per episode, played through alfworld's text engine."""

    game = "alfworld"

    def __init__(
        self,
        *,
        task_types: str | Sequence[str] | None = None,
        max_steps: int = 50,
        image_size: tuple[int, int] = (480, 320),
        data_path: str | Path | None = None,
        game_dir: str | Path | None = None,
        expert_plan: bool = True,
        show_feedback: bool = False,
        distractors: tuple[int, int] = (4, 8),
    ) -> None:
        """
        Args:
            task_types: the task types episodes draw from (all six by default).
            max_steps: actions per episode before truncation.
            image_size: (width, height) of the drawn view.
            data_path: an official ALFWorld data folder (``json_2.1.1`` or a split inside
                it); episodes then draw from its games instead of generated ones.
            game_dir: where generated games are written (a temporary folder by default,
                removed on ``close``).
            expert_plan: ask the PDDL planner for a plan every step (``info["expert_plan"]``).
            show_feedback: add the engine's text feedback to the observation text.
            distractors: (min, max) objects unrelated to the task in a generated game.
        """
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.task_types = resolve_task_types(task_types)
        self.max_steps = int(max_steps)
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.data_path = Path(data_path) if data_path is not None else None
        self.show_feedback = show_feedback
        self.distractors = (int(distractors[0]), int(distractors[1]))
        self.env_id = "alfworld"
        self.action_space = gymnasium.spaces.Text(max_length=256, charset=string.printable)
        self.observation_space = gymnasium.spaces.Box(
            0, 255, (self.image_size[1], self.image_size[0], 3), np.uint8
        )
        self._engine = TextWorldEngine(expert_plan=expert_plan)
        self._own_game_dir = game_dir is None
        self.game_dir = Path(
            tempfile.mkdtemp(prefix="odyssey-alfworld-") if game_dir is None else game_dir
        )
        self._official_games: list[Path] | None = None
        self._snapshot: EngineSnapshot | None = None
        self._scene: Scene | None = None
        self.task: TaskSpec | None = None
        self.task_text = ""
        self.room = ""
        self.game_file: Path | None = None
        self.history: list[str] = []
        self._reached: list[bool] = []
        self._steps = 0
        self._inadmissible = 0
        self._done = False

    # -- the contract -------------------------------------------------------------------------
    @property
    def legal_actions(self) -> list[str]:  # type: ignore[override]
        """The admissible commands of the current state."""
        return list(self._snapshot.admissible_commands) if self._snapshot else []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        game_file = self._pick_game(options)
        if game_file == self.game_file and self._snapshot is not None:
            snapshot = self._engine.reset()
        else:
            snapshot = self._engine.load(game_file)
            self.game_file = game_file
            traj = json.loads((game_file.parent / "traj_data.json").read_text())
            self.task = TaskSpec.from_traj_data(traj)
            self.room = _room_of(traj)
            match = _TASK_RE.search(snapshot.feedback)
            self.task_text = match.group(1).rstrip(".") if match else self.task.description()
        self._set_state(snapshot)
        self.history = []
        self._steps = 0
        self._inadmissible = 0
        self._done = False
        assert self.task is not None and self._scene is not None
        # Sub-goals that already hold at the start (possible in official games) pay nothing.
        self._reached = subgoals_reached(self.task, self._scene)
        return self._observation(), self._info(action=None, invalid=False, parse_error=None)

    def step(self, action: Any) -> StepResult:
        if self._done or self._snapshot is None:
            raise RuntimeError(
                "the episode is over; call reset()" if self._done else "call reset()"
            )
        assert self.task is not None
        command, attempted, parse_error = self._resolve(action)
        extra: dict[str, Any] = {"subgoals_new": []}
        if command is None:
            # GTR: an inadmissible action is penalised and s_{t+1} = s_t.
            self._inadmissible += 1
            reward = INADMISSIBLE_REWARD
        else:
            self._set_state(self._engine.step(command))
            self.history.append(command)
            assert self._scene is not None
            now = subgoals_reached(self.task, self._scene)
            new = [
                i
                for i, (was, is_) in enumerate(zip(self._reached, now, strict=True))
                if is_ and not was
            ]
            self._reached = [was or is_ for was, is_ in zip(self._reached, now, strict=True)]
            extra["subgoals_new"] = [subgoal_names(self.task)[i] for i in new]
            reward = SUBGOAL_REWARD * len(new) + (GOAL_REWARD if self._snapshot.won else 0.0)
        self._steps += 1
        terminated = bool(self._snapshot.won)
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        info = self._info(
            action=command if command is not None else attempted,
            invalid=command is None,
            parse_error=parse_error,
        )
        info.update(extra)
        return self._observation(), float(reward), terminated, truncated, info

    def render(self) -> np.ndarray:  # type: ignore[override]
        return self._frame()

    def close(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()
            self._engine = None  # type: ignore[assignment]
        if getattr(self, "_own_game_dir", False):
            shutil.rmtree(self.game_dir, ignore_errors=True)
        super().close()

    # -- games --------------------------------------------------------------------------------
    def official_games(self) -> list[Path]:
        """The playable games under ``data_path`` for this env's task types (cached)."""
        if self.data_path is None:
            return []
        if self._official_games is None:
            self._official_games = find_game_files(self.data_path, self.task_types)
            if not self._official_games:
                raise FileNotFoundError(
                    f"no playable ALFWorld games of types {', '.join(self.task_types)} under "
                    f"{self.data_path} (expected traj_data.json next to game.tw-pddl)"
                )
        return self._official_games

    def _pick_game(self, options: dict[str, Any]) -> Path:
        if options.get("game_file") is not None:
            return Path(options["game_file"])
        if self.data_path is not None:
            games = self.official_games()
            index = options.get("game_index")
            index = int(self.np_random.integers(len(games))) if index is None else int(index)
            return games[index % len(games)]
        task_type = options.get("task_type")
        if task_type is None:
            task_type = self.task_types[int(self.np_random.integers(len(self.task_types)))]
        task_type = resolve_task_types(str(task_type))[0]
        game_seed = options.get("game_seed")
        if game_seed is None:
            game_seed = int(self.np_random.integers(2**31 - 1))
        game = generate_game(task_type, int(game_seed), distractors=self.distractors)
        folder = self.game_dir / game.name / game.trial
        game_file = folder / "game.tw-pddl"
        if not game_file.is_file():
            game.write(folder)
        return game_file

    # -- state, text and picture ----------------------------------------------------------------
    def _set_state(self, snapshot: EngineSnapshot) -> None:
        self._snapshot = snapshot
        self._scene = scene_from_facts(snapshot.facts)

    @property
    def scene(self) -> Scene:
        if self._scene is None:
            raise RuntimeError("call reset() first")
        return self._scene

    def _frame(self) -> np.ndarray:
        return render_scene(self.scene, self.room, self.image_size)

    def observation_text(self) -> str:
        done = "; ".join(f"{i + 1}. {c}" for i, c in enumerate(self.history)) or "none yet"
        lines = [
            f"ALFWorld: you are a household robot in a {self.room}; the image shows the room's "
            "furniture and appliances, the one you stand at (yellow frame, with its contents "
            "when it is open) and what you hold; a dot after an object marks it hot (red), "
            "cool (blue), clean (green) or switched on (yellow).",
            f"Your task is to: {self.task_text}.",
            f"Your actions so far: {done}.",
        ]
        if self.show_feedback and self._snapshot is not None:
            lines.append(f"What you just noticed: {self._snapshot.feedback}")
        lines.append(f"Admissible actions: {', '.join(self.legal_actions)}.")
        lines.append(ANSWER_HINT)
        return "\n".join(lines)

    def _observation(self) -> Observation:
        return Observation(
            image=self._frame(),
            text=self.observation_text(),
            meta={"game": self.game, "task_type": self.task.task_type if self.task else None},
        )

    def state_key(self) -> tuple:
        return self.scene.key()

    def _info(self, *, action: str | None, invalid: bool, parse_error: str | None) -> dict:
        assert self.task is not None and self._snapshot is not None
        scene = self.scene
        names = subgoal_names(self.task)
        done_count = sum(self._reached) + int(self._snapshot.won)
        return {
            "game": self.game,
            "level": self.task.short_name,
            "task_type": self.task.task_type,
            "task": self.task_text,
            "goal": self.task.pddl_params(),
            "room": self.room,
            "game_file": str(self.game_file),
            "step": self._steps,
            "action": action,
            "invalid_action": invalid,
            "parse_error": parse_error,
            "inadmissible_count": self._inadmissible,
            "legal_actions": self.legal_actions,
            "admissible_commands": self.legal_actions,
            "history": list(self.history),
            "feedback": self._snapshot.feedback,
            "subgoals": names,
            "subgoals_done": list(self._reached),
            "subgoals_now": subgoals_reached(self.task, scene),
            "won": bool(self._snapshot.won),
            "success": bool(self._snapshot.won),
            "progress": done_count / (len(names) + 1),
            "expert_plan": list(self._snapshot.expert_plan),
            "facing": list(scene.facing),
            "holding": [item.name for item in scene.held],
            "visible": [item.name for item in scene.visible],
            "state_key": self.state_key(),
            "solvable": True if self._snapshot.won else (bool(self._snapshot.expert_plan) or None),
        }

    def _resolve(self, action: Any) -> tuple[str | None, str | None, str | None]:
        """(admissible command or None, what was attempted, parse error)."""
        legal = self.legal_actions
        if isinstance(action, int | np.integer) and not isinstance(action, bool):
            if not 0 <= int(action) < len(legal):
                raise ValueError(f"action index {action} out of range (0..{len(legal) - 1})")
            return legal[int(action)], None, None
        if isinstance(action, str):
            by_clean = {_clean_command(c): c for c in legal}
            if _clean_command(action) in by_clean:
                return by_clean[_clean_command(action)], None, None
            action = parse_gtr_response(action, legal) if _looks_like_answer(action) else action
        if isinstance(action, GTRParsed):
            if action.valid and action.action in legal:
                return action.action, None, None
            return None, _attempt(action), action.error or "inadmissible"
        if isinstance(action, str):  # a bare command the engine does not allow here
            return None, _sanitize(action), "inadmissible"
        raise TypeError(
            f"unsupported action {action!r}: give model text, a GTRParsed, an admissible "
            "command or an index into env.legal_actions"
        )


def _looks_like_answer(text: str) -> bool:
    return re.search(r"\baction\b\W*:", text, re.IGNORECASE) is not None


def _sanitize(text: str) -> str:
    """A one-line, quote-free echo of what the agent tried (it may be written back as an
    answer, e.g. in thought cloning)."""
    return " ".join(text.replace('"', " ").replace("'", " ").split())[:80]


def _attempt(parsed: GTRParsed) -> str | None:
    if parsed.detail:  # the parser's repr() of an illegal value
        return _sanitize(parsed.detail.strip("'\""))
    return None
