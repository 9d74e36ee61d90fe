"""GTR on ALFWorld: the agent's system prompt and a programmatic thought corrector.

The corrector asks GTR's three ALFWorld questions (Appendix C) of the env's privileged state
instead of a VLM: (1) does the thought see the scene right (where the agent stands, what it
holds)? (2) does it aim at the right next sub-goal? (3) is the action admissible and the next
step of a plan to the goal? The plan is the PDDL planner's (``info["expert_plan"]``), so the
corrected thought always leads somewhere. The thought format it reads and writes is the one
the system prompt asks for::

    "location": "drawer 1", "holding": "spoon 3", "subgoal": "put one spoon in a drawer",
    "thoughts": "...", "action": "move spoon 3 to drawer 1"

It is registered as the ``alfworld`` corrector (``rollout.corrector: alfworld``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from odyssey_core.recipes.gtr.corrector.base import (
    Correction,
    EpisodeMemory,
    JudgingCorrector,
    StepToCorrect,
)

__all__ = ["ALFWORLD_SYSTEM_PROMPT", "AlfWorldCorrector", "next_subgoal"]

ALFWORLD_SYSTEM_PROMPT = (
    "You are a household robot in ALFWorld. Each turn you see a picture of the room (the "
    "place you stand at has a yellow frame and shows its contents when open; the top bar "
    "shows what you hold), your task, the actions you took so far and the admissible "
    "actions. Work step by step: find the object, take it, heat, cool or clean it or switch "
    "on the lamp when the task says so, then put it where the task asks. Reason as: "
    '"location": "<where you stand>", "holding": "<what you hold or nothing>", "subgoal": '
    '"<your next sub-goal>", "thoughts": "<the next action and why>". Reply in one line: '
    'first your reasoning, then the move as "action": "<one admissible action>". Write the '
    "action last and nothing after it."
)

_MIDDLE = "the middle of the room"


def _field(thought: str, key: str) -> str | None:
    match = re.search(rf"{key}[\"']?\s*[:=]\s*[\"']([^\"']*)[\"']", thought or "", re.IGNORECASE)
    return match.group(1).strip().lower() if match else None


def _names(text: str) -> set[str]:
    """Object or receptacle names (``"mug 1"``) mentioned in ``text``."""
    return set(re.findall(r"[a-z]+ \d+", text.lower()))


def next_subgoal(info: Mapping[str, Any]) -> str:
    """The first sub-goal that does not hold now, or the task itself when they all do."""
    for name, holds in zip(info.get("subgoals", ()), info.get("subgoals_now", ()), strict=False):
        if not holds:
            return str(name)
    return str(info.get("task", "finish the task"))


class AlfWorldCorrector(JudgingCorrector):
    """Ground-truth corrections for ALFWorld from the env's info and the planner's plan."""

    source = "alfworld_programmatic"
    oracle = True  # reads the env's state and the planner's plan

    def judge(self, step: StepToCorrect, memory: EpisodeMemory | None) -> Correction:
        thought, action, info = step.thought, step.action, step.info
        if info.get("game") != "alfworld":
            raise ValueError(f"the ALFWorld corrector does not know the game {info.get('game')!r}")
        facing = [str(f) for f in info.get("facing", ())]
        holding = [str(h) for h in info.get("holding", ())]
        plan = [str(step) for step in info.get("expert_plan", ())]
        admissible = [str(a) for a in info.get("legal_actions", ())]
        parts: list[str] = []

        # (1) the scene: where the agent stands and what it holds
        said_location, said_holding = _field(thought, "location"), _field(thought, "holding")
        location_ok: bool | None = None
        if said_location is not None:
            location_ok = (
                _names(said_location) == set(facing) if facing else "middle" in said_location
            )
            parts.append("location: " + ("right" if location_ok else "wrong"))
        holding_ok: bool | None = None
        if said_holding is not None:
            empty = said_holding in ("", "nothing", "none") or "nothing" in said_holding
            holding_ok = (not holding and empty) or (_names(said_holding) == set(holding))
            parts.append("holding: " + ("right" if holding_ok else "wrong"))
        if said_location is None and said_holding is None:
            parts.append("scene: not described")

        # (2) the sub-goal
        subgoal = next_subgoal(info)
        said_subgoal = _field(thought, "subgoal")
        subgoal_ok: bool | None = None
        if said_subgoal is not None:
            subgoal_ok = said_subgoal.strip(" .") == subgoal.lower().strip(" .")
            parts.append(f"sub-goal {said_subgoal!r}: " + ("right" if subgoal_ok else "not next"))

        # (3) the action
        expected = plan[0] if plan else None
        solvable = bool(plan) or bool(info.get("won"))
        action_ok: bool | None = None
        if action is None or action not in admissible:
            action_ok = False
            parts.append(f"action {action!r}: not admissible")
        elif expected is not None:
            action_ok = action == expected
            parts.append(f"action {action!r}: " + ("on plan" if action_ok else "off plan"))
        # correct = every question answered, and right (an undescribed scene is not correct)
        agrees = all(check is True for check in (location_ok, holding_ok, subgoal_ok))
        agrees = agrees and bool(action_ok) and solvable

        where = ", ".join(facing) if facing else _MIDDLE
        held = ", ".join(holding) if holding else "nothing"
        if expected is None:
            why = "No sequence of admissible actions reaches the goal from here."
        else:
            why = (
                f"I am {'at' if facing else 'in'} {where} and hold {held}. "
                f"To {info.get('task', 'finish the task')}, "
                f"my next sub-goal is to {subgoal}, so the next step is '{expected}'."
            )
        corrected = (
            f'"location": "{where}", "holding": "{held}", "subgoal": "{subgoal}", '
            f'"thoughts": {json.dumps(why)}'
        )
        return self.checked(
            parts,
            agrees,
            corrected,
            solvable=solvable,
            action=expected,
            details={
                "location_ok": location_ok,
                "holding_ok": holding_ok,
                "subgoal_ok": subgoal_ok,
                "action_ok": action_ok,
            },
        )
