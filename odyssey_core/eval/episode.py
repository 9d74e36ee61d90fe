"""Play one episode with an agent, optionally writing an annotated video."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from odyssey_core.agents.base import Agent
from odyssey_core.envs.base import TurnEnv
from odyssey_core.eval.video import EpisodeVideoWriter


@dataclass
class EpisodeResult:
    env_id: str
    agent: str
    seed: int | None
    turns: int = 0
    total_reward: float = 0.0
    progress: float = 0.0
    max_progress: float | None = None
    goal_reached: bool = False
    life_lost: bool = False
    truncated: bool = False
    invalid_actions: int = 0
    actions: list[tuple[str, ...]] = field(default_factory=list)
    video: str | None = None

    def summary(self) -> str:
        outcome = (
            "reached the goal"
            if self.goal_reached
            else "lost a life"
            if self.life_lost
            else "ran out of turns"
            if self.truncated
            else "stopped"
        )
        target = f"/{self.max_progress:g}" if self.max_progress else ""
        return (
            f"{self.env_id} with {self.agent}: {outcome} after {self.turns} turns, "
            f"progress {self.progress:g}{target}, return {self.total_reward:g}"
        )


def _panel_lines(result: EpisodeResult, info: dict[str, Any], reward: float) -> list[str]:
    buttons = ", ".join(info.get("buttons", ())) or "-"
    lines = [
        result.env_id,
        f"turn {result.turns}",
        f"buttons: {buttons}",
        f"progress: {info.get('progress', 0)}",
        f"reward: {reward:g}",
        f"return: {result.total_reward:g}",
    ]
    if "lives" in info:
        lines.append(f"lives: {info['lives']}")
    if info.get("invalid_action"):
        lines.append("invalid answer (fallback)")
    return lines


def play_episode(
    env: TurnEnv,
    agent: Agent,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    video_path: str | Path | None = None,
    show_progress: bool = False,
    video_fps: float = 8.0,
) -> EpisodeResult:
    """Run ``agent`` in ``env`` until the episode ends; the env's ``max_turns`` bounds it."""
    observation, info = env.reset(seed=seed, options=options)
    agent.reset(env, seed=seed)
    result = EpisodeResult(env_id=env.env_id, agent=agent.name, seed=seed)
    result.progress = float(info.get("progress", 0))
    result.max_progress = info.get("max_progress")
    video = EpisodeVideoWriter(video_path, fps=video_fps) if video_path else None
    bar = tqdm(desc=f"{env.env_id} ({agent.name})", unit="turn", disable=not show_progress)
    try:
        if video:
            video.add(observation.image, _panel_lines(result, info, 0.0))
        while True:
            action = agent.act(env, observation, info)
            observation, reward, terminated, truncated, info = env.step(action)
            result.turns += 1
            result.total_reward += reward
            result.progress = float(info.get("progress", result.progress))
            result.actions.append(tuple(info.get("buttons", ())))
            result.invalid_actions += int(bool(info.get("invalid_action")))
            bar.update(1)
            bar.set_postfix(progress=info.get("progress"), refresh=False)
            if video:
                video.add(observation.image, _panel_lines(result, info, reward))
            if terminated or truncated:
                result.goal_reached = bool(info.get("goal_reached"))
                result.life_lost = bool(info.get("life_lost"))
                result.truncated = truncated
                break
    finally:
        bar.close()
        if video:
            video.close()
            result.video = str(video_path)
    return result
