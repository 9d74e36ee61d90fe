"""From OpenAI messages to the sequences the policy generates: prompts checked against the
server's limits before they wait for the model, and the batched generation itself.

:class:`PromptPreparer` runs on a preparation thread (never on the event loop): it decodes the
images (their size checked from the header first), renders the chat template and counts the
prompt's tokens, image tokens included, so a prompt longer than the model's context is a 400
before it can hold the generation thread. :class:`ChatHFPolicy` generates a batch of
:class:`ChatItem` and stops a row early when its request is abandoned (client gone, deadline
passed, server stopping).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from odyssey_core.policy.base import Generation, GenerationParams
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.serve.errors import APIError
from odyssey_core.serve.images import decode_data_url
from odyssey_core.serve.limits import ServeLimits
from odyssey_core.serve.schema import ChatCompletionRequest, ChatMessage

__all__ = [
    "ChatHFPolicy",
    "ChatItem",
    "PreparedPrompt",
    "PromptPreparer",
    "image_url_of",
    "messages_to_chat",
]


@dataclass
class ChatItem:
    """One sequence to generate: chat-template messages, their images in order, and the
    per-row settings that may differ inside a batch. ``abandoned`` (checked at every token)
    says when nobody waits for the answer any more; the row then stops."""

    messages: list[dict[str, Any]]
    images: list[Image.Image] = field(default_factory=list)
    seed: int | None = None
    max_new_tokens: int = 256
    abandoned: Callable[[], bool] | None = None


def image_url_of(part: Any) -> str | None:
    """The URL of an ``image_url`` content part (an object or a bare string), else None."""
    if part.type != "image_url" or part.image_url is None:
        return None
    return part.image_url if isinstance(part.image_url, str) else part.image_url.url


def messages_to_chat(
    messages: Sequence[ChatMessage], max_image_pixels: int = ServeLimits.max_image_pixels
) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """OpenAI messages -> the processor's chat-template input plus the decoded images.

    Image parts become ``{"type": "image"}`` placeholders, in the order their pixels are
    returned, which is the order the processor expands them. Decodes: call it off the event
    loop.
    """
    chat: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    for i, message in enumerate(messages):
        role = "system" if message.role == "developer" else message.role
        if message.content is None or isinstance(message.content, str):
            chat.append({"role": role, "content": message.content or ""})
            continue
        parts: list[dict[str, Any]] = []
        for j, part in enumerate(message.content):
            param = f"messages[{i}].content[{j}]"
            url = image_url_of(part)
            if part.type == "text":
                parts.append({"type": "text", "text": part.text or ""})
            elif url is not None:
                images.append(decode_data_url(url, param, max_image_pixels))
                parts.append({"type": "image"})
            elif part.type == "image_url":
                raise APIError(
                    400,
                    'an image_url part needs image_url: {"url": "data:image/png;base64,..."}',
                    param=param,
                    code="invalid_image",
                )
            else:
                raise APIError(
                    400,
                    f"unsupported content part type {part.type!r}: use text or image_url",
                    param=param,
                    code="unsupported_content",
                )
        chat.append({"role": role, "content": parts})
    return chat, images


@dataclass
class PreparedPrompt:
    chat: list[dict[str, Any]]
    images: list[Image.Image]
    prompt_tokens: int


class PromptPreparer:
    """Checks and prepares requests for ``policy`` under ``limits``.

    :meth:`check_shape` is cheap (counts only) and runs on the event loop; :meth:`prepare`
    decodes and tokenizes, on a preparation thread. Each preparation thread tokenizes with
    its own copy of the tokenizer, since the generation thread's batched calls change the
    shared one's padding state.
    """

    def __init__(self, policy: HFPolicy, limits: ServeLimits) -> None:
        self.processor = policy.processor
        self.limits = limits
        self.context = int(policy.model.config.get_text_config().max_position_embeddings)
        self.max_prompt_tokens = min(limits.max_prompt_tokens or self.context, self.context)
        tokenizer = policy.tokenizer
        # No token covers more bytes than the longest vocabulary entry, so a text of B bytes
        # has at least B / longest tokens: a bound known without tokenizing.
        self.longest_token_bytes = max(
            (len(token.encode("utf-8")) for token in tokenizer.get_vocab()), default=1
        )
        self._tokenizer = tokenizer
        self._local = threading.local()

    def check_shape(self, request: ChatCompletionRequest, max_new_tokens: int) -> None:
        """Messages, images and a lower bound of the prompt's tokens, from counts alone."""
        limits = self.limits
        if len(request.messages) > limits.max_messages:
            raise APIError(
                400,
                f"{len(request.messages)} messages: more than this server's "
                f"{limits.max_messages} per request (odyssey serve --max-messages)",
                param="messages",
                code="too_many_messages",
            )
        images = 0
        text_bytes = 0
        for message in request.messages:
            if isinstance(message.content, str):
                text_bytes += len(message.content.encode("utf-8"))
                continue
            for part in message.content or ():
                images += image_url_of(part) is not None
                text_bytes += len((part.text or "").encode("utf-8"))
        if images > limits.max_images:
            raise APIError(
                400,
                f"{images} images: more than this server's {limits.max_images} per request "
                "(odyssey serve --max-images)",
                param="messages",
                code="too_many_images",
            )
        at_least = -(-text_bytes // self.longest_token_bytes)
        if at_least > self.max_prompt_tokens:
            raise self._too_long(f"at least {at_least}")
        if at_least + max_new_tokens > self.context:
            raise self._beyond_context(f"at least {at_least}", max_new_tokens)

    def prepare(self, request: ChatCompletionRequest, max_new_tokens: int) -> PreparedPrompt:
        """Decode the images, render the prompt, count its tokens; a 400 when over a limit."""
        chat, images = messages_to_chat(request.messages, self.limits.max_image_pixels)
        text = self.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        text_tokens = len(self._thread_tokenizer()(text)["input_ids"])
        # The processor expands each image's one placeholder token into its merged patches.
        image_processor = self.processor.image_processor
        merge = int(image_processor.merge_size) ** 2
        image_tokens = 0
        for index, image in enumerate(images):
            try:
                patches = image_processor.get_number_of_image_patches(image.height, image.width)
            except ValueError:
                raise APIError(
                    400,
                    f"image {index} ({image.width}x{image.height} pixels) cannot be processed "
                    "by the model's image processor; resize it",
                    param="messages",
                    code="invalid_image",
                ) from None
            image_tokens += int(patches) // merge - 1
        prompt_tokens = text_tokens + image_tokens
        if prompt_tokens > self.max_prompt_tokens:
            raise self._too_long(str(prompt_tokens))
        if prompt_tokens + max_new_tokens > self.context:
            raise self._beyond_context(str(prompt_tokens), max_new_tokens)
        return PreparedPrompt(chat, images, prompt_tokens)

    def _thread_tokenizer(self) -> Any:
        tokenizer = getattr(self._local, "tokenizer", None)
        if tokenizer is None:
            tokenizer = self._local.tokenizer = copy.deepcopy(self._tokenizer)
        return tokenizer

    def _too_long(self, tokens: str) -> APIError:
        return APIError(
            400,
            f"the prompt has {tokens} tokens: more than this server's {self.max_prompt_tokens} "
            "(odyssey serve --max-prompt-tokens; at most the model's context); shorten it",
            param="messages",
            code="context_length_exceeded",
        )

    def _beyond_context(self, tokens: str, max_new_tokens: int) -> APIError:
        return APIError(
            400,
            f"the prompt has {tokens} tokens and max_tokens is {max_new_tokens}: more than "
            f"the model's context of {self.context} tokens; shorten the prompt or lower "
            "max_tokens",
            param="messages",
            code="context_length_exceeded",
        )


class ChatHFPolicy(HFPolicy):
    """An :class:`HFPolicy` that generates from pre-built chats instead of observations.

    It reuses HFPolicy's sampling loop, overriding three of its hooks: ``encode`` (prompts
    from the given messages and images), ``_forward`` (text-only batches have no pixels) and
    ``_pick`` (one generator per row from that row's own seed, so batched requests with
    different seeds sample exactly as they would alone; and an abandoned row is ended with
    an end-of-turn token, so a batch whose rows are all abandoned stops at the next token).
    Build it with :meth:`wrap`, which shares the loaded model and processor of an existing
    policy.
    """

    _row_generators: list[torch.Generator | None] | None = None
    _row_abandoned: list[Callable[[], bool] | None] | None = None

    @classmethod
    def wrap(cls, policy: HFPolicy) -> ChatHFPolicy:
        if isinstance(policy, cls):
            return policy
        wrapped = cls.__new__(cls)
        wrapped.__dict__.update(policy.__dict__)  # same model, processor and token ids
        return wrapped

    def encode(self, items: Sequence[Any]) -> tuple[dict[str, torch.Tensor], list[str]]:
        texts = [
            self.processor.apply_chat_template(
                item.messages, tokenize=False, add_generation_prompt=True
            )
            for item in items
        ]
        images = [image for item in items for image in item.images]
        batch = self.processor(
            text=texts,
            images=images or None,
            padding=True,
            padding_side="left",
            return_tensors="pt",
        )
        return {k: v.to(self.device) for k, v in batch.items()}, texts

    def _forward(
        self, inputs: dict[str, torch.Tensor], positions: torch.Tensor | None = None, **kwargs: Any
    ) -> Any:
        if "pixel_values" in inputs:
            return super()._forward(inputs, positions, **kwargs)
        return self.model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            position_ids=self._positions(inputs) if positions is None else positions,
            mm_token_type_ids=inputs["mm_token_type_ids"],
            **kwargs,
        )

    def _pick(
        self,
        logits: torch.Tensor,
        seen: torch.Tensor,
        params: GenerationParams,
        generators: list[torch.Generator | None],
        banned_ids: Sequence[int] = (),
    ) -> torch.Tensor:
        rows = self._row_generators if self._row_generators is not None else generators
        tokens = HFPolicy._pick(logits, seen, params, rows, banned_ids)
        for row, abandoned in enumerate(self._row_abandoned or ()):
            if abandoned is not None and abandoned():
                tokens[row] = min(self.eos_ids)
        return tokens

    @torch.no_grad()
    def generate_chats(
        self, items: Sequence[ChatItem], params: GenerationParams
    ) -> list[Generation]:
        """Generate for ``items`` in one batch; ``params.seed``/``max_new_tokens`` are
        replaced by each item's own, and the text is cut at the first stop string."""
        if not items:
            return []
        longest = max(item.max_new_tokens for item in items)
        params = params.model_copy(update={"seed": None, "max_new_tokens": longest})
        self._row_generators = [
            None if item.seed is None else torch.Generator(self.device).manual_seed(item.seed)
            for item in items
        ]
        self._row_abandoned = [item.abandoned for item in items]
        try:
            generations = self.generate(items, params)  # type: ignore[arg-type]
        finally:
            self._row_generators = None
            self._row_abandoned = None
        return [
            self._finish(gen, item.max_new_tokens, params.stop)
            for gen, item in zip(generations, items, strict=True)
        ]

    def _finish(self, gen: Generation, limit: int, stops: tuple[str, ...]) -> Generation:
        if len(gen.response_ids) > limit:  # ran longer only because of a batch neighbour
            gen.response_ids = gen.response_ids[:limit]
            gen.logprobs = gen.logprobs[:limit]
            gen.finish_reason = "length"
            gen.text = self.tokenizer.decode(gen.response_ids, skip_special_tokens=True)
        if stops:
            cuts = [gen.text.find(s) for s in stops if s in gen.text]
            if cuts:
                gen.text = gen.text[: min(cuts)]
                gen.finish_reason = "stop"
        return gen
