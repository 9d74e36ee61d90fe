"""`play-episode`: an agent plays one level and the video is kept (walkthroughs, demos)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from tasks.play import play_episode_task


@flow(name="play-episode", log_prints=True)
def play_episode_flow(
    env_name: str = "odland-1-1",
    agent: str = "expert",
    seed: int = 0,
    preset: str = "tiny",
    max_turns: int | None = None,
    video_dir: str = "out/videos",
) -> dict[str, Any]:
    result = play_episode_task(
        env_name, agent, seed=seed, preset=preset, max_turns=max_turns, video_dir=video_dir
    )
    print(f"{env_name} with {agent}: progress {result['progress']:g}, video {result['video']}")
    return result


if __name__ == "__main__":
    play_episode_flow()
