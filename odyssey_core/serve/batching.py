"""Concurrent requests gathered into batches on one generation thread.

A background task takes the first waiting job, gathers more for up to ``batch_wait_ms`` or
until ``max_batch_size`` sequences, and runs them on the generation thread, grouped by the
parameters that change every row's distribution (see :func:`group_params`). Guarantees:

* **One weight version per answer.** A collection runs under ``weights_lock``; a weight
  reload (:meth:`Batcher.run_exclusive`) takes the same lock, so it waits for the requests in
  flight and no answer (an ``n=16`` one split over several batches included) mixes two
  versions. Each answer carries the version it was generated with.
* **A bad request fails alone.** When a batch of several requests fails, each of its requests
  is run on its own, and only those that fail alone get the error.
* **Abandoned work is dropped.** A job whose client has gone, whose deadline passed, or that
  is still waiting when the server stops is skipped when batches are gathered, and its rows
  stop at the next token when it is already running.
* **Bounded waiting.** :meth:`Batcher.admit` counts the requests waiting; beyond
  ``max_waiting`` the server answers 503 with a ``Retry-After`` estimated from recent
  batch times.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from odyssey_core.policy.base import Generation, GenerationParams
from odyssey_core.serve.chat import ChatHFPolicy, ChatItem
from odyssey_core.serve.errors import APIError

__all__ = ["BATCH_HISTORY", "Batcher", "Job", "shutting_down_error"]

BATCH_HISTORY = 10_000  # batch sizes kept for inspection (tests); /metrics counts them all
T = TypeVar("T")


def shutting_down_error() -> APIError:
    return APIError(
        503,
        "the server is shutting down; retry against another server or after it restarts",
        type="server_error",
        code="shutting_down",
        headers={"Retry-After": "5"},
    )


@dataclass(eq=False)
class Job:
    """One request's sequences; ``deadline`` is a :func:`time.monotonic` time."""

    items: list[ChatItem]
    params: GenerationParams
    future: asyncio.Future[tuple[list[Generation], int]]
    deadline: float
    stopping: Callable[[], bool]
    cancelled: bool = False
    generations: list[Generation] = field(default_factory=list)

    def abandoned(self) -> bool:
        """Nobody will read the answer: client gone, deadline passed, or server stopping.
        Read from the generation thread at every token."""
        return self.cancelled or self.stopping() or time.monotonic() > self.deadline

    def cancel(self) -> None:
        self.cancelled = True
        if not self.future.done():
            self.future.cancel()


