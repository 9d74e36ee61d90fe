"""An OpenAI-compatible chat-completions server for a local Qwen-VL policy.

``create_app(policy, model_name)`` returns a FastAPI app with ``GET /v1/models``,
``POST /v1/chat/completions`` (OpenAI message format, images as inline data URLs) and
``GET /metrics`` (batching counters); ``GET /health`` needs no key.

Batching: requests wait in a queue; a background task takes the first one, then gathers
more for up to ``batch_wait_ms`` or until ``max_batch_size`` sequences are collected, and
runs the policy's batched generation on a single worker thread (so the event loop keeps
accepting requests meanwhile). Requests in one collection are grouped by the parameters
that change the distribution for every row (temperature, top_p, repetition_penalty, stop
strings, stop token ids); each group runs as one batch. Two things may differ inside a
group: ``max_tokens`` (the batch runs to the largest and shorter items are cut afterwards,
which is exact because each row samples from its own generator) and ``seed`` (each row gets
its own generator seeded with the request's seed, plus the choice index when ``n > 1``), so
an answer does not depend on which other requests it was batched with.

Images are used as sent: the server does not rescale them (``OpenAIPolicy`` applies
``image_scale``/``image_size`` on the client side). Remote ``http(s)`` image URLs are
refused, since the server never reaches the network.

Bounds: ``seed`` is an int64, ``stop_token_ids`` non-negative int64s, ``repetition_penalty``
in [0.01, 100], floats finite; a temperature below 1e-5 is read as 0 (greedy), where
sampling would be numerically degenerate (a tiny top_p keeps the top token, as in HFPolicy);
``max_tokens`` may not exceed the server's ``max_tokens_limit``. Anything outside is a 400.

Log-probs (``logprobs: true``) are ``log_softmax(logits / T)[token]`` of each sampled token,
the convention of :mod:`odyssey_core.policy.base`; ``top_logprobs`` is not supported.
Stop strings follow OpenAI semantics: the text ends before the matched stop string (the
token ids and log-probs still cover every sampled token). vLLM-style extensions accepted in
the body: ``repetition_penalty``, ``stop_token_ids`` and ``return_token_ids`` (adds
``prompt_token_ids`` to the response and ``token_ids`` to each choice).

Weight sync for RL (``rollout.backend: openai`` with ``server: odyssey``, see
:mod:`odyssey_core.policy.weight_sync`): ``POST /v1/weights/reload`` with
``{"path": <a safetensors folder>, "checksum": true}`` copies those weights into the served
model (every name and shape checked first; it runs on the generation thread, between
batches, so no answer mixes old and new weights) and answers with the new weights'
checksum; ``GET /v1/weights/checksum`` reports the checksum of the weights served now. Both
are ``/v1`` routes, so they need the key when one is set; ``weights_root`` limits the
folders a reload may read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import httpx
import torch
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from odyssey_core.policy.base import Generation, GenerationParams
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.policy.weight_sync import export_weights, load_weights_into, weights_checksum
from odyssey_core.serve import InsecureBindError, check_bind_security, is_loopback

__all__ = [
    "ChatHFPolicy",
    "ChatItem",
    "InsecureBindError",
    "ServerProcess",
    "ServerThread",
    "check_bind_security",
    "create_app",
    "free_port",
    "is_loopback",
    "messages_to_chat",
]


# ---------------------------------------------------------------------------------- errors
class APIError(Exception):
    """An error answered in OpenAI's format: ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )

    def response(self) -> JSONResponse:
        body = {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(body, status_code=self.status, headers=headers)


# ---------------------------------------------------------------------------------- requests
class _Lenient(BaseModel):
    # Clients send many optional OpenAI fields (user, metadata, ...): ignore what we don't use.
    model_config = ConfigDict(extra="ignore")


class ImageURL(_Lenient):
    url: str
    detail: str | None = None


class ContentPart(_Lenient):
    type: str
    text: str | None = None
    image_url: ImageURL | str | None = None


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


_INT64 = 2**63
#: below this, sampling is numerically degenerate (logits / T overflows); the server reads it
#: as greedy, which is what it means
_MIN_TEMPERATURE = 1e-5

TokenId = Annotated[int, Field(ge=0, lt=_INT64)]


class ChatCompletionRequest(_Lenient):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-_INT64, lt=_INT64)  # OpenAI's int64
    n: int = Field(default=1, ge=1, le=16)
    logprobs: bool = False
    top_logprobs: int | None = None
    stream: bool = False
    frequency_penalty: float = Field(default=0.0, allow_inf_nan=False)
    presence_penalty: float = Field(default=0.0, allow_inf_nan=False)
    # vLLM-style extensions
    repetition_penalty: float = Field(default=1.0, ge=0.01, le=100.0, allow_inf_nan=False)
    stop_token_ids: list[TokenId] | None = None
    return_token_ids: bool = False


