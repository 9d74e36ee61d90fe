"""What one request may ask of the server, and how much work may wait: each bound is answered
with a 4xx (or a 503 with ``Retry-After`` when the queue is full) that names the bound and
the ``odyssey serve`` option that sets it.

Memory: a waiting request holds its body until it is parsed, then its decoded images (3 bytes
a pixel), so the worst case is about ``(max_queue + max_batch_size) * max_images *
max_image_pixels * 3`` bytes of images.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_ASPECT_RATIO", "ServeLimits"]

#: Qwen-VL's image processor refuses images more elongated than this
MAX_ASPECT_RATIO = 200


@dataclass(frozen=True)
class ServeLimits:
    """The bounds of one server (``create_app(..., limits=ServeLimits(...))``)."""

    max_body_bytes: int = 16 * 2**20
    max_messages: int = 64
    max_images: int = 8
    max_image_pixels: int = 2048 * 2048
    #: None: the model's context (``max_position_embeddings``)
    max_prompt_tokens: int | None = None
    default_max_tokens: int = 256
    max_tokens_limit: int = 4096
    #: requests waiting (body, decoding, queue) beyond those in the running batch
    max_queue: int = 64
    #: seconds from arrival to answer; later, the request is answered 504 and its work dropped
    request_timeout: float = 600.0

    def __post_init__(self) -> None:
        positive = {
            "max_body_bytes": self.max_body_bytes,
            "max_messages": self.max_messages,
            "max_image_pixels": self.max_image_pixels,
            "default_max_tokens": self.default_max_tokens,
            "max_tokens_limit": self.max_tokens_limit,
            "max_queue": self.max_queue,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.max_images < 0:
            raise ValueError(f"max_images must be at least 0, got {self.max_images}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be at least 1, got {self.max_prompt_tokens}")
        if self.default_max_tokens > self.max_tokens_limit:
            raise ValueError(
                f"default_max_tokens ({self.default_max_tokens}) is more than max_tokens_limit "
                f"({self.max_tokens_limit})"
            )
        if not self.request_timeout > 0:
            raise ValueError(f"request_timeout must be positive, got {self.request_timeout}")
