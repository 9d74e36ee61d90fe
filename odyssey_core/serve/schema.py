"""The request bodies the server accepts (OpenAI's chat-completions format, plus the weight
routes), as pydantic models: FastAPI validates them and publishes them in ``/openapi.json``.

Bounds that do not depend on the server's settings live here (``seed`` an int64,
``stop_token_ids`` non-negative int64s, ``repetition_penalty`` in [0.01, 100], floats
finite, ``n`` at most 16); the ones an operator sets (messages, images, pixels, prompt tokens,
``max_tokens``) are :class:`~odyssey_core.serve.limits.ServeLimits`, checked by the route.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MAX_CHOICES",
    "MIN_TEMPERATURE",
    "ChatCompletionRequest",
    "ChatMessage",
    "ContentPart",
    "ImageURL",
    "WeightReloadRequest",
]

_INT64 = 2**63
#: below this, sampling is numerically degenerate (logits / T overflows); the server reads it
#: as greedy, which is what it means
MIN_TEMPERATURE = 1e-5
#: the most choices (``n``) one request may ask for
MAX_CHOICES = 16

TokenId = Annotated[int, Field(ge=0, lt=_INT64)]


class Lenient(BaseModel):
    """Clients send many optional OpenAI fields (user, metadata, ...): unknown ones are
    ignored."""

    model_config = ConfigDict(extra="ignore")


class ImageURL(Lenient):
    url: str = Field(description="a data URL: data:image/png;base64,... (PNG, JPEG, WebP, GIF)")
    detail: str | None = None


class ContentPart(Lenient):
    type: str = Field(description="text or image_url")
    text: str | None = None
    image_url: ImageURL | str | None = None


class ChatMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(Lenient):
    model: str = Field(description="the served model's name (GET /v1/models)")
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-_INT64, lt=_INT64)  # OpenAI's int64
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    logprobs: bool = False
    top_logprobs: int | None = None
    stream: bool = False
    frequency_penalty: float = Field(default=0.0, allow_inf_nan=False)
    presence_penalty: float = Field(default=0.0, allow_inf_nan=False)
    # vLLM-style extensions
    repetition_penalty: float = Field(default=1.0, ge=0.01, le=100.0, allow_inf_nan=False)
    stop_token_ids: list[TokenId] | None = None
    return_token_ids: bool = False


class WeightReloadRequest(Lenient):
    path: str = Field(
        min_length=1,
        description="a folder of safetensors files inside the server's weights root "
        "(relative to it, or absolute)",
    )
    checksum: bool = Field(default=True, description="answer with the new weights' checksum")
