"""Reading an SFT dataset folder and turning its rows into training batches.

The dataset contract (written by the curation stage): a folder with ``data.parquet`` (one row
per sample, columns in :data:`REQUIRED_COLUMNS`), the frames under ``frames/`` (paths in the
``frame`` column are relative to the folder) and a ``manifest.json``.

A sample is encoded exactly as the policy sees a turn at rollout time: the chat prompt that
:class:`~odyssey_core.policy.hf.HFPolicy` builds (the system prompt of the row's game, the
frame, the turn text, then the assistant header), followed by the teacher's response and the
end-of-turn token. Prompt and response are tokenised separately and concatenated, the same
way ``HFPolicy.score`` joins a prompt with a sampled response, so SFT trains the very token
sequences RL later scores. Labels are ``-100`` on the prompt (image placeholders included)
and on padding: the cross-entropy covers the response and its end token only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from odyssey_core.envs.base import Observation
from odyssey_core.policy.base import TurnPrompt
from odyssey_core.policy.hf import END_OF_TURN, HFPolicy

__all__ = [
    "IGNORE_INDEX",
    "REQUIRED_COLUMNS",
    "PromptBuilder",
    "SFTCollator",
    "SFTDataset",
    "SFTSample",
    "answer_key",
    "answer_weights",
]

IGNORE_INDEX = -100  # torch cross-entropy skips these targets

REQUIRED_COLUMNS: tuple[str, ...] = (
    "sample_id",
    "frame",
    "frame_hash",
    "game",
    "level",
    "turn_text",
    "response",
    "buttons",
    "source",
    "frame_index",
    "timestamp_s",
    "teacher",
    "split",
)


@dataclass(frozen=True)
class SFTSample:
    """One row of ``data.parquet``; ``frame_path`` is absolute."""

    sample_id: str
    frame_path: Path
    game: str
    level: str
    turn_text: str
    response: str
    buttons: tuple[str, ...]
    split: str

    def image(self) -> np.ndarray:
        """The frame as uint8 ``[H, W, 3]``, like an environment observation."""
        with Image.open(self.frame_path) as im:
            return np.asarray(im.convert("RGB"))


def answer_key(buttons: Sequence[str]) -> tuple[str, ...]:
    """A row's answer class: its set of buttons (order-free, as agreement is measured)."""
    return tuple(sorted(set(buttons)))


def answer_weights(samples: Sequence[SFTSample], power: float = 1.0) -> np.ndarray:
    """Per-row weights that up-weight rare answers: ``(n / (K n_c)) ** power`` for a row of
    answer c (n rows, K distinct answers, n_c rows of c), normalised to mean 1 over the rows.
    ``power`` 1 gives every answer the same total weight; 0 gives every row weight 1."""
    if not samples:
        return np.zeros(0)
    keys = [answer_key(s.buttons) for s in samples]
    counts = Counter(keys)
    n, k = len(keys), len(counts)
    weights = np.array([(n / (k * counts[key])) ** power for key in keys], dtype=np.float64)
    return weights / weights.mean()


