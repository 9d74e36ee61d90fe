"""The search expert: plays any env that can save and load its state by looking ahead.

It runs a depth-first search over turns, trying actions in order of preference (run right
first), dropping a line as soon as it loses a life, stalls (no progress for ``max_stall``
turns) or reaches a state already seen, and backing up to the last choice point when a line
fails. The first line to reach the goal is the plan; when the node budget or the env's turn
limit ends the search first, the line with the most progress is. The expert then replays its
plan and searches again if the real env leaves it (for example when driven from a new
state). Deterministic for a given start state.

Saving an emulator state is costly (PyBoy writes it byte by byte), so the search keeps a saved
anchor every ``anchor_every`` turns of the current line and reaches any node by loading the
nearest anchor and replaying the few actions after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from odyssey_core.agents.base import Agent
from odyssey_core.envs.base import Observation, TurnEnv

# At most two buttons, like the model; run right first, then the jumps, then the rest.
DEFAULT_ACTIONS: tuple[tuple[str, ...], ...] = (
    ("b", "right"),
    ("a", "right"),
    ("right",),
    ("a", "b"),
    ("noop",),
    ("a",),
    ("left",),
    ("a", "left"),
)


def _state_key(observation: Observation, info: dict[str, Any]) -> Any:
    """What identifies a game situation: the player's place and motion when the env reports
    them (platformers), else the picture itself. It serves to merge states in the search and
    to notice that the real env has left the plan.

    For platformers the RAM facts are the identity, not the picture: PyBoy renders the first
    frame after a state load slightly differently (the HUD row)."""
    if "player_y" in info:
        objects = tuple((o["kind"], o["x"], o["y"]) for o in info.get("objects", ()))
        return (
            info.get("progress"),
            info["player_y"],
            info.get("velocity_y"),
            info.get("camera_x"),
            objects,
        )
    return (info.get("progress"), hash(observation.image.tobytes()))


@dataclass
class _Node:
    action: tuple[str, ...] | None  # the action that led here (None at the root)
    key: Any  # the state key on arriving here
    progress: float
    stall: int  # turns since progress last grew
    anchor: bytes | None  # a saved state of this node, every few depths
    next_action: int = 0  # index of the next child to try


class SearchExpert(Agent):
    name = "expert"

    def __init__(
        self,
        actions: tuple[tuple[str, ...], ...] = DEFAULT_ACTIONS,
        max_nodes: int = 4000,
        max_stall: int = 4,
        anchor_every: int = 8,
    ) -> None:
        if max_nodes < 1 or max_stall < 1 or anchor_every < 1:
            raise ValueError("max_nodes, max_stall and anchor_every must be at least 1")
        self.actions = actions
        self.max_nodes = max_nodes
        self.max_stall = max_stall
        self.anchor_every = anchor_every
        self._plan: list[tuple[str, ...]] = []
        self._keys: list[Any] = []  # what each planned action should lead to
        self._last_key: Any = None
        self.expanded = 0  # simulated turns over the expert's life, for cost reporting
        self.searches = 0
        self.last_search_reached_goal = False

    def reset(self, env: TurnEnv, seed: int | None = None) -> None:
        self._plan, self._keys, self._last_key = [], [], None

    def act(self, env: TurnEnv, observation: Observation, info: dict[str, Any]) -> tuple[str, ...]:
        if not env.supports_save_state:
            raise TypeError(f"the search expert needs an env with save/load state, not {env!r}")
        here = _state_key(observation, info) if observation is not None else None
        if self._plan and (here is None or here != self._last_key):
            self._plan, self._keys = [], []  # the env is not where the plan expects it
        if not self._plan:
            self._plan, self._keys = self.plan(env)
            if not self._plan:  # nothing survives: any action will do
                self._plan, self._keys = [self.actions[0]], [None]
        self._last_key = self._keys.pop(0)
        return self._plan.pop(0)

    # -- search --------------------------------------------------------------------------------

    def plan(self, env: TurnEnv) -> tuple[list[tuple[str, ...]], list[Any]]:
        """Search from the env's current state and return the chosen line with what the env
        should show after each of its actions. The env is left exactly where it was."""
        root_state = env.save_state()
        self.searches += 1
        try:
            return self._search(env, root_state)
        finally:
            env.load_state(root_state)

    def _search(self, env: TurnEnv, root_state: bytes) -> tuple[list[tuple[str, ...]], list[Any]]:
        stack = [_Node(None, None, float("-inf"), 0, anchor=root_state)]
        seen: set[Any] = set()
        best: list[_Node] = []
        best_progress = float("-inf")
        at_top = True  # the env currently holds the state of stack[-1]
        nodes = 0
        self.last_search_reached_goal = False
        while stack and nodes < self.max_nodes:
            top = stack[-1]
            if top.next_action >= len(self.actions):
                stack.pop()
                at_top = False
                continue
            action = self.actions[top.next_action]
            top.next_action += 1
            if not at_top:
                self._restore(env, stack)
            observation, _, terminated, truncated, info = env.step(action)
            nodes += 1
            at_top = False
            if info.get("life_lost"):
                continue
            progress = float(info.get("progress", 0))
            stall = 0 if progress > top.progress else top.stall + 1
            child = _Node(action, _state_key(observation, info), progress, stall, anchor=None)
            if info.get("goal_reached"):
                self.last_search_reached_goal = True
                best = [*stack[1:], child]
                break
            if progress > best_progress:
                best_progress, best = progress, [*stack[1:], child]
            key = _state_key(observation, info)
            if terminated or truncated or stall > self.max_stall or key in seen:
                continue
            seen.add(key)
            if len(stack) % self.anchor_every == 0:
                child.anchor = env.save_state()
            stack.append(child)
            at_top = True
        self.expanded += nodes
        return [n.action for n in best], [n.key for n in best]  # type: ignore[misc]

    @staticmethod
    def _restore(env: TurnEnv, stack: list[_Node]) -> None:
        """Bring the env to the state of ``stack[-1]``: nearest anchor, then replay."""
        depth = max(i for i, node in enumerate(stack) if node.anchor is not None)
        env.load_state(stack[depth].anchor)  # type: ignore[arg-type]
        for node in stack[depth + 1 :]:
            env.step(node.action)