class WeightReloadRequest(_Lenient):
    path: str = Field(min_length=1, description="a folder of safetensors files on this machine")
    checksum: bool = Field(default=True, description="answer with the new weights' checksum")


# ---------------------------------------------------------------------------------- prompts
@dataclass
class ChatItem:
    """One sequence to generate: chat-template messages, their images in order, and the
    per-row settings that may differ inside a batch."""

    messages: list[dict[str, Any]]
    images: list[Image.Image] = field(default_factory=list)
    seed: int | None = None
    max_new_tokens: int = 256


def decode_data_url(url: str, param: str = "messages") -> Image.Image:
    """An RGB image from a ``data:image/...;base64,...`` URL; :class:`APIError` otherwise."""
    if url.startswith(("http://", "https://")):
        raise APIError(
            400,
            "remote image URLs are not supported: this server is offline and never fetches "
            "them. Send the image inline as a data URL (data:image/png;base64,...).",
            param=param,
            code="remote_image_url",
        )
    header, sep, payload = url.partition(",")
    if not url.startswith("data:") or not sep or ";base64" not in header:
        raise APIError(
            400, "image_url must be a base64 data URL (data:image/png;base64,...)", param=param
        )
    try:
        raw = base64.b64decode(payload, validate=True)
        image = Image.open(io.BytesIO(raw))
        image.load()
    except (binascii.Error, ValueError, OSError) as error:
        raise APIError(400, f"could not decode the image data URL: {error}", param=param) from None
    return image.convert("RGB")