class Batcher:
    """Collects concurrent requests and runs them as batches on one worker thread."""

    def __init__(
        self,
        policy: ChatHFPolicy,
        max_batch_size: int = 8,
        batch_wait_ms: float = 10,
        *,
        max_waiting: int = 64,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if max_waiting < 1:
            raise ValueError("max_waiting must be >= 1")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.batch_wait = max(0.0, batch_wait_ms) / 1000.0
        self.max_waiting = max_waiting
        # sequences per policy call, in order: the latest ones only, so a long-running server
        # does not grow; the counters behind /metrics cover every call
        self.batch_sizes: deque[int] = deque(maxlen=BATCH_HISTORY)
        self._histogram: Counter[int] = Counter()
        self.requests = 0
        self.rejected = 0
        self.abandoned_jobs = 0  # jobs dropped or stopped because nobody waited for them any more
        self.weights_version = 0
        self.in_flight = 0  # admitted requests not answered yet
        self._seconds_per_batch = 1.0  # running mean, for Retry-After
        self._stopping = False
        self._queue: asyncio.Queue[Job] | None = None
        self._task: asyncio.Task[None] | None = None
        self.weights_lock: asyncio.Lock | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odyssey-gen")

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self.weights_lock = asyncio.Lock()
        self._task = asyncio.create_task(self._run())

    def request_stop(self) -> None:
        """Stop generating: running rows end at their next token, waiting and new requests
        are answered 503. Only sets a flag, so a signal handler may call it."""
        self._stopping = True

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def stop(self) -> None:
        self.request_stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while self._queue is not None and not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(shutting_down_error())
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- admission ------------------------------------------------------------------------
    def admit(self) -> None:
        """Count one more request in flight, or raise a 503 with ``Retry-After`` when
        ``max_waiting`` requests already wait beyond a full batch."""
        if self._stopping:
            raise shutting_down_error()
        if self.in_flight >= self.max_waiting + self.max_batch_size:
            self.rejected += 1
            raise APIError(
                503,
                f"the server is busy: {self.in_flight} requests are in flight, the most it "
                f"holds (odyssey serve --max-queue {self.max_waiting}, --max-batch-size "
                f"{self.max_batch_size}); retry after the Retry-After seconds",
                type="server_error",
                code="server_overloaded",
                headers={"Retry-After": str(self.retry_after())},
            )
        self.in_flight += 1

    def release(self) -> None:
        self.in_flight -= 1

    def retry_after(self) -> int:
        """Seconds until a new request would likely be admitted (1 to 60)."""
        batches_ahead = max(1, self.in_flight - self.max_waiting) / self.max_batch_size + 1
        return int(min(60, max(1, math.ceil(self._seconds_per_batch * batches_ahead))))

    # -- work -----------------------------------------------------------------------------
    def submit(self, items: list[ChatItem], params: GenerationParams, deadline: float) -> Job:
        """Queue ``items``; the job's future resolves to ``(generations, weights_version)``."""
        if self._queue is None:
            raise RuntimeError("the batcher is not running (app lifespan not started)")
        if self._stopping:
            raise shutting_down_error()
        future: asyncio.Future[tuple[list[Generation], int]] = (
            asyncio.get_running_loop().create_future()
        )
        job = Job(items, params, future, deadline, lambda: self._stopping)
        for item in items:
            item.abandoned = job.abandoned
        self.requests += 1
        self._queue.put_nowait(job)
        return job

    async def run_exclusive(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the generation thread once the requests in flight are answered and
        before the next batch starts (weight reloads, checksums)."""
        assert self.weights_lock is not None
        async with self.weights_lock:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _collect(self) -> list[Job]:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        jobs: list[Job] = []
        while not jobs:
            job = await self._queue.get()
            if job.abandoned():
                self._drop(job)
            else:
                jobs.append(job)
        count = len(jobs[0].items)
        deadline = loop.time() + self.batch_wait
        while count < self.max_batch_size:
            remaining = deadline - loop.time()
            try:
                job = (
                    self._queue.get_nowait()
                    if remaining <= 0
                    else await asyncio.wait_for(self._queue.get(), remaining)
                )
            except (TimeoutError, asyncio.QueueEmpty):
                break
            if job.abandoned():
                self._drop(job)
                continue
            jobs.append(job)
            count += len(job.items)
        return jobs

    def _drop(self, job: Job) -> None:
        self.abandoned_jobs += 1
        if not job.future.done():
            if self._stopping:
                job.future.set_exception(shutting_down_error())
            else:
                job.future.cancel()

    async def _run(self) -> None:
        assert self.weights_lock is not None
        while True:
            jobs = await self._collect()
            async with self.weights_lock:
                version = self.weights_version
                groups: dict[GenerationParams, list[Job]] = {}
                for job in jobs:
                    groups.setdefault(job.params, []).append(job)
                for params, group in groups.items():
                    await self._run_group(params, group)
                for job in jobs:
                    if job.abandoned():
                        self._drop(job)
                    elif not job.future.done():
                        job.future.set_result((job.generations, version))

    async def _run_group(self, params: GenerationParams, group: list[Job]) -> None:
        rows = [(job, item) for job in group for item in job.items]
        failed: set[int] = set()
        for start in range(0, len(rows), self.max_batch_size):
            chunk = [
                (job, item)
                for job, item in rows[start : start + self.max_batch_size]
                if id(job) not in failed and not job.abandoned()
            ]
            if not chunk:
                continue
            try:
                gens = await self._generate([item for _, item in chunk], params)
            except Exception as error:
                jobs_here = list({id(job): job for job, _ in chunk}.values())
                if len(jobs_here) == 1:
                    self._fail(jobs_here[0], error, failed)
                    continue
                # Several requests shared the failed batch: run each alone, so only a
                # request that fails by itself gets the error.
                for job in jobs_here:
                    items = [item for j, item in chunk if j is job]
                    try:
                        job.generations.extend(await self._generate(items, params))
                    except Exception as alone:
                        self._fail(job, alone, failed)
                continue
            for (job, _), gen in zip(chunk, gens, strict=True):
                job.generations.append(gen)

    async def _generate(self, items: list[ChatItem], params: GenerationParams) -> list[Generation]:
        self.batch_sizes.append(len(items))
        self._histogram[len(items)] += 1
        started = time.monotonic()
        gens = await asyncio.get_running_loop().run_in_executor(
            self._executor, self.policy.generate_chats, items, params
        )
        elapsed = time.monotonic() - started
        self._seconds_per_batch = 0.8 * self._seconds_per_batch + 0.2 * elapsed
        return gens

    @staticmethod
    def _fail(job: Job, error: Exception, failed: set[int]) -> None:
        failed.add(id(job))
        if not job.future.done():
            job.future.set_exception(error)

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "rejected": self.rejected,
            "abandoned": self.abandoned_jobs,
            "in_flight": self.in_flight,
            "queued": 0 if self._queue is None else self._queue.qsize(),
            "batches": sum(self._histogram.values()),
            "sequences": sum(size * count for size, count in self._histogram.items()),
            "max_batch_size_seen": max(self._histogram, default=0),
            "batch_size_histogram": dict(sorted(self._histogram.items())),
            "weights_version": self.weights_version,
        }
