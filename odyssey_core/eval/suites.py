"""Evaluation suites: which levels to play, from where, how often (YAML -> pydantic).

A suite has sections, each one table of the report:

* ``from_start``: every level from its start, ``runs`` episodes each for open models and
  ``api_runs`` for API models (the paper, App. E.3: 256 and 8), with the training turn limit.
* ``curated``: episodes from saved states (at least 10 per level), on training levels (the
  paper's off-policy setting) or held-out levels (unseen). States come from files
  (``states_dir/<game>-<level>/*.state``) or are made by playing the search expert on the
  level and keeping states at spread-out points (:func:`make_curated_states`). Progress is
  still measured from the level's start; the report also shows the progress gained since the
  state.
* a section whose ``game`` differs from the suite's is the cross-game setting; Super Mario
  Land sections are skipped, with a note, when no ROM is configured.

``base_agent`` names the row relative improvements are measured against (the paper: the base
VLM before SFT and RL, e.g. ``--agent base=hf:/models/Qwen3-VL-8B-Instruct``), and
``inference_from`` the training preset whose inference settings policy agents use when
nothing closer says (App. E.3; see :mod:`odyssey_core.eval.inference`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from odyssey_core.config import GameName, StrictModel, load_preset
from odyssey_core.eval.scenarios import check_scenario_names

__all__ = [
    "CuratedState",
    "CuratedStatesConfig",
    "EvalSuite",
    "SuiteSection",
    "load_curated_states",
    "load_suite",
    "make_curated_states",
    "save_curated_states",
    "section_skip_reason",
]

MIN_STATES_PER_LEVEL = 10


class CuratedStatesConfig(StrictModel):
    """Where a curated section's start states come from."""

    count: int = Field(default=MIN_STATES_PER_LEVEL, ge=1, description="states per level")
    states_dir: Path | None = Field(
        default=None, description="load <states_dir>/<game>-<level>/*.state; else make them"
    )
    expert_turns: int = Field(default=200, ge=2, description="turns of expert play to sample")
    expert_max_nodes: int = Field(default=600, ge=1, description="search budget per plan")
    runs_per_state: int = Field(default=1, ge=1)
    allow_fewer: bool = Field(
        default=False, description="accept fewer than 10 states per level (tests, quick looks)"
    )
    scenarios: dict[str, str] = Field(
        default_factory=dict,
        description="level -> the scenario (eval/scenarios.py) each of its states in "
        "states_dir must be; every fact is checked before the first episode",
    )

    @model_validator(mode="after")
    def _enough(self) -> CuratedStatesConfig:
        if self.count < MIN_STATES_PER_LEVEL and not self.allow_fewer:
            raise ValueError(
                f"curated sections need at least {MIN_STATES_PER_LEVEL} states per level "
                "(set allow_fewer: true for quick runs)"
            )
        if self.scenarios and self.states_dir is None:
            raise ValueError(
                "states.scenarios checks the states in states_dir; set states_dir (the expert's "
                "states are no scenario)"
            )
        return self


class SuiteSection(StrictModel):
    name: str
    kind: Literal["from_start", "curated"] = "from_start"
    game: GameName | None = Field(default=None, description="default: the suite's game")
    levels: list[str]
    split: Literal["train", "heldout", "other_game"] = "train"
    runs: int | None = Field(default=None, ge=1, description="from_start: episodes per level")
    api_runs: int | None = Field(default=None, ge=1, description="the same for API models")
    max_turns: int | None = Field(default=None, ge=1)
    states: CuratedStatesConfig = CuratedStatesConfig()
    base_agent: str | None = Field(
        default=None, description="the row relative improvements are measured against"
    )


class EvalSuite(StrictModel):
    name: str
    game: GameName = "odland"
    seed: int = 0
    runs: int = Field(default=8, ge=1, description="from-start episodes per level (paper: 256)")
    api_runs: int | None = Field(
        default=None, ge=1, description="the same for API models (paper: 8); None: runs"
    )
    max_turns: int = Field(default=400, ge=1, description="as in training")
    workers: int = Field(default=4, ge=1, description="subprocess environments")
    videos: int = Field(default=2, ge=0, description="episodes per section written as video")
    base_agent: str | None = Field(
        default=None, description="the row improvements are measured against (paper: base VLM)"
    )
    inference_from: str | None = Field(
        default=None,
        description="an Odysseus RL preset whose inference settings policy agents use when "
        "neither the command nor the model's checkpoint names one (App. E.3)",
    )
    env_overrides: dict[str, Any] = Field(default_factory=dict)
    sections: list[SuiteSection]

    def section_game(self, section: SuiteSection) -> str:
        return section.game or self.game

    def section_runs(self, section: SuiteSection, api: bool = False) -> int:
        """From-start episodes per level of ``section`` for an open (or, ``api``, API) model."""
        if api:
            return section.api_runs or self.api_runs or self.section_runs(section)
        return section.runs or self.runs

    def section_max_turns(self, section: SuiteSection) -> int:
        return section.max_turns or self.max_turns

    def section_base(self, section: SuiteSection) -> str | None:
        return section.base_agent or self.base_agent

    @model_validator(mode="after")
    def _scenarios_of_the_levels(self) -> EvalSuite:
        for section in self.sections:
            scenarios = section.states.scenarios
            unknown = set(scenarios) - set(section.levels)
            if unknown:
                raise ValueError(
                    f"section {section.name}: states.scenarios names levels it does not play: "
                    f"{sorted(unknown)} (its levels: {section.levels})"
                )
            game = self.section_game(section)
            check_scenario_names(
                {f"{game}-{level}": name for level, name in scenarios.items()},
                f"section {section.name}: states.scenarios",
            )
        return self


