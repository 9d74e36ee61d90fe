"""Play one episode with a non-learning agent and keep its video."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact

from odyssey_core.agents import make_agent
from odyssey_core.config import load_config
from odyssey_core.envs import make_env
from odyssey_core.eval.episode import play_episode


@task(name="play-episode", timeout_seconds=3600)
def play_episode_task(
    env_name: str,
    agent: str,
    *,
    seed: int,
    preset: str,
    max_turns: int | None,
    video_dir: str,
) -> dict[str, Any]:
    """Returns the episode's numbers and the video's path, never the frames themselves."""
    config = load_config(preset)
    overrides: dict[str, Any] = {"config": config.env}
    if max_turns is not None:
        overrides["max_turns"] = max_turns
    env = make_env(env_name, **overrides)
    video = Path(video_dir) / f"{env_name}-{agent}-seed{seed}.mp4"
    try:
        result = play_episode(
            env,
            make_agent(agent, **({"seed": seed} if agent == "random" else {})),
            seed=seed,
            video_path=video,
        )
    finally:
        env.close()
    create_markdown_artifact(
        key=f"episode-{env_name}-{agent}".lower(),
        markdown=(
            "| env | agent | turns | progress | goal | return | video |\n"
            "|---|---|---|---|---|---|---|\n"
            f"| {env_name} | {agent} | {result.turns} | {result.progress:g}"
            f"{f' / {result.max_progress:g}' if result.max_progress else ''} | "
            f"{'yes' if result.goal_reached else 'no'} | {result.total_reward:g} | "
            f"`{video}` |"
        ),
        description=result.summary(),
    )
    return {
        "env": env_name,
        "agent": agent,
        "seed": seed,
        "turns": result.turns,
        "progress": result.progress,
        "max_progress": result.max_progress,
        "goal_reached": result.goal_reached,
        "return": result.total_reward,
        "video": str(video.resolve()),
    }