def messages_to_chat(
    messages: Sequence[ChatMessage],
) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """OpenAI messages -> the processor's chat-template input plus the decoded images.

    Image parts become ``{"type": "image"}`` placeholders, in the order their pixels are
    returned, which is the order the processor expands them.
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
            if part.type == "text":
                parts.append({"type": "text", "text": part.text or ""})
            elif part.type == "image_url" and part.image_url is not None:
                url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
                images.append(decode_data_url(url, param))
                parts.append({"type": "image"})
            else:
                raise APIError(400, f"unsupported content part type {part.type!r}", param=param)
        chat.append({"role": role, "content": parts})
    return chat, images


class ChatHFPolicy(HFPolicy):
    """An :class:`HFPolicy` that generates from pre-built chats instead of observations.

    It reuses HFPolicy's sampling loop, overriding three of its hooks: ``encode`` (prompts
    from the given messages and images), ``_forward`` (text-only batches have no pixels) and
    ``_pick`` (one generator per row from that row's own seed, so batched requests with
    different seeds sample exactly as they would alone). Build it with :meth:`wrap`, which
    shares the loaded model and processor of an existing policy.
    """

    _row_generators: list[torch.Generator | None] | None = None

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
        return HFPolicy._pick(logits, seen, params, rows, banned_ids)

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
        try:
            generations = self.generate(items, params)  # type: ignore[arg-type]
        finally:
            self._row_generators = None
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


# ---------------------------------------------------------------------------------- batching
@dataclass
class _Job:
    items: list[ChatItem]
    params: GenerationParams
    future: asyncio.Future[list[Generation]]


BATCH_HISTORY = 10_000  # batch sizes kept for inspection (tests); /metrics counts them all
T = TypeVar("T")


class Batcher:
    """Collects concurrent requests and runs them as batches on one worker thread."""

    def __init__(self, policy: ChatHFPolicy, max_batch_size: int = 8, batch_wait_ms: float = 10):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.batch_wait = max(0.0, batch_wait_ms) / 1000.0
        # sequences per policy call, in order: the latest ones only, so a long-running server
        # does not grow; the counters behind /metrics cover every call
        self.batch_sizes: deque[int] = deque(maxlen=BATCH_HISTORY)
        self._histogram: Counter[int] = Counter()
        self.requests = 0
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odyssey-gen")

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, items: list[ChatItem], params: GenerationParams) -> list[Generation]:
        if self._queue is None:
            raise RuntimeError("the batcher is not running (app lifespan not started)")
        future: asyncio.Future[list[Generation]] = asyncio.get_running_loop().create_future()
        self.requests += 1
        await self._queue.put(_Job(items, params, future))
        return await future

    async def run_exclusive(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the generation thread, between two batches (weight reloads)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _collect(self) -> list[_Job]:
        assert self._queue is not None
        jobs = [await self._queue.get()]
        count = len(jobs[0].items)
        deadline = asyncio.get_running_loop().time() + self.batch_wait
        while count < self.max_batch_size:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                job = (
                    self._queue.get_nowait()
                    if remaining <= 0
                    else await asyncio.wait_for(self._queue.get(), remaining)
                )
            except (TimeoutError, asyncio.QueueEmpty):
                break
            jobs.append(job)
            count += len(job.items)
        return jobs

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect()
            groups: dict[GenerationParams, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.params, []).append(job)
            for params, group in groups.items():
                rows = [(job, item) for job in group for item in job.items]
                results: dict[int, list[Generation]] = {id(job): [] for job in group}
                try:
                    for start in range(0, len(rows), self.max_batch_size):
                        chunk = rows[start : start + self.max_batch_size]
                        self.batch_sizes.append(len(chunk))
                        self._histogram[len(chunk)] += 1
                        gens = await loop.run_in_executor(
                            self._executor,
                            self.policy.generate_chats,
                            [item for _, item in chunk],
                            params,
                        )
                        for (job, _), gen in zip(chunk, gens, strict=True):
                            results[id(job)].append(gen)
                except Exception as error:  # answer every waiting request, keep serving
                    for job in group:
                        if not job.future.done():
                            job.future.set_exception(error)
                    continue
                for job in group:
                    if not job.future.done():  # a client may have disconnected
                        job.future.set_result(results[id(job)])

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "batches": sum(self._histogram.values()),
            "sequences": sum(size * count for size, count in self._histogram.items()),
            "max_batch_size_seen": max(self._histogram, default=0),
            "batch_size_histogram": dict(sorted(self._histogram.items())),
        }


# ---------------------------------------------------------------------------------- the app
def _group_params(request: ChatCompletionRequest) -> GenerationParams:
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    return GenerationParams(
        temperature=0.0 if request.temperature < _MIN_TEMPERATURE else request.temperature,
        top_p=request.top_p,
        repetition_penalty=request.repetition_penalty,
        stop=tuple(stop),
        stop_token_ids=tuple(request.stop_token_ids or ()),
        max_new_tokens=1,  # per item (ChatItem.max_new_tokens); constant so groups merge
    )


def _check_supported(request: ChatCompletionRequest) -> None:
    if request.stream:
        raise APIError(400, "stream=true is not supported by this server", param="stream")
    if request.top_logprobs:
        raise APIError(400, "top_logprobs is not supported", param="top_logprobs")
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(request, name):
            raise APIError(
                400, f"{name} is not supported; use repetition_penalty instead", param=name
            )


def _token_logprobs(policy: HFPolicy, gen: Generation) -> list[dict[str, Any]]:
    content = []
    for token_id, logprob in zip(gen.response_ids, gen.logprobs, strict=False):
        token = policy.tokenizer.decode([token_id])
        content.append(
            {
                "token": token,
                "logprob": logprob,
                "bytes": list(token.encode("utf-8")),
                "top_logprobs": [],
            }
        )
    return content


def create_app(
    policy: HFPolicy,
    model_name: str,
    api_key: str | None = None,
    *,
    max_batch_size: int = 8,
    batch_wait_ms: float = 10.0,
    default_max_tokens: int = 256,
    max_tokens_limit: int = 4096,
    weights_root: str | Path | None = None,
) -> FastAPI:
    """The FastAPI app serving ``policy`` as ``model_name``.

    With ``api_key`` set, every ``/v1`` route and ``/metrics`` require
    ``Authorization: Bearer <api_key>``. ``app.state.batcher`` holds the
    :class:`Batcher` (its ``batch_sizes`` record the latest batched policy calls).
    ``max_tokens_limit`` caps ``max_tokens`` / ``max_completion_tokens`` (a larger request is
    refused with 400), so no request can hold the generation thread for ever.
    ``weights_root`` (None: anywhere) is the folder under which ``/v1/weights/reload`` may
    read weights.
    """
    if not 1 <= default_max_tokens <= max_tokens_limit:
        raise ValueError("need 1 <= default_max_tokens <= max_tokens_limit")
    chat_policy = ChatHFPolicy.wrap(policy)
    batcher = Batcher(chat_policy, max_batch_size=max_batch_size, batch_wait_ms=batch_wait_ms)
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="Odyssey policy server", lifespan=lifespan)
    app.state.batcher = batcher
    app.state.model_name = model_name
    app.state.weights_version = 0  # reloads so far
    root = None if weights_root is None else Path(weights_root).resolve()

    def key_error(request: Request) -> APIError | None:
        if not api_key:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        # Constant-time comparison, so response timing does not leak the key.
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), api_key.encode()
        ):
            return APIError(
                401,
                "missing or invalid API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )
        return None

    async def require_key(request: Request) -> None:
        error = key_error(request)
        if error is not None:
            raise error

    @app.middleware("http")
    async def _key_first(request: Request, call_next: Any) -> Any:
        # Checked before the body is parsed, so a client without the key learns nothing
        # from validation errors (a route dependency would run after body validation).
        path = request.url.path
        if path.startswith("/v1/") or path == "/v1" or path == "/metrics":
            error = key_error(request)
            if error is not None:
                return error.response()
        return await call_next(request)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, error: APIError) -> JSONResponse:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        first = problems[0] if problems else {}
        location = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"invalid request: {first.get('msg', 'malformed body')}"
        if location:
            message += f" (at {location})"
        return APIError(400, message, param=location or None).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        # the router's own answers (no such route, wrong method) in the same error format
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return APIError(error.status_code, str(error.detail), type=kind).response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, error: Exception) -> JSONResponse:
        return APIError(
            500, f"internal error: {type(error).__name__}: {error}", type="server_error"
        ).response()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    def model_card() -> dict[str, Any]:
        return {"id": model_name, "object": "model", "created": created, "owned_by": "odyssey"}

    @app.get("/v1/models", dependencies=[Depends(require_key)])
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}", dependencies=[Depends(require_key)])
    async def get_model(name: str) -> dict[str, Any]:
        if name != model_name:
            raise APIError(404, f"model {name!r} does not exist", code="model_not_found")
        return model_card()

    @app.get("/metrics", dependencies=[Depends(require_key)])
    async def metrics() -> dict[str, Any]:
        return batcher.stats()

    def checksum_body() -> dict[str, Any]:
        checksum = weights_checksum(export_weights(policy.model))
        return {"checksum": checksum.as_dict(), "version": app.state.weights_version}

    @app.get("/v1/weights/checksum", dependencies=[Depends(require_key)])
    async def get_weights_checksum() -> dict[str, Any]:
        return await batcher.run_exclusive(checksum_body)

    @app.post("/v1/weights/reload", dependencies=[Depends(require_key)])
    async def reload_weights(request: WeightReloadRequest) -> dict[str, Any]:
        try:
            folder = Path(request.path).resolve()
            is_folder = folder.is_dir()
        except (ValueError, OSError) as error:  # e.g. a NUL byte in the path
            raise APIError(400, f"unusable path: {error}", param="path") from None
        if root is not None and not folder.is_relative_to(root):
            raise APIError(403, f"weights may only be loaded from under {root}", param="path")
        if not is_folder:
            raise APIError(400, f"no folder at {request.path!r}", param="path")

        def load() -> dict[str, Any]:
            tensors = load_weights_into(policy.model, folder)
            app.state.weights_version += 1
            body = checksum_body() if request.checksum else {"checksum": None}
            return {"loaded": tensors, "version": app.state.weights_version, **body}

        try:
            return await batcher.run_exclusive(load)
        except (ValueError, OSError) as error:  # names/shapes differ, unreadable files
            raise APIError(400, f"could not load {folder}: {error}", param="path") from None

    @app.post("/v1/chat/completions", dependencies=[Depends(require_key)])
    async def chat_completions(request: ChatCompletionRequest) -> dict[str, Any]:
        if request.model != model_name:
            raise APIError(
                404,
                f"the model {request.model!r} does not exist; this server serves {model_name!r}",
                param="model",
                code="model_not_found",
            )
        _check_supported(request)
        chat, images = messages_to_chat(request.messages)
        limit = request.max_completion_tokens or request.max_tokens or default_max_tokens
        if limit > max_tokens_limit:
            name = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
            raise APIError(
                400,
                f"{name}={limit} is more than this server generates ({max_tokens_limit})",
                param=name,
            )
        items = [
            ChatItem(
                messages=chat,
                images=images,
                seed=None if request.seed is None else request.seed + index,
                max_new_tokens=limit,
            )
            for index in range(request.n)
        ]
        generations = await batcher.submit(items, _group_params(request))
        choices = []
        for index, gen in enumerate(generations):
            choice: dict[str, Any] = {
                "index": index,
                "message": {"role": "assistant", "content": gen.text},
                "finish_reason": gen.finish_reason,
                "logprobs": (
                    {"content": _token_logprobs(chat_policy, gen)} if request.logprobs else None
                ),
            }
            if request.return_token_ids:
                choice["token_ids"] = gen.response_ids
            choices.append(choice)
        prompt_tokens = len(generations[0].prompt_ids)  # one prompt, however many choices
        completion_tokens = sum(len(gen.response_ids) for gen in generations)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        if request.return_token_ids:
            body["prompt_token_ids"] = generations[0].prompt_ids
        return body

    return app


# ---------------------------------------------------------------------------------- running
class ServerThread:
    """Runs an app with uvicorn in a background thread (tests, in-process rollouts).

    ``port=0`` picks a free port; ``url`` is ``http://host:port`` once started. Use as a
    context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        import uvicorn

        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Bind here, before the thread starts, so the port is known and cannot be taken.
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(app, log_level=log_level, lifespan="on")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (another process may still take it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A model server as a child process (``odyssey serve``, ``vllm serve``): started in its
    own session with its output in ``log``, ready once ``GET <url>/health`` answers 200, and
    stopped by its process group id (SIGTERM, then SIGKILL). Use as a context manager."""

    def __init__(
        self, command: Sequence[str], url: str, log: str | Path, *, env: dict | None = None
    ) -> None:
        self.command, self.url, self.log = list(command), url.rstrip("/"), Path(log)
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def odyssey(
        cls,
        checkpoint: str | Path,
        log: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        args: Sequence[str] = (),
    ) -> ServerProcess:
        """``odyssey serve checkpoint`` from this Python environment on ``host:port``."""
        port = port or free_port(host)
        odyssey = Path(sys.executable).with_name("odyssey")
        command = [str(odyssey), "serve", str(checkpoint), "--host", host, "--port", str(port)]
        return cls([*command, *args], f"http://{host}:{port}", log)

    @property
    def base_url(self) -> str:
        """The OpenAI API root."""
        return self.url + "/v1"

    def start(self, timeout: float = 120.0) -> ServerProcess:
        with self.log.open("wb") as out:  # the child keeps its own copy of the file
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.command[0]} exited early:\n{self._tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self.command[0]} did not start in {timeout}s:\n{self._tail()}"
                )
            time.sleep(0.2)

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.is_file() else ""

    def stop(self, timeout: float = 20.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the group is its own
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
