"""The records of a personalized-GUI dataset: one :class:`EpisodeRecord` per demonstrated
episode, one :class:`StepRecord` per action. Generated episodes and loaded SmartSpot-format
episodes are the same records, so everything downstream (the env's replay mode, SFT data,
rewards, offline metrics) reads one format.

An episode has three stages, in this order: ``search`` steps (click / type / scroll / exit on
the GUI), exactly one ``pool`` step (the agent declares the item pool found and summarises the
user's intent), then one ``recommend`` step per candidate item (Yes / No). The user's profile
is hidden from the agent; it shows only through the demonstrated actions, the intent summary
and the Yes / No labels.

On disk (written by ``odyssey_core.envs.persona.dataset``): ``episodes.jsonl`` (one episode
per line, :meth:`EpisodeRecord.to_json`), the screenshots under ``screens/`` (paths relative
to the folder) and ``manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odyssey_core.envs.persona.screen import Box, Screen
from odyssey_core.protocol.gui import GuiAction

__all__ = ["SPLITS", "STAGES", "EpisodeRecord", "StepRecord"]

STAGES: tuple[str, ...] = ("search", "pool", "recommend")
SPLITS: tuple[str, ...] = ("train", "val", "test")


@dataclass(frozen=True)
class StepRecord:
    """One demonstrated step: what the user saw and did.

    ``gold`` is the demonstrated action. ``target_id`` names the element a click or type
    must land in (its box is ``screen.element(target_id).box``); ``optimal`` lists every action
    type + target that is an optimal next action in this state (the demonstrator knows the set;
    a detour step's ``optimal`` is where the demonstration should have gone). ``candidate`` is
    the item a recommend step asks about.
    """

    index: int
    stage: str
    screen: Screen
    image: str  # the screenshot, relative to the dataset folder
    gold: GuiAction
    target_id: str | None = None
    optimal: tuple[tuple[str, str | None], ...] = ()  # (action type, target element id or None)
    candidate: str | None = None
    detour: bool = False  # a human-like detour of the demonstration (not an optimal action)

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"step {self.index}: unknown stage {self.stage!r}; stages: {STAGES}")
        if self.gold.spatial and self.target_id is None:
            raise ValueError(f"step {self.index}: a {self.gold.action} step needs its target_id")

    @property
    def target_box(self) -> Box | None:
        return None if self.target_id is None else self.screen.element(self.target_id).box

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "stage": self.stage,
            "screen": self.screen.to_json(),
            "image": self.image,
            "gold": self.gold.to_json(),
            "target_id": self.target_id,
            "optimal": [list(o) for o in self.optimal],
            "candidate": self.candidate,
            "detour": self.detour,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepRecord:
        return cls(
            index=int(data["index"]),
            stage=str(data["stage"]),
            screen=Screen.from_json(data["screen"]),
            image=str(data["image"]),
            gold=GuiAction.from_json(data["gold"]),
            target_id=data.get("target_id"),
            optimal=tuple((str(a), t) for a, t in data.get("optimal", ())),
            candidate=data.get("candidate"),
            detour=bool(data.get("detour", False)),
        )


@dataclass(frozen=True)
class EpisodeRecord:
    """One demonstrated episode.

    ``request`` is the user's (possibly vague) words; ``intent`` the true intent as a short
    sentence and ``intent_slots`` as slot -> value (what the pool step's summary is scored
    against); ``yes_items`` the candidates the user would accept. ``scenario`` is what the
    app model needs to rebuild the live app (channel, catalogue seed, the user), so online
    evaluation can let the agent's own actions drive it; loaded real data has none.
    """

    episode_id: str
    channel: str
    request: str
    intent: str
    intent_slots: dict[str, str]
    yes_items: tuple[str, ...]
    width: int
    height: int
    steps: tuple[StepRecord, ...]
    ambiguity: str = "vague"
    split: str = "train"
    scenario: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"episode {self.episode_id}: unknown split {self.split!r}")
        order = [STAGES.index(s.stage) for s in self.steps]
        if order != sorted(order) or order.count(1) != 1:
            raise ValueError(
                f"episode {self.episode_id}: steps must be search..., one pool, recommend..."
            )
        if [s.index for s in self.steps] != list(range(len(self.steps))):
            raise ValueError(f"episode {self.episode_id}: step indices must be 0, 1, 2 ...")

    @property
    def candidates(self) -> tuple[str, ...]:
        return tuple(s.candidate for s in self.steps if s.stage == "recommend" and s.candidate)

    def stage_steps(self, stage: str) -> tuple[StepRecord, ...]:
        return tuple(s for s in self.steps if s.stage == stage)

    def to_json(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "channel": self.channel,
            "request": self.request,
            "intent": self.intent,
            "intent_slots": dict(self.intent_slots),
            "yes_items": list(self.yes_items),
            "width": self.width,
            "height": self.height,
            "ambiguity": self.ambiguity,
            "split": self.split,
            "scenario": self.scenario,
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        return cls(
            episode_id=str(data["episode_id"]),
            channel=str(data["channel"]),
            request=str(data["request"]),
            intent=str(data["intent"]),
            intent_slots={str(k): str(v) for k, v in data["intent_slots"].items()},
            yes_items=tuple(str(i) for i in data["yes_items"]),
            width=int(data["width"]),
            height=int(data["height"]),
            ambiguity=str(data.get("ambiguity", "vague")),
            split=str(data.get("split", "train")),
            scenario=dict(data.get("scenario", {})),
            steps=tuple(StepRecord.from_json(s) for s in data["steps"]),
        )
