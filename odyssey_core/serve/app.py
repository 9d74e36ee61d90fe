"""An OpenAI-compatible chat-completions server for a local Qwen-VL policy.

``create_app(policy, model_name)`` returns a FastAPI app with ``GET /v1/models``,
``POST /v1/chat/completions`` (OpenAI message format, images as inline data URLs),
``GET /metrics`` (batching counters) and ``GET /health`` (no key, never blocked by work).

A chat request goes through four stages, each with its bound (see
:class:`~odyssey_core.serve.limits.ServeLimits`):

1. :class:`~odyssey_core.serve.guard.Guard`: Host header, key, admission (503 with
   ``Retry-After`` when the queue is full), body size (413).
2. The route: model name, parameters, counts of messages and images, a lower bound of the
   prompt's tokens (all 4xx without any decoding).
3. A preparation thread: images decoded (their pixels checked from the header first), the
   prompt rendered and its tokens counted, image tokens included (400 beyond the context).
4. The :class:`~odyssey_core.serve.batching.Batcher`: batched generation on one thread; a
   request whose client has gone or whose deadline (``request_timeout``) passed is dropped
   or stopped at the next token, and the client gets a 504 at the deadline.

Batching: requests in one collection are grouped by the parameters that change the
distribution for every row (temperature, top_p, repetition_penalty, stop strings, stop token
ids); each group runs as one batch. Two things may differ inside a group: ``max_tokens``
(the batch runs to the largest and shorter items are cut afterwards, which is exact because
each row samples from its own generator) and ``seed`` (each row gets its own generator
seeded with the request's seed, plus the choice index when ``n > 1``), so an answer does not
depend on which other requests it was batched with. A request that makes a shared batch fail
is run alone, and only it gets the error.

Images are used as sent: the server does not rescale them (``OpenAIPolicy`` applies
``image_scale``/``image_size`` on the client side). Remote ``http(s)`` image URLs are
refused, since the server never reaches the network.

Bounds of the body itself: ``seed`` is an int64, ``stop_token_ids`` non-negative int64s,
``repetition_penalty`` in [0.01, 100], floats finite; a temperature below 1e-5 is read as 0
(greedy), where sampling would be numerically degenerate (a tiny top_p keeps the top token,
as in HFPolicy). Anything outside is a 400.

Log-probs (``logprobs: true``) are ``log_softmax(logits / T)[token]`` of each sampled token,
the convention of :mod:`odyssey_core.policy.base`; ``top_logprobs`` is not supported.
Stop strings follow OpenAI semantics: the text ends before the matched stop string (the
token ids and log-probs still cover every sampled token). vLLM-style extensions accepted in
the body: ``repetition_penalty``, ``stop_token_ids`` and ``return_token_ids`` (adds
``prompt_token_ids`` to the response and ``token_ids`` to each choice). Every answer's
``system_fingerprint`` names the weight version it was generated with
(``odyssey-weights-<version>``).

Weight sync for RL (``rollout.backend: openai`` with ``server: odyssey``, see
:mod:`odyssey_core.policy.weight_sync`): ``POST /v1/weights/reload`` with
``{"path": <a safetensors folder inside the weights root>, "checksum": true}`` checks the
folder (:mod:`odyssey_core.serve.weights`: inside the root, regular files, every name and
shape, finite values), waits for the requests in flight, copies the weights into the served
model and answers with their checksum; ``GET /v1/weights/checksum`` reports the checksum of
the weights served now. Both are off unless the app has a ``weights_root`` and a key; they
need the admin key when one is set, else the API key.

Internal failures are answered 500 with an error id; the exception goes to the
``odyssey.serve`` log under that id, never into the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive

from odyssey_core.policy.base import Generation, GenerationParams
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.policy.weight_sync import export_weights, weights_checksum
from odyssey_core.serve import InsecureBindError, check_bind_security, is_loopback
from odyssey_core.serve.batching import Batcher, Job
from odyssey_core.serve.chat import ChatHFPolicy, ChatItem, PromptPreparer, messages_to_chat
from odyssey_core.serve.errors import APIError, internal_error
from odyssey_core.serve.guard import CHAT_PATH, Guard
from odyssey_core.serve.limits import ServeLimits
from odyssey_core.serve.running import ServerProcess, ServerThread, free_port
from odyssey_core.serve.schema import (
    MIN_TEMPERATURE,
    ChatCompletionRequest,
    WeightReloadRequest,
)
from odyssey_core.serve.weights import (
    WeightFolderError,
    WeightsOutsideRoot,
    WeightsRoot,
    check_weights,
)

__all__ = [
    "APIError",
    "Batcher",
    "ChatHFPolicy",
    "ChatItem",
    "InsecureBindError",
    "ServeLimits",
    "ServerProcess",
    "ServerThread",
    "check_bind_security",
    "create_app",
    "free_port",
    "group_params",
    "is_loopback",
    "messages_to_chat",
]

T = TypeVar("T")
PREPARATION_THREADS = 2


def group_params(request: ChatCompletionRequest) -> GenerationParams:
    """The parameters that must be equal for requests to share a batch."""
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    return GenerationParams(
        temperature=0.0 if request.temperature < MIN_TEMPERATURE else request.temperature,
        top_p=request.top_p,
        repetition_penalty=request.repetition_penalty,
        stop=tuple(stop),
        stop_token_ids=tuple(request.stop_token_ids or ()),
        max_new_tokens=1,  # per item (ChatItem.max_new_tokens); constant so groups merge
    )


def _check_supported(request: ChatCompletionRequest) -> None:
    if request.stream:
        raise APIError(
            400,
            "stream=true is not supported by this server",
            param="stream",
            code="unsupported_parameter",
        )
    if request.top_logprobs:
        raise APIError(
            400,
            "top_logprobs is not supported",
            param="top_logprobs",
            code="unsupported_parameter",
        )
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(request, name):
            raise APIError(
                400,
                f"{name} is not supported; use repetition_penalty instead",
                param=name,
                code="unsupported_parameter",
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


def _timed_out(limits: ServeLimits) -> APIError:
    return APIError(
        504,
        f"the request did not finish within this server's {limits.request_timeout:g} s "
        "(odyssey serve --request-timeout); its work was dropped. Ask for fewer tokens or "
        "retry later",
        type="server_error",
        code="timeout",
    )


class ClientGone(Exception):
    """The client closed its connection before its answer was ready."""


async def _client_gone(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _until(awaitable: Awaitable[T], deadline: float, limits: ServeLimits) -> T:
    try:
        return await asyncio.wait_for(awaitable, max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        raise _timed_out(limits) from None


async def _answer_of(
    job: Job, receive: Receive, deadline: float, limits: ServeLimits
) -> tuple[list[Generation], int]:
    """The job's result; :class:`ClientGone` or a 504 (the job dropped) when the client
    leaves or the deadline passes first."""
    gone = asyncio.ensure_future(_client_gone(receive))
    try:
        await asyncio.wait(
            {job.future, gone},
            timeout=max(0.0, deadline - time.monotonic()),
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        gone.cancel()
    if job.future.done() and not job.future.cancelled():
        return job.future.result()
    left = gone.done() and not gone.cancelled()
    job.cancel()
    if left:
        raise ClientGone
    raise _timed_out(limits)


def create_app(
    policy: HFPolicy,
    model_name: str,
    api_key: str | None = None,
    *,
    admin_key: str | None = None,
    max_batch_size: int = 8,
    batch_wait_ms: float = 10.0,
    weights_root: str | Path | None = None,
    limits: ServeLimits | None = None,
    trusted_hosts: Iterable[str] | None = (),
) -> FastAPI:
    """The FastAPI app serving ``policy`` as ``model_name``.

    With ``api_key`` set, every ``/v1`` route and ``/metrics`` require
    ``Authorization: Bearer <api_key>`` (``admin_key`` is accepted too). The weight routes
    are on only with ``weights_root`` and a key (``admin_key``, else ``api_key``), and read
    only inside ``weights_root``. ``trusted_hosts``: the ``Host`` names answered besides
    loopback ones (None: any, for a public bind behind a key). ``limits``: the request and
    queue bounds (:class:`ServeLimits`). ``app.state.batcher`` holds the :class:`Batcher`.
    """
    limits = limits or ServeLimits()
    chat_policy = ChatHFPolicy.wrap(policy)
    preparer = PromptPreparer(chat_policy, limits)
    batcher = Batcher(
        chat_policy,
        max_batch_size=max_batch_size,
        batch_wait_ms=batch_wait_ms,
        max_waiting=limits.max_queue,
    )
    root = None if weights_root is None else WeightsRoot(weights_root)
    weights_enabled = root is not None and bool(admin_key or api_key)
    created = int(time.time())
    preparation = ThreadPoolExecutor(PREPARATION_THREADS, thread_name_prefix="odyssey-prep")
    weight_checks = ThreadPoolExecutor(1, thread_name_prefix="odyssey-weights")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()
            preparation.shutdown(wait=False, cancel_futures=True)
            weight_checks.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="Odyssey policy server", lifespan=lifespan)
    app.state.batcher = batcher
    app.state.model_name = model_name
    app.state.limits = limits
    app.add_middleware(
        Guard,
        batcher=batcher,
        max_body_bytes=limits.max_body_bytes,
        api_key=api_key,
        admin_key=admin_key,
        weights_enabled=weights_enabled,
        trusted_hosts=trusted_hosts,
    )

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
        return APIError(
            400, message, param=location or None, code="invalid_request_body"
        ).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        # the router's own answers (no such route, wrong method) in the same error format
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        code = "not_found" if error.status_code == 404 else "invalid_request"
        return APIError(error.status_code, str(error.detail), type=kind, code=code).response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, error: Exception) -> JSONResponse:
        return internal_error(error, f"answering {request.method} {request.url.path}").response()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    def model_card() -> dict[str, Any]:
        return {"id": model_name, "object": "model", "created": created, "owned_by": "odyssey"}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}")
    async def get_model(name: str) -> dict[str, Any]:
        if name != model_name:
            raise APIError(404, f"model {name!r} does not exist", code="model_not_found")
        return model_card()

    @app.get("/metrics")
    async def metrics() -> dict[str, Any]:
        return batcher.stats()

    def checksum_body() -> dict[str, Any]:
        checksum = weights_checksum(export_weights(policy.model))
        return {"checksum": checksum.as_dict(), "version": batcher.weights_version}

    @app.get("/v1/weights/checksum")
    async def get_weights_checksum() -> dict[str, Any]:
        return await batcher.run_exclusive(checksum_body)

    @app.post("/v1/weights/reload")
    async def reload_weights(request: WeightReloadRequest) -> dict[str, Any]:
        assert root is not None  # the guard answers 403 while the weight routes are off
        loop = asyncio.get_running_loop()
        try:
            checked = await loop.run_in_executor(
                weight_checks, check_weights, root, request.path, policy.model
            )
        except WeightsOutsideRoot as error:
            raise APIError(403, str(error), param="path", code="outside_weights_root") from None
        except WeightFolderError as error:
            raise APIError(400, str(error), param="path", code="invalid_weights") from None

        def load() -> dict[str, Any]:
            try:
                tensors = checked.copy_into(policy.model)
            finally:
                checked.close()
            batcher.weights_version += 1
            body = checksum_body() if request.checksum else {"checksum": None}
            return {"loaded": tensors, **body, "version": batcher.weights_version}

        return await batcher.run_exclusive(load)

    @app.post(CHAT_PATH)
    async def chat_completions(request: ChatCompletionRequest, http: Request) -> Any:
        deadline = time.monotonic() + limits.request_timeout
        if request.model != model_name:
            raise APIError(
                404,
                f"the model {request.model!r} does not exist; this server serves {model_name!r}",
                param="model",
                code="model_not_found",
            )
        _check_supported(request)
        limit = request.max_completion_tokens or request.max_tokens or limits.default_max_tokens
        if limit > limits.max_tokens_limit:
            name = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
            raise APIError(
                400,
                f"{name}={limit} is more than this server generates ({limits.max_tokens_limit}; "
                "odyssey serve --max-completion-tokens)",
                param=name,
                code="max_tokens_too_large",
            )
        preparer.check_shape(request, limit)
        prepared = await _until(
            asyncio.get_running_loop().run_in_executor(
                preparation, preparer.prepare, request, limit
            ),
            deadline,
            limits,
        )
        items = [
            ChatItem(
                messages=prepared.chat,
                images=prepared.images,
                seed=None if request.seed is None else request.seed + index,
                max_new_tokens=limit,
            )
            for index in range(request.n)
        ]
        job = batcher.submit(items, group_params(request), deadline)
        try:
            generations, version = await _answer_of(job, http.receive, deadline, limits)
        except (APIError, ClientGone, asyncio.CancelledError):
            raise
        except Exception as error:
            raise internal_error(error, "generating the answer") from None
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
            "system_fingerprint": f"odyssey-weights-{version}",
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

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, error: ClientGone) -> JSONResponse:
        # Nobody reads this answer; uvicorn drops it with the closed connection.
        return APIError(499, "the client closed the connection", code="client_gone").response()

    return app
