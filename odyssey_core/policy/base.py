"""The policy-backend contract: observations in, sampled answers with log-probabilities out.

A backend turns a batch of :class:`~odyssey_core.envs.base.Observation` into one
:class:`Generation` each. RL trainers need, per sampled token, ``log pi(token)`` under the
exact distribution the token was drawn from, so every backend reports the same quantity:

    logprob = log_softmax(logits / T)[token]   (raw model logits; T = 1 when greedy)

i.e. *before* top-p truncation and repetition penalty. Those two only shape which tokens get
drawn; leaving them out keeps the log-prob a smooth function of the weights that a trainer
can recompute with one forward pass (``HFPolicy.score``) and compare to rollout values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from odyssey_core.common.registry import Registry
from odyssey_core.config import StrictModel
from odyssey_core.envs.base import Observation
from odyssey_core.protocol import get_system_prompt

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

__all__ = [
    "BACKENDS",
    "Generation",
    "GenerationParams",
    "PolicyBackend",
    "TurnPrompt",
    "make_policy",
]

FinishReason = Literal["stop", "length"]


class GenerationParams(StrictModel):
    """Sampling settings for one ``generate`` call."""

    temperature: float = Field(default=1.0, ge=0.0, description="0 means greedy decoding")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    max_new_tokens: int = Field(default=256, ge=1)
    repetition_penalty: float = Field(default=1.0, gt=0.0, description="1.0 disables it")
    stop: tuple[str, ...] = Field(default=(), description="extra stop strings (kept in the text)")
    stop_token_ids: tuple[int, ...] = Field(
        default=(), description="extra end-of-turn token ids besides the model's own"
    )
    seed: int | None = Field(
        default=None, description="item i of a batch samples with seed + i; None: nondeterministic"
    )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Generation:
    """One sampled answer, with what a trainer needs to score it again.

    Backends return text, ids, log-probs and the finish reason; they never parse the text.
    The recipe's ``protocol.RESPONSE_FORMATS`` entry does (``parse``, ``token_masks``).
    """

    text: str  # the decoded response, special tokens (e.g. <|im_end|>) removed
    prompt_ids: list[int]  # the prompt tokens, image placeholders expanded, no padding
    response_ids: list[int]  # sampled tokens, no padding, ending with the eos token if produced
    logprobs: list[float]  # log pi(token) at the sampling temperature, one per response token
    finish_reason: FinishReason  # "stop": eos or a stop string; "length": max_new_tokens hit
    prompt_text: str = ""  # the chat-templated prompt before image expansion (for logs)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.response_ids)


def turn_messages(
    system_prompt: str, text: str, image_part: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The chat for one turn, the same for every backend: the system prompt, then the frame
    and the task text. ``image_part`` is the backend's image entry (a placeholder for local
    processors, a data URL for HTTP APIs)."""
    return [
        {"role": "system", "content": system_prompt},
        {
            "role": "user",
            "content": [image_part or {"type": "image"}, {"type": "text", "text": text}],
        },
    ]


class TurnPrompt:
    """What a turn's prompt is built from besides the observation: the system prompt and the
    frame's resize. Every backend holds it, and so does SFT's prompt builder, so SFT, rollout
    and serving prompts are built from the same three settings."""

    system_prompt: str
    image_scale: int | None
    image_size: tuple[int, int] | None

    def set_turn_prompt(
        self,
        game: str,
        system_prompt: str | None,
        image_scale: int | None,
        image_size: tuple[int, int] | None,
    ) -> None:
        """``system_prompt``, or ``game``'s registered one when None, and the frame's resize
        (see :func:`~odyssey_core.models.processor.prepare_frame`)."""
        self.system_prompt = system_prompt if system_prompt is not None else get_system_prompt(game)
        self.image_scale = image_scale
        self.image_size = image_size

    def prepare_image(self, image: np.ndarray | Image.Image) -> Image.Image:
        """The frame as the prompt shows it, resized by ``image_scale`` / ``image_size``."""
        # Deferred: the processor module imports transformers, which listing backends avoids.
        from odyssey_core.models.processor import prepare_frame

        return prepare_frame(image, self.image_scale, self.image_size)


class PolicyBackend(ABC):
    """Something that answers observations: a local model, a server, an API."""

    @abstractmethod
    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        """One :class:`Generation` per observation, in order."""


# Lazy "module:Class" entries so listing backends never imports torch or transformers.
BACKENDS: Registry[type[PolicyBackend]] = Registry("policy backend")
BACKENDS.register("hf", "odyssey_core.policy.hf:HFPolicy")
BACKENDS.register("openai", "odyssey_core.policy.openai_backend:OpenAIPolicy")
BACKENDS.register("vllm", "odyssey_core.policy.vllm_backend:VLLMPolicy")


def make_policy(name: str, **kwargs: Any) -> PolicyBackend:
    """Build the registered backend ``name`` (e.g. ``make_policy("hf", model=path)``)."""
    return BACKENDS.get(name)(**kwargs)
