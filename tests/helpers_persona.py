"""What the ESPO recipe tests share: a generated tiny dataset and a policy that answers with
the demonstration (an oracle that looks each screen and turn text up)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from odyssey_core.envs.base import Observation
from odyssey_core.envs.persona.dataset import generate_episodes, read_dataset, write_dataset
from odyssey_core.envs.persona.env import PersonaEnv
from odyssey_core.policy.base import Generation, GenerationParams
from odyssey_core.protocol.gui import format_gui_answer


def tiny_dataset(folder: Path) -> Path:
    """The tiny preset, written once per folder."""
    if not (folder / "manifest.json").is_file():
        write_dataset(folder, generate_episodes("tiny", 0), preset="tiny", seed=0)
    return folder


def _key(observation: Observation) -> str:
    return hashlib.sha256(observation.image.tobytes() + observation.text.encode()).hexdigest()


class DemonstrationPolicy:
    """Answers every screen of a demonstration with its demonstrated action (and ``wrong`` for
    anything it has not seen): an oracle to check evaluation end to end."""

    def __init__(
        self,
        dataset: Path,
        splits: Sequence[str] = ("train", "val", "test"),
        history_window: int | None = None,
        wrong: str = "<think>no idea</think><answer>{}</answer>",
    ) -> None:
        self.answers: dict[str, str] = {}
        self.wrong = wrong
        for split in splits:
            episodes = read_dataset(dataset, split=split)
            if not episodes:
                continue
            env = PersonaEnv(
                dataset=dataset, split=split, mode="replay", history_window=history_window
            )
            for episode in episodes:
                observation, _ = env.reset(options={"episode": episode.episode_id})
                for step in episode.steps:
                    self.answers[_key(observation)] = format_gui_answer(step.gold, "as shown")
                    observation, *_ = env.step(step.gold)
            env.close()

    def generate(
        self, observations: Sequence[Observation], params: GenerationParams
    ) -> list[Generation]:
        return [
            Generation(self.answers.get(_key(o), self.wrong), [], [], [], "stop")
            for o in observations
        ]