class SFTDataset:
    """The rows of one split (or all rows) of a dataset folder, in file order."""

    def __init__(self, root: str | Path, split: str | None = "train") -> None:
        import pyarrow.parquet as pq

        self.root = Path(root)
        table_path = self.root / "data.parquet"
        if not table_path.is_file():
            raise FileNotFoundError(f"{str(self.root)!r} has no data.parquet (not an SFT dataset)")
        table = pq.read_table(table_path)
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(f"{table_path}: missing columns {', '.join(missing)}")
        rows = table.select(list(REQUIRED_COLUMNS)).to_pylist()
        self.samples = [
            SFTSample(
                sample_id=str(r["sample_id"]),
                frame_path=self.root / r["frame"],
                game=str(r["game"]),
                level=str(r["level"]),
                turn_text=str(r["turn_text"]),
                response=str(r["response"]),
                buttons=tuple(r["buttons"] or ()),
                split=str(r["split"]),
            )
            for r in rows
            if split is None or r["split"] == split
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> SFTSample:
        return self.samples[index]


class PromptBuilder(TurnPrompt):
    """The policy's own prompt code, bound to a processor and one game's system prompt.

    ``HFPolicy`` builds prompts from ``self.processor``, ``self.system_prompt`` and the frame
    settings only; borrowing its methods here (instead of rewriting them) keeps SFT prompts
    byte-identical to rollout prompts without loading a model. ``system_prompt`` replaces the
    game's registered one (a recipe whose policy runs with its own prompt, e.g. GTR's).
    """

    messages = HFPolicy.messages
    prompt_text = HFPolicy.prompt_text
    prepare_images = HFPolicy.prepare_images

    def __init__(
        self,
        processor: Any,
        game: str,
        image_scale: int | None = None,
        image_size: tuple[int, int] | None = None,
        system_prompt: str | None = None,
    ) -> None:
        self.processor = processor
        self.set_turn_prompt(game, system_prompt, image_scale, image_size)


class SFTCollator:
    """Samples -> a left-padded batch with ``labels`` (the model inputs of ``HFPolicy``).

    Left padding puts every response at the end of its row, so the trainer only needs the
    logits of the last ``max_response_len + 1`` positions (``logits_to_keep``).
    ``system_prompts`` maps a row's ``game`` to the system prompt its policy runs with, in
    place of the registered one (games without an entry keep theirs).
    """

    def __init__(
        self,
        processor: Any,
        image_scale: int | None = None,
        image_size: tuple[int, int] | None = None,
        system_prompts: Mapping[str, str] | None = None,
    ) -> None:
        self.processor = processor
        self.image_scale = image_scale
        self.image_size = image_size
        self.system_prompts = dict(system_prompts or {})
        tokenizer = processor.tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.end_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        self._builders: dict[str, PromptBuilder] = {}

    def builder(self, game: str) -> PromptBuilder:
        if game not in self._builders:
            self._builders[game] = PromptBuilder(
                self.processor,
                game,
                self.image_scale,
                self.image_size,
                system_prompt=self.system_prompts.get(game),
            )
        return self._builders[game]

    def encode_prompt(self, sample: SFTSample) -> dict[str, torch.Tensor]:
        """Processor outputs for the prompt alone (image placeholders expanded)."""
        builder = self.builder(sample.game)
        observation = Observation(image=sample.image(), text=sample.turn_text)
        text = builder.prompt_text(observation)
        frames = builder.prepare_images([observation.image])
        return self.processor(text=[text], images=frames, return_tensors="pt")

    def response_ids(self, sample: SFTSample) -> list[int]:
        """The teacher answer's tokens, ending with the end-of-turn token."""
        ids = self.processor.tokenizer(sample.response, add_special_tokens=False)["input_ids"]
        return [*ids, self.end_id]

    def __call__(self, samples: Sequence[SFTSample]) -> dict[str, torch.Tensor]:
        prompts = [self.encode_prompt(s) for s in samples]
        responses = [self.response_ids(s) for s in samples]
        lengths = [
            p["input_ids"].shape[1] + len(r) for p, r in zip(prompts, responses, strict=True)
        ]
        length = max(lengths)
        batch_size = len(samples)
        input_ids = torch.full((batch_size, length), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((batch_size, length), dtype=torch.long)
        type_ids = torch.zeros((batch_size, length), dtype=torch.long)
        labels = torch.full((batch_size, length), IGNORE_INDEX, dtype=torch.long)
        for b, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            start = length - lengths[b]
            n_prompt = prompt["input_ids"].shape[1]
            seq = torch.cat([prompt["input_ids"][0], torch.tensor(response, dtype=torch.long)])
            input_ids[b, start:] = seq
            attention_mask[b, start:] = 1
            # Only prompt tokens can be image slots; the response part stays text (type 0).
            type_ids[b, start : start + n_prompt] = prompt["mm_token_type_ids"][0]
            labels[b, start + n_prompt :] = torch.tensor(response, dtype=torch.long)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "mm_token_type_ids": type_ids,
            "pixel_values": torch.cat([p["pixel_values"] for p in prompts]),
            "image_grid_thw": torch.cat([p["image_grid_thw"] for p in prompts]),
            "labels": labels,
            "max_response_len": torch.tensor(max(len(r) for r in responses)),
        }