def load_suite(suite: str | Path, overrides: dict[str, Any] | None = None) -> EvalSuite:
    """``configs/eval/<name>.yaml`` or a YAML path, with nested ``overrides``."""
    return load_preset(EvalSuite, suite, overrides, kind="eval", what="eval suite")


def section_skip_reason(game: str, env_overrides: dict[str, Any] | None = None) -> str | None:
    """Why a section of ``game`` cannot run here (Super Mario Land without a ROM), or None."""
    has_rom = (env_overrides or {}).get("rom_path") or os.environ.get("ODYSSEY_SML_ROM")
    if game == "mario" and not has_rom:
        return (
            "skipped: Super Mario Land needs your own ROM; set ODYSSEY_SML_ROM to run this section"
        )
    return None


# -- curated states ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CuratedState:
    """A saved env state to start episodes from, with where it sits in the level."""

    env_id: str  # e.g. "odland-1-2"
    state: bytes
    progress: float  # absolute progress (from the level start) at the state
    turn: int  # turns of expert play that led here (0 for hand-made files)
    name: str = ""


def _pick_spread(progress: list[float], count: int) -> list[int]:
    """Indices of ``count`` entries whose progress is spread evenly over the range seen.

    Targets are evenly spaced between the lowest and highest progress; each takes the unused
    entry nearest to it, so a stretch where the player stood still yields one state, not ten.
    """
    if count >= len(progress):
        return list(range(len(progress)))
    low, high = min(progress), max(progress)
    chosen: list[int] = []
    for k in range(count):
        target = low + (high - low) * k / max(1, count - 1)
        free = [i for i in range(len(progress)) if i not in chosen]
        chosen.append(min(free, key=lambda i: (abs(progress[i] - target), i)))
    return sorted(chosen)


def make_curated_states(
    level: str,
    count: int = MIN_STATES_PER_LEVEL,
    *,
    game: str = "odland",
    expert_turns: int = 200,
    expert_max_nodes: int = 600,
    env_overrides: dict[str, Any] | None = None,
    seed: int = 0,
) -> list[CuratedState]:
    """Play the search expert on ``level`` for up to ``expert_turns`` turns, saving the state
    after every turn that leaves the episode running, and keep ``count`` states spread over
    the progress reached. The first state is one turn in, so none equals the level start."""
    from odyssey_core.agents import SearchExpert
    from odyssey_core.envs import make_env

    env = make_env(f"{game}-{level}", **{**(env_overrides or {}), "max_turns": expert_turns + 1})
    expert = SearchExpert(max_nodes=expert_max_nodes)
    candidates: list[CuratedState] = []
    try:
        observation, info = env.reset(seed=seed)
        expert.reset(env, seed=seed)
        for turn in range(1, expert_turns + 1):
            action = expert.act(env, observation, info)
            observation, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:  # an ended episode is no place to start from
                break
            candidates.append(
                CuratedState(
                    env_id=env.env_id,
                    state=env.save_state(),
                    progress=float(info.get("progress", 0.0)),
                    turn=turn,
                )
            )
    finally:
        env.close()
    if not candidates:
        raise RuntimeError(f"{game}-{level}: the expert left no state to curate")
    picked = _pick_spread([c.progress for c in candidates], count)
    return [
        CuratedState(c.env_id, c.state, c.progress, c.turn, name=f"{c.env_id}-t{c.turn:04d}")
        for c in (candidates[i] for i in picked)
    ]


def save_curated_states(states: list[CuratedState], states_dir: str | Path) -> list[Path]:
    """Write ``<states_dir>/<env_id>/<name>.state`` plus an ``index.json`` of their progress."""
    written: list[Path] = []
    by_env: dict[str, list[CuratedState]] = {}
    for state in states:
        by_env.setdefault(state.env_id, []).append(state)
    for env_id, group in by_env.items():
        folder = Path(states_dir) / env_id
        folder.mkdir(parents=True, exist_ok=True)
        index = {}
        for state in group:
            path = folder / f"{state.name or f'{env_id}-t{state.turn:04d}'}.state"
            path.write_bytes(state.state)
            index[path.name] = {"progress": state.progress, "turn": state.turn}
            written.append(path)
        (folder / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    return written


def load_curated_states(states_dir: str | Path, env_id: str) -> list[CuratedState]:
    """The states saved under ``<states_dir>/<env_id>/``, sorted by file name. Progress comes
    from ``index.json`` when present; the runner re-reads it from the env on reset anyway."""
    folder = Path(states_dir) / env_id
    if not folder.is_dir():
        raise FileNotFoundError(f"no curated states for {env_id} under {states_dir}")
    index_path = folder / "index.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    return [
        CuratedState(
            env_id=env_id,
            state=path.read_bytes(),
            progress=float(index.get(path.name, {}).get("progress", float("nan"))),
            turn=int(index.get(path.name, {}).get("turn", 0)),
            name=path.stem,
        )
        for path in sorted(folder.glob("*.state"))
    ]
