"""A policy backend for any OpenAI-compatible chat-completions endpoint.

Used for evaluating frontier models (OpenAI or any compatible API) and for rollouts against
a model server (``odyssey serve`` or vLLM's ``vllm serve``). Prompts are built exactly as
:class:`~odyssey_core.policy.hf.HFPolicy` builds them: the game's system prompt, then a user
turn holding the frame (resized with :func:`~odyssey_core.models.processor.prepare_frame`,
sent inline as a base64 PNG data URL) followed by the observation text.

What a remote answer can and cannot carry:

* ``Generation.logprobs`` is filled when ``logprobs=True`` and the server returns them
  (``choices[i].logprobs.content[j].logprob``); otherwise it is empty. Which distribution a
  server reports depends on the server (``odyssey serve`` follows the convention in
  :mod:`odyssey_core.policy.base`; other servers may not), so trainers should recompute
  log-probs locally with ``HFPolicy.score``.
* ``Generation.prompt_ids`` / ``response_ids`` are empty for remote models, except when
  ``return_token_ids=True`` and the server supports that extension (``odyssey serve`` and
  recent vLLM do: ``prompt_token_ids`` on the response, ``token_ids`` on each choice). With
  ``tokens_as_ids=True`` (and ``logprobs=True``) vLLM also names each log-prob token
  ``token_id:<id>`` (its ``return_tokens_as_token_ids``); the response ids are read from
  there when a choice carries no ``token_ids``. RL rollouts go through
  :class:`~odyssey_core.policy.weight_sync.RolloutPolicy`, which requires the ids.
* Stop strings follow OpenAI semantics: the matched stop string is *not* part of the text
  (unlike ``HFPolicy``, which keeps it).

A batch is sent as concurrent requests (a thread pool of ``concurrency`` workers). Each
request is retried with exponential backoff plus jitter on 429, 408, 5xx, timeouts and
connection errors, honouring ``Retry-After``; 401 and 404 fail at once with a message saying
what to check. The ``openai`` client's own retries are disabled so these are the only ones.
"""

from __future__ import annotations

import base64
import email.utils
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import numpy as np
from PIL import Image

from odyssey_core.common.images import encode_png
from odyssey_core.common.redaction import redact_uri
from odyssey_core.envs.base import Observation
from odyssey_core.policy.base import (
    Generation,
    GenerationParams,
    PolicyBackend,
    TurnPrompt,
    turn_messages,
)

__all__ = [
    "EndpointOptions",
    "OpenAIBackendError",
    "OpenAIPolicy",
    "RetrySettings",
    "encode_image_data_url",
    "parse_retry_after",
]

log = logging.getLogger(__name__)

# Placeholder key for servers that need none (a local vLLM or `odyssey serve` without
# --api-key): the openai client refuses to start without some key.
NO_KEY = "EMPTY"


