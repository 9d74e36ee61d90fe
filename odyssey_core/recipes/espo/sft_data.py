"""The SFT cold start's data: every demonstrated step as one supervised example.

ESPO starts from one epoch of SFT on the demonstrations (paper, Section 4.3.1), so the model
learns the answer format before RL. Demonstrations hold actions, not reasoning, so each
example's think block is a template filled from the step (the stage, the screen, the element
acted on, the candidate): enough to make the format reachable, with nothing the agent could not
see (the user's hidden profile never appears).

Prompts are the environment's own: the examples are made by replaying each episode through
:class:`~odyssey_core.envs.persona.env.PersonaEnv` with its demonstrated actions, so SFT trains
on exactly the screens and turn texts RL later samples from. The result is a dataset folder in
the SFT contract (:mod:`odyssey_core.data.dataset`) whose rows' ``game`` is :data:`SFT_GAME`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from odyssey_core.common.images import encode_png
from odyssey_core.data.dataset import write_dataset
from odyssey_core.envs.persona.env import PersonaEnv
from odyssey_core.envs.persona.episode import EpisodeRecord, StepRecord
from odyssey_core.protocol.gui import format_gui_answer

__all__ = ["SFT_GAME", "SFTDemonstrations", "build_sft_dataset", "template_thought"]

SFT_GAME = "persona"


def template_thought(step: StepRecord, episode: EpisodeRecord) -> str:
    """The think text of a demonstrated step, from what the screen and the step show."""
    action = step.gold
    if step.stage == "pool":
        return (
            "The results on screen now fit what the user has shown they want, so the pool is "
            "found; I summarise the request as I understand it."
        )
    if step.stage == "recommend":
        return (
            "This candidate's card is open; I compare it with the intent gathered during the "
            "search and decide whether this user would take it."
        )
    target = "" if step.target_id is None else step.screen.element(step.target_id).text.strip()
    on = f" '{target}'" if target else ""
    screen = step.screen.name.replace("_", " ")
    if action.action == "click":
        return f"The {screen} screen is open; to go on with the request I tap{on}."
    if action.action == "type":
        return f"The {screen} screen has a field{on}; I type what the request needs there."
    if action.action == "exit":
        return f"The {screen} screen is in the way of the search, so I close it."
    return f"The {screen} screen does not show what I need yet, so I {action.action}."


@dataclass(frozen=True)
class SFTDemonstrations:
    """What :func:`build_sft_dataset` wrote."""

    dataset_dir: Path
    samples: int
    episodes: int
    detours_skipped: int


def build_sft_dataset(
    dataset: Path,
    episodes: list[EpisodeRecord],
    out_dir: str | Path,
    *,
    split: str = "train",
    skip_detours: bool = False,
    val_share: float = 0.0,
    history_window: int | None = None,
) -> SFTDemonstrations:
    """Replay ``episodes`` (of ``split`` in ``dataset``) with their demonstrated actions and
    write one SFT example per step to ``out_dir``; ``skip_detours`` leaves out the
    demonstrations' detour steps (their screens still advance the replay)."""
    if not episodes:
        raise ValueError(f"no {split} episodes to build SFT examples from")
    out = Path(out_dir)
    staging = out.parent / f".{out.name}-frames"
    staging.mkdir(parents=True, exist_ok=True)
    rows, seen, skipped = [], set(), 0
    env = PersonaEnv(dataset=dataset, split=split, mode="replay", history_window=history_window)
    try:
        for k, episode in enumerate(episodes):
            observation, _ = env.reset(options={"episode": episode.episode_id})
            for step in episode.steps:
                if step.detour and skip_detours:
                    skipped += 1
                else:
                    png = encode_png(observation.image)
                    # a sample key: the frame and its turn text (a screen recurs with another
                    # history), which also names the frame's file
                    key = hashlib.sha256(png + observation.text.encode()).hexdigest()
                    if key not in seen:
                        seen.add(key)
                        (staging / f"{key}.png").write_bytes(png)
                        rows.append(
                            {
                                "frame": f"{key}.png",
                                "frame_hash": key,
                                "game": SFT_GAME,
                                "level": episode.channel,
                                "turn_text": observation.text,
                                "response": format_gui_answer(
                                    step.gold, template_thought(step, episode)
                                ),
                                "buttons": [step.gold.action],
                                "source": f"persona:{episode.episode_id}",
                                "frame_index": step.index,
                                "timestamp_s": float(k * 1000 + step.index),
                                "teacher": "demonstration",
                            }
                        )
                observation, _, terminated, truncated, _ = env.step(step.gold)
                if terminated or truncated:
                    break
    finally:
        env.close()
    write_dataset(
        out,
        rows,
        staging,
        val_share=val_share,
        config={"dataset": str(dataset), "split": split, "skip_detours": skip_detours},
        extra_manifest={"teacher": "demonstration", "episodes": len(episodes)},
    )
    for png in staging.glob("*.png"):
        png.unlink()
    staging.rmdir()
    return SFTDemonstrations(out, len(rows), len(episodes), skipped)