class OpenAIBackendError(RuntimeError):
    """A request failed for good: a non-retryable status, or retries/wait budget used up."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class RetrySettings:
    """Exponential backoff with jitter: attempt k waits ``min(max, initial * factor**k)``,
    scaled by a random factor in ``[1 - jitter, 1 + jitter]``; a server's ``Retry-After``
    replaces the computed delay. Gives up after ``max_retries`` retries or when the summed
    waits of one request would exceed ``max_total_wait`` seconds."""

    max_retries: int = 6
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    factor: float = 2.0
    jitter: float = 0.25
    max_total_wait: float = 300.0

    def backoff(self, retry: int, rng: random.Random) -> float:
        base = min(self.max_backoff, self.initial_backoff * self.factor**retry)
        return max(0.0, base * (1.0 + self.jitter * (2.0 * rng.random() - 1.0)))


def parse_retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date).

    ``headers`` is any mapping with case-insensitive ``get`` (httpx headers) or a plain dict.
    Returns ``None`` when absent or unreadable; never negative.
    """
    if headers is None:
        return None

    def header(name: str) -> str | None:
        value = headers.get(name)
        if value is None and isinstance(headers, dict):  # plain dicts are case-sensitive
            lowered = {str(k).lower(): v for k, v in headers.items()}
            value = lowered.get(name.lower())
        return None if value is None else str(value).strip()

    millis = header("retry-after-ms")  # OpenAI's finer-grained variant
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = header("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0.0, when.timestamp() - current)


def encode_image_data_url(image: Image.Image | np.ndarray) -> str:
    """A lossless ``data:image/png;base64,...`` URL (PNG, so the server sees exact pixels)."""
    return "data:image/png;base64," + base64.b64encode(encode_png(image)).decode("ascii")


class EndpointOptions(TypedDict, total=False):
    """How an :class:`OpenAIPolicy` reaches its server and retries, for a caller that builds
    one and passes these through unchanged (their defaults are ``OpenAIPolicy``'s)."""

    api_key_env: str | None
    timeout: float
    retry: RetrySettings | None
    client: Any
    sleep: Callable[[float], None]


class OpenAIPolicy(PolicyBackend, TurnPrompt):
    """Answers observations through an OpenAI-compatible ``/chat/completions`` endpoint.

    ``model`` is the served model name; ``base_url`` the API root (e.g.
    ``http://127.0.0.1:8000/v1``; ``None`` means the OpenAI API or ``OPENAI_BASE_URL``). The
    key is ``api_key`` if given, else the environment variable named by ``api_key_env``, else
    a placeholder (for keyless local servers). It is never logged or shown in ``repr``.

    ``concurrency`` caps in-flight requests per ``generate`` call; ``timeout`` is per
    attempt, in seconds. ``max_tokens_field`` names the length limit sent (some newer OpenAI
    models only accept ``max_completion_tokens``). ``extra_body`` is merged into every
    request (server-specific options). ``usage`` sums the token counts servers report.
    ``return_token_ids`` / ``tokens_as_ids`` ask the server for the sampled ids (see above).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        game: str = "odland",
        system_prompt: str | None = None,
        image_scale: int | None = None,
        image_size: tuple[int, int] | None = None,
        concurrency: int = 8,
        timeout: float = 120.0,
        retry: RetrySettings | None = None,
        logprobs: bool = False,
        return_token_ids: bool = False,
        tokens_as_ids: bool = False,
        max_tokens_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError("max_tokens_field must be 'max_tokens' or 'max_completion_tokens'")
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.set_turn_prompt(game, system_prompt, image_scale, image_size)
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = retry or RetrySettings()
        self.logprobs = logprobs
        self.return_token_ids = return_token_ids
        self.tokens_as_ids = tokens_as_ids
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self._counts = {"requests": 0, "attempts": 0, "retries": 0, "failures": 0}
        self._key_source = "argument" if api_key else None
        if client is None:
            import openai

            key = api_key
            if not key and api_key_env:
                key = os.environ.get(api_key_env) or None
                self._key_source = f"${api_key_env}" if key else None
            # max_retries=0: our retry loop is the only one (and the one the tests see).
            client = openai.OpenAI(
                api_key=key or NO_KEY, base_url=base_url, timeout=timeout, max_retries=0
            )
        self.client = client

    def __repr__(self) -> str:  # no key in here, on purpose
        return (
            f"{type(self).__name__}(model={self.model!r}, "
            f"base_url={redact_uri(str(self.base_url))!r}, "
            f"concurrency={self.concurrency})"
        )

    # ----------------------------------------------------------------------------- metrics
    @property
    def usage(self) -> dict[str, int]:
        """Token counts summed over every successful request so far."""
        with self._lock:
            return dict(self._usage)

    def metrics(self) -> dict[str, int]:
        """Usage plus request counters (requests, attempts, retries, failures)."""
        with self._lock:
            return {**self._usage, **self._counts}

    def reset_metrics(self) -> None:
        with self._lock:
            self._usage = dict.fromkeys(self._usage, 0)
            self._counts = dict.fromkeys(self._counts, 0)

    # ----------------------------------------------------------------------------- prompts
    def image_url(self, observation: Observation) -> str:
        return encode_image_data_url(self.prepare_image(observation.image))

    def messages(self, observation: Observation) -> list[dict[str, Any]]:
        """System prompt, then the frame and the task text (the order HFPolicy uses)."""
        image = {"type": "image_url", "image_url": {"url": self.image_url(observation)}}
        return turn_messages(self.system_prompt, observation.text, image)

    def request_kwargs(self, params: GenerationParams, seed: int | None) -> dict[str, Any]:
        """Keyword arguments for ``chat.completions.create`` (besides model and messages)."""
        kwargs: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            self.max_tokens_field: params.max_new_tokens,
        }
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if seed is not None:
            kwargs["seed"] = seed
        if self.logprobs:
            kwargs["logprobs"] = True
        extra = dict(self.extra_body)
        # Not OpenAI parameters: only sent when they change something (vLLM understands them).
        if params.repetition_penalty != 1.0:
            extra["repetition_penalty"] = params.repetition_penalty
        if params.stop_token_ids:
            extra["stop_token_ids"] = list(params.stop_token_ids)
        if self.return_token_ids:
            extra["return_token_ids"] = True
        if self.tokens_as_ids and self.logprobs:
            extra["return_tokens_as_token_ids"] = True
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    # ----------------------------------------------------------------------------- requests
    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        """One request per observation, at most ``concurrency`` in flight; item ``i`` is sent
        with ``seed + i`` (as HFPolicy seeds batch items). Raises
        :class:`OpenAIBackendError` if any item fails for good."""
        params = params or GenerationParams()
        observations = list(observations)
        if not observations:
            return []

        def one(index: int) -> Generation:
            seed = None if params.seed is None else params.seed + index
            return self._generate_one(observations[index], params, seed)

        if len(observations) == 1 or self.concurrency == 1:
            return [one(i) for i in range(len(observations))]
        pool = ThreadPoolExecutor(
            max_workers=min(self.concurrency, len(observations)),
            thread_name_prefix="openai-policy",
        )
        try:
            futures = [pool.submit(one, i) for i in range(len(observations))]
            return [f.result() for f in futures]
        finally:
            # On a failure, drop requests not yet started instead of sending them anyway.
            pool.shutdown(wait=True, cancel_futures=True)

    def _generate_one(
        self, observation: Observation, params: GenerationParams, seed: int | None
    ) -> Generation:
        messages = self.messages(observation)
        response = self.create_with_retries(messages, self.request_kwargs(params, seed))
        return self._to_generation(response, observation)

    def create_with_retries(self, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> Any:
        """One ``chat.completions.create`` with this backend's retries (backoff,
        ``Retry-After``, clear errors for 401 / 404), counted in ``metrics()``; the GTR
        corrector sends its tool-calling requests through it."""
        import openai

        with self._lock:
            self._counts["requests"] += 1
        waited = 0.0
        retry = 0
        while True:
            with self._lock:
                self._counts["attempts"] += 1
            try:
                return self.client.chat.completions.create(
                    model=self.model, messages=messages, **kwargs
                )
            except openai.APIStatusError as error:
                status = error.status_code
                if not (status in (408, 409, 429) or status >= 500):
                    self._fail()
                    raise self._fatal_error(error) from error
                delay = parse_retry_after(error.response.headers)
                reason, last_status = f"HTTP {status}", status
            except openai.APIConnectionError as error:  # includes APITimeoutError
                delay, last_status = None, None
                kind = "timeout" if isinstance(error, openai.APITimeoutError) else "connection"
                reason = f"{kind} error ({error})"
            if delay is None:
                delay = self.retry.backoff(retry, self._rng)
            if retry >= self.retry.max_retries or waited + delay > self.retry.max_total_wait:
                self._fail()
                raise OpenAIBackendError(
                    f"{self.model!r} at {self._where()}: giving up after {retry + 1} attempts "
                    f"({waited:.1f}s of waiting); last error: {reason}",
                    status_code=last_status,
                )
            log.warning(
                "%s: %s; retry %d/%d in %.2fs",
                self.model,
                reason,
                retry + 1,
                self.retry.max_retries,
                delay,
            )
            with self._lock:
                self._counts["retries"] += 1
            self._sleep(delay)
            waited += delay
            retry += 1

    def _fail(self) -> None:
        with self._lock:
            self._counts["failures"] += 1

    def _where(self) -> str:
        return self.base_url or "the default OpenAI endpoint"

    def _fatal_error(self, error: Any) -> OpenAIBackendError:
        status = error.status_code
        detail = _server_message(error)
        if status == 401:
            source = self._key_source or (
                f"no key: pass api_key or set ${self.api_key_env}"
                if self.api_key_env
                else "no key: pass api_key"
            )
            message = (
                f"{self._where()} rejected the API key (HTTP 401: {detail}). Check the key "
                f"(used: {source}) and that it belongs to this server."
            )
        elif status == 403:
            message = f"{self._where()} refused access to {self.model!r} (HTTP 403: {detail})."
        elif status == 404:
            message = (
                f"{self._where()} answered 404 for model {self.model!r} ({detail}). Check the "
                "model name (GET <base_url>/models lists the served ones) and that base_url "
                "is the API root, usually ending in /v1."
            )
        else:
            message = f"{self._where()} rejected the request (HTTP {status}: {detail})."
        return OpenAIBackendError(message, status_code=status)

    # ----------------------------------------------------------------------------- results
    def _to_generation(self, response: Any, observation: Observation) -> Generation:
        choice = response.choices[0]
        text = choice.message.content or ""
        logprobs: list[float] = []
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        if content:
            logprobs = [float(item.logprob) for item in content]
        extras_response = getattr(response, "model_extra", None) or {}
        extras_choice = getattr(choice, "model_extra", None) or {}
        prompt_ids = list(extras_response.get("prompt_token_ids") or [])
        response_ids = list(extras_choice.get("token_ids") or [])
        if not response_ids and content:
            response_ids = _ids_from_token_names([item.token for item in content])
        usage = getattr(response, "usage", None)
        usage_dict: dict[str, int] = {}
        if usage is not None:
            usage_dict = {
                "prompt_tokens": int(usage.prompt_tokens or 0),
                "completion_tokens": int(usage.completion_tokens or 0),
                "total_tokens": int(usage.total_tokens or 0),
            }
            with self._lock:
                for key, value in usage_dict.items():
                    self._usage[key] += value
        raw_finish = choice.finish_reason or "stop"
        return Generation(
            text=text,
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            logprobs=logprobs,
            finish_reason="length" if raw_finish == "length" else "stop",
            prompt_text=f"{self.system_prompt}\n<image>\n{observation.text}",
            extra={
                "finish_reason": raw_finish,
                "model": getattr(response, "model", self.model),
                "id": getattr(response, "id", None),
                "usage": usage_dict,
            },
        )


def _ids_from_token_names(tokens: Sequence[str]) -> list[int]:
    """The ids of vLLM's ``token_id:<id>`` log-prob tokens; [] unless every token is one."""
    ids = []
    for token in tokens:
        prefix, sep, number = str(token).partition(":")
        if prefix != "token_id" or not sep or not number.isdigit():
            return []
        ids.append(int(number))
    return ids


def _server_message(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(error, "message", error))
