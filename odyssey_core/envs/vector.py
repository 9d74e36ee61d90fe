"""Run several turn environments side by side: one subprocess each, or all in this process.

:class:`SubprocVectorEnv` starts one worker process per environment (``spawn`` or
``forkserver``, never ``fork``: forking a process that holds threads, such as torch's, can
deadlock). Each worker writes its frames into a shared-memory slot that the parent reads, so
only small metadata (text, reward, flags, info) is pickled through the pipe.
:class:`SyncVectorEnv` has the same API and runs the environments in-process, which is handy
for debugging and for a single environment.

>>> from odyssey_core.envs.vector import SubprocVectorEnv
>>> with SubprocVectorEnv(["odland-1-1"] * 4, env_kwargs={"max_turns": 80}) as envs:
...     observations, infos = envs.reset(seeds=[0, 1, 2, 3])
...     observations, rewards, terminated, truncated, infos = envs.step([("right",)] * 4)

There is no auto-reset: episodes are long and per level, so the rollout code decides when to
call ``reset(indices=[...])``. Stepping an environment whose episode has ended raises
:class:`VectorEnvError`. Every error names the environment's index and id; a worker that
raises, dies or does not answer in time never hangs the parent.
"""

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing as mp
import os
import pickle
import select
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from odyssey_core.envs.base import Observation, TurnEnv

EnvFn = Callable[[], TurnEnv]
#: what a vector env accepts per environment: a picklable factory, a registry name, or
#: ``(name, kwargs)`` for :func:`odyssey_core.envs.registry.make_env`
EnvSpecLike = EnvFn | str | tuple[str, Mapping[str, Any]]


class VectorEnvError(RuntimeError):
    """An environment of a vector env failed; the message names its index, id and traceback."""

    def __init__(
        self,
        message: str,
        *,
        indices: Sequence[int] = (),
        env_ids: Sequence[str] = (),
        remote_tracebacks: Sequence[str] = (),
        partial: Mapping[int, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.indices = list(indices)
        self.env_ids = list(env_ids)
        self.remote_tracebacks = list(remote_tracebacks)
        #: results of the envs that did answer, by index (for step: the same 5-tuple per env
        #: that step() returns in its lists), so a failure elsewhere loses none of their turns
        self.partial = dict(partial or {})

    @property
    def index(self) -> int | None:
        """The (first) failing environment's index."""
        return self.indices[0] if self.indices else None


def env_fn_from_spec(spec: EnvSpecLike, env_kwargs: Mapping[str, Any] | None = None) -> EnvFn:
    """A picklable zero-argument factory for ``spec`` (see :data:`EnvSpecLike`)."""
    from odyssey_core.envs.registry import make_env

    common = dict(env_kwargs or {})
    if isinstance(spec, str):
        return functools.partial(make_env, spec, **common)
    if (
        isinstance(spec, tuple)
        and len(spec) == 2
        and isinstance(spec[0], str)
        and isinstance(spec[1], Mapping)
    ):
        return functools.partial(make_env, spec[0], **{**common, **spec[1]})
    if callable(spec):
        if common:
            raise ValueError("env_kwargs applies to env names and (name, kwargs) specs only")
        return spec
    raise TypeError(
        f"cannot build an environment from {spec!r}: give a registry name, (name, kwargs) "
        "or a picklable zero-argument callable"
    )


def _frame_shape(env: TurnEnv) -> tuple[int, int, int] | None:
    """The frame shape the env declares, when its observation space is a uint8 [H, W, 3] box."""
    space = getattr(env, "observation_space", None)
    shape = getattr(space, "shape", None)
    dtype = getattr(space, "dtype", None)
    if shape is None or len(shape) != 3 or shape[2] != 3 or dtype != np.uint8:
        return None
    return (int(shape[0]), int(shape[1]), int(shape[2]))


class _GuardedEnv:
    """One environment plus the episode bookkeeping both runners share (no stepping when done)."""

    def __init__(self, index: int, env: TurnEnv) -> None:
        self.index = index
        self.env = env
        self.ended: str | None = "never reset"  # why the env cannot step now, or None

    @property
    def env_id(self) -> str:
        return getattr(self.env, "env_id", "") or type(self.env).__name__

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Observation, dict]:
        self.ended = "reset() failed"
        observation, info = self.env.reset(seed=seed, options=options)
        self.ended = None
        return observation, info

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, dict]:
        if self.ended is not None:
            raise RuntimeError(
                f"env {self.index} ({self.env_id}) cannot step: {self.ended}; "
                f"call reset(indices=[{self.index}]) first"
            )
        observation, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            self.ended = "its episode has ended (" + ("terminated)" if terminated else "truncated)")
        return observation, float(reward), bool(terminated), bool(truncated), info

    def load_state(self, state: bytes) -> None:
        self.env.load_state(state)
        self.ended = None  # the env itself refuses to step a state saved after the end

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        attribute = getattr(self.env, name)
        return attribute(*args, **kwargs) if callable(attribute) else attribute


# -- the worker process --------------------------------------------------------------------------


def _error_payload(exc: BaseException) -> tuple[str, str, str]:
    return type(exc).__name__, str(exc), traceback.format_exc()


def _worker(index: int, env_fn: EnvFn, conn: Connection) -> None:
    """Serve one environment: answer every command with ("ok", result) or ("error", details)."""
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    guarded: _GuardedEnv | None = None
    shm: SharedMemory | None = None
    slot: np.ndarray | None = None

    def frame_out(image: np.ndarray) -> np.ndarray | None:
        """Write the frame into the shared slot; return it for the pipe only if it cannot fit."""
        if slot is not None and slot.shape == image.shape:
            np.copyto(slot, image)
            return None
        return image

    try:
        try:
            env = env_fn()
            guarded = _GuardedEnv(index, env)
            conn.send(("ok", (guarded.env_id, _frame_shape(env), os.getpid())))
        except Exception as exc:
            conn.send(("error", _error_payload(exc)))
            return
        while True:
            try:
                command, data = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if command == "close":
                conn.send(("ok", None))
                return
            try:
                if command == "step":
                    obs, reward, terminated, truncated, info = guarded.step(data)
                    result: Any = (
                        frame_out(obs.image),
                        obs.text,
                        obs.meta,
                        reward,
                        terminated,
                        truncated,
                        info,
                    )
                elif command == "reset":
                    obs, info = guarded.reset(*data)
                    result = (frame_out(obs.image), obs.text, obs.meta, info)
                elif command == "attach":
                    name, shape = data
                    slot = None  # drop the view before closing the old mapping
                    if shm is not None:
                        shm.close()
                    shm = SharedMemory(name=name)
                    slot = np.ndarray(shape, dtype=np.uint8, buffer=shm.buf)
                    result = None
                elif command == "save_state":
                    result = guarded.env.save_state()
                elif command == "load_state":
                    guarded.load_state(data)
                    result = None
                elif command == "call":
                    result = guarded.call(*data)
                else:
                    raise ValueError(f"unknown vector env command {command!r}")
                conn.send(("ok", result))
            except Exception as exc:
                # also covers a result that cannot be pickled: send() pickles before writing
                conn.send(("error", _error_payload(exc)))
    finally:
        slot = None
        if shm is not None:
            shm.close()
        if guarded is not None:
            with contextlib.suppress(Exception):
                guarded.env.close()


# -- shared argument handling --------------------------------------------------------------------


class _VectorBase:
    """Argument checks and result assembly shared by the two runners."""

    num_envs: int
    env_ids: list[str]

    def _indices(self, indices: Sequence[int] | None) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        chosen = [int(i) for i in indices]
        for i in chosen:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i} out of range for {self.num_envs} envs")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"duplicate env indices in {chosen}")
        return chosen

    @staticmethod
    def _per_env(values: Any, count: int, what: str) -> list[Any]:
        if values is None:
            return [None] * count
        values = list(values)
        if len(values) != count:
            raise ValueError(f"got {len(values)} {what} for {count} envs")
        return values

    def _reset_args(
        self,
        seeds: Sequence[int | None] | int | None,
        options: Sequence[dict[str, Any] | None] | None,
        indices: Sequence[int] | None,
    ) -> tuple[list[int], list[int | None], list[dict[str, Any] | None]]:
        chosen = self._indices(indices)
        if isinstance(seeds, int | np.integer):  # one seed: env k gets seed + k
            seeds = [int(seeds) + k for k in range(len(chosen))]
        return (
            chosen,
            self._per_env(seeds, len(chosen), "seeds"),
            self._per_env(options, len(chosen), "options"),
        )

    def _step_args(self, actions: Sequence[Any], indices: Sequence[int] | None) -> list[int]:
        chosen = self._indices(indices)
        if len(actions) != len(chosen):
            raise ValueError(f"got {len(actions)} actions for {len(chosen)} envs")
        return chosen

    @staticmethod
    def _pack_steps(
        results: list[tuple[Observation, float, bool, bool, dict]],
    ) -> tuple[list[Observation], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        observations, rewards, terminated, truncated, infos = zip(*results, strict=True)
        return (
            list(observations),
            np.array(rewards, dtype=np.float64),
            np.array(terminated, dtype=bool),
            np.array(truncated, dtype=bool),
            list(infos),
        )

    def _describe(self, index: int) -> str:
        return f"env {index} ({self.env_ids[index]})"

    def _refuse_ended(self, chosen: Sequence[int], ended: Sequence[str | None]) -> None:
        """Refuse the whole step when a chosen env has ended (``ended[i]``: why env ``i`` can
        no longer step, None while it can), so no env moves and loses its observation."""
        refused = [i for i in chosen if ended[i] is not None]
        if refused:
            raise VectorEnvError(
                "; ".join(f"{self._describe(i)} cannot step: {ended[i]}" for i in refused)
                + f". Call reset(indices={refused}) first.",
                indices=refused,
                env_ids=[self.env_ids[i] for i in refused],
            )

    def __len__(self) -> int:
        return self.num_envs

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()  # type: ignore[attr-defined]


# -- in-process ----------------------------------------------------------------------------------


class SyncVectorEnv(_VectorBase):
    """The :class:`SubprocVectorEnv` API with every environment in this process, run in turn.

    Errors are raised as :class:`VectorEnvError` too, with the original exception as
    ``__cause__``. Observations are returned as the environments produce them (not copied).
    """

    def __init__(
        self, env_fns: Sequence[EnvSpecLike], *, env_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.closed = False
        self._envs: list[_GuardedEnv] = []
        if not env_fns:
            raise ValueError("a vector env needs at least one environment")
        try:
            for i, spec in enumerate(env_fns):
                self._envs.append(_GuardedEnv(i, env_fn_from_spec(spec, env_kwargs)()))
        except BaseException:
            self.close()
            raise
        self.num_envs = len(self._envs)
        self.env_ids = [g.env_id for g in self._envs]

    @property
    def envs(self) -> list[TurnEnv]:
        return [g.env for g in self._envs]

    def _run_all(
        self, indices: list[int], what: str, calls: Sequence[Callable[[], Any]]
    ) -> list[Any]:
        """Run every call, like the workers would, then raise one error naming each failure."""
        if self.closed:
            raise VectorEnvError("the vector env is closed")
        results: dict[int, Any] = {}
        failures: list[tuple[int, Exception, str]] = []
        for i, fn in zip(indices, calls, strict=True):
            try:
                results[i] = fn()
            except Exception as exc:
                failures.append((i, exc, traceback.format_exc()))
        if failures:
            error = VectorEnvError(
                "\n".join(
                    f"{self._describe(i)} raised {type(exc).__name__} in {what}: {exc}"
                    for i, exc, _ in failures
                ),
                indices=[i for i, _, _ in failures],
                env_ids=[self.env_ids[i] for i, _, _ in failures],
                remote_tracebacks=[tb for _, _, tb in failures],
                partial=results,
            )
            raise error from failures[0][1]
        return [results[i] for i in indices]

    def reset(
        self,
        seeds: Sequence[int | None] | int | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[Observation], list[dict[str, Any]]]:
        """Reset the chosen envs (all by default); ``seeds``/``options`` align with them."""
        chosen, seed_list, option_list = self._reset_args(seeds, options, indices)
        calls = [
            functools.partial(self._envs[i].reset, seed, opts)
            for i, seed, opts in zip(chosen, seed_list, option_list, strict=True)
        ]
        results = self._run_all(chosen, "reset", calls)
        return [r[0] for r in results], [r[1] for r in results]

    def step(
        self, actions: Sequence[Any], indices: Sequence[int] | None = None
    ) -> tuple[list[Observation], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """One turn of each chosen env (all by default); no env resets itself."""
        chosen = self._step_args(actions, indices)
        if self.closed:
            raise VectorEnvError("the vector env is closed")
        self._refuse_ended(chosen, [env.ended for env in self._envs])
        calls = [
            functools.partial(self._envs[i].step, action)
            for i, action in zip(chosen, actions, strict=True)
        ]
        return self._pack_steps(self._run_all(chosen, "step", calls))

    def save_state(self, index: int) -> bytes:
        (i,) = self._indices([index])
        return self._run_all([i], "save_state", [self._envs[i].env.save_state])[0]

    def load_state(self, index: int, state: bytes) -> None:
        (i,) = self._indices([index])
        self._run_all([i], "load_state", [functools.partial(self._envs[i].load_state, state)])

    def call(
        self, name: str, *args: Any, indices: Sequence[int] | None = None, **kwargs: Any
    ) -> list[Any]:
        """Call method ``name`` (or read attribute ``name``) on each chosen env."""
        chosen = self._indices(indices)
        calls = [functools.partial(self._envs[i].call, name, args, kwargs) for i in chosen]
        return self._run_all(chosen, f"call({name!r})", calls)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for guarded in getattr(self, "_envs", []):
            with contextlib.suppress(Exception):
                guarded.env.close()


# -- subprocesses --------------------------------------------------------------------------------


#: how often a worker that has not answered yet is checked for being alive (seconds)
_LIVENESS_CHECK_S = 1.0


def _default_context() -> str:
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _preload_in_forkserver(ctx: Any) -> None:
    """Have the fork server import this module (numpy, gymnasium) once, so workers fork warm.

    Only takes effect if the server has not started yet; keeps any modules already asked for.
    """
    from multiprocessing import forkserver

    current = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
    if __name__ not in current:
        ctx.set_forkserver_preload([*current, __name__])


class SubprocVectorEnv(_VectorBase):
    """Each environment in its own worker process; frames come back through shared memory.

    ``env_fns`` holds, per environment, a registry name, ``(name, kwargs)`` or a picklable
    zero-argument factory (``functools.partial(make_env, name, **kw)``, not a lambda).
    ``env_kwargs`` is added to every name. ``context`` is ``"forkserver"`` (the default where
    available) or ``"spawn"``. ``timeout`` bounds every call (seconds, ``None`` waits
    forever); a worker that misses it is stopped. ``start_timeout`` bounds building the envs.

    A worker that raises reports its traceback and stays usable. A worker that dies or times
    out is marked dead; calls that touch it raise :class:`VectorEnvError`, the others work.
    """

    def __init__(
        self,
        env_fns: Sequence[EnvSpecLike],
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        context: str | None = None,
        timeout: float | None = 60.0,
        start_timeout: float | None = 300.0,
    ) -> None:
        # Everything close() touches exists before anything can fail.
        self.closed = False
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._pollers: list[select.poll] = []
        self._shms: list[SharedMemory | None] = []
        self._views: list[np.ndarray | None] = []
        self._dead: dict[int, str] = {}
        self._ended: list[str | None] = []
        self.timeout = timeout
        self.env_ids: list[str] = []
        self.pids: list[int] = []
        if not env_fns:
            raise ValueError("a vector env needs at least one environment")
        fns = [env_fn_from_spec(spec, env_kwargs) for spec in env_fns]
        for i, fn in enumerate(fns):  # fail here, clearly, rather than inside Process.start()
            try:
                pickle.dumps(fn)
            except Exception as exc:
                raise TypeError(
                    f"env_fns[{i}] ({fn!r}) cannot be pickled for a worker process: {exc}. "
                    "Use a registry name or functools.partial(make_env, name, **kwargs)."
                ) from exc
        self.num_envs = len(fns)
        self.context = context or _default_context()
        if self.context == "fork":
            raise ValueError("fork is unsafe with threads; use 'spawn' or 'forkserver'")
        ctx = mp.get_context(self.context)
        if self.context == "forkserver":
            _preload_in_forkserver(ctx)
        self.env_ids = [f"env-{i}" for i in range(self.num_envs)]  # until the workers say
        self._ended = ["never reset"] * self.num_envs
        self._shms = [None] * self.num_envs
        self._views = [None] * self.num_envs
        try:
            for i, fn in enumerate(fns):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                process = ctx.Process(
                    target=_worker,
                    args=(i, fn, child_conn),
                    name=f"odyssey-vector-env-{i}",
                    daemon=True,  # the interpreter stops workers a crashed parent leaves behind
                )
                process.start()
                child_conn.close()
                self._conns.append(parent_conn)
                self._procs.append(process)
                poller = select.poll()
                poller.register(parent_conn.fileno(), select.POLLIN)  # EOF/errors come anyway
                self._pollers.append(poller)
            hellos = self._receive(list(range(self.num_envs)), "start", start_timeout)
            self.env_ids = [hello[0] for hello in hellos]
            self.pids = [hello[2] for hello in hellos]
            known = [i for i, hello in enumerate(hellos) if hello[1] is not None]
            self._attach({i: hellos[i][1] for i in known})
        except BaseException:
            self.close()
            raise

    # -- plumbing --------------------------------------------------------------------------------

    def _send(self, index: int, command: str, data: Any) -> None:
        """Send without raising: a worker that cannot be reached is marked dead for _receive."""
        try:
            self._conns[index].send((command, data))
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            self._mark_dead(index, self._death_reason(index))

    def _death_reason(self, index: int) -> str:
        process = self._procs[index]
        process.join(timeout=1.0)  # the exit code is set once the process is reaped
        code = process.exitcode
        how = ""
        if code is not None and code < 0:
            try:
                how = f" (killed by {signal.Signals(-code).name})"
            except ValueError:
                how = f" (killed by signal {-code})"
        return f"{self._describe(index)} worker died with exit code {code}{how}"

    def _mark_dead(self, index: int, reason: str) -> None:
        self._dead.setdefault(index, reason)
        process = self._procs[index]
        if process.is_alive():  # a hung worker would answer late and desynchronise the pipe
            process.kill()
            process.join(timeout=5.0)

    def _check_usable(self, indices: Sequence[int]) -> None:
        if self.closed:
            raise VectorEnvError("the vector env is closed")
        dead = [i for i in indices if i in self._dead]
        if dead:
            raise VectorEnvError(
                "; ".join(self._dead[i] for i in dead)
                + ". Close this vector env and make a new one.",
                indices=dead,
                env_ids=[self.env_ids[i] for i in dead],
            )

    def _receive(
        self,
        indices: list[int],
        what: str,
        timeout: float | None,
        convert: Callable[[int, Any], Any] | None = None,
    ) -> list[Any]:
        """Collect one answer per env in ``indices``; raise one error naming every failure.

        ``convert(index, answer)`` runs on every successful answer, also when others failed;
        the error keeps those converted answers in ``partial`` so no finished turn is lost.
        """
        results: dict[int, Any] = {}
        failures: list[tuple[int, str, str]] = []  # (index, message, remote traceback)
        deadline = None if timeout is None else time.monotonic() + timeout
        # One env after the other: the slowest answer bounds the wait either way, and a plain
        # poll() per pipe costs far less than building a selector over all pipes per turn.
        for i in indices:
            if i in self._dead:  # found dead while sending: nothing to wait for
                failures.append((i, self._dead[i], ""))
                continue
            message = self._answer(i, deadline)
            if message is None:
                if i not in self._dead:
                    self._mark_dead(
                        i,
                        f"{self._describe(i)} did not answer {what} within {timeout} s; "
                        "its worker was stopped",
                    )
                failures.append((i, self._dead[i], ""))
            elif message[0] == "ok":
                try:
                    results[i] = convert(i, message[1]) if convert else message[1]
                except Exception as exc:  # e.g. a frame that is not uint8 [H, W, 3]
                    failures.append(
                        (i, f"{self._describe(i)} returned a bad {what} result: {exc!r}", "")
                    )
            else:
                kind, text, remote_tb = message[1]
                failures.append(
                    (i, f"{self._describe(i)} raised {kind} in {what}: {text}", remote_tb)
                )
        if failures:
            failures.sort()
            parts = [
                message + (f"\n--- worker traceback ---\n{remote_tb}" if remote_tb else "")
                for _, message, remote_tb in failures
            ]
            raise VectorEnvError(
                "\n".join(parts),
                indices=[f[0] for f in failures],
                env_ids=[self.env_ids[f[0]] for f in failures],
                remote_tracebacks=[f[2] for f in failures],
                partial=results,
            )
        return [results[i] for i in indices]

    def _answer(self, index: int, deadline: float | None) -> tuple[str, Any] | None:
        """The worker's next message; None when it died (marked dead here) or ran out of time.

        A dead worker's pipe reads as end-of-file at once; the liveness check every
        ``_LIVENESS_CHECK_S`` covers a pipe kept open by some other process.
        """
        conn, process, poller = self._conns[index], self._procs[index], self._pollers[index]
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait_s = _LIVENESS_CHECK_S if remaining is None else min(remaining, _LIVENESS_CHECK_S)
            try:
                # a kept poll object is much cheaper than Connection.poll (a new selector each call)
                ready = bool(poller.poll(math.ceil(wait_s * 1000)))
                if ready or not process.is_alive():
                    if ready or conn.poll(0):  # an answer sent just before dying still counts
                        return conn.recv()
                    break
            except (EOFError, OSError):
                break
            if remaining is not None and remaining <= wait_s:
                return None
        self._mark_dead(index, self._death_reason(index))
        return None

    def _request(
        self,
        indices: list[int],
        what: str,
        commands: list[tuple[str, Any]],
        timeout: float | None,
        convert: Callable[[int, Any], Any] | None = None,
    ) -> list[Any]:
        self._check_usable(indices)
        # Send to every env before reading any answer, and read every answer even when some
        # fail: an unread answer would be taken for the next call's.
        for i, (command, data) in zip(indices, commands, strict=True):
            self._send(i, command, data)
        timeout = self.timeout if timeout is None else timeout
        try:
            return self._receive(indices, what, timeout, convert)
        except VectorEnvError:
            raise
        except BaseException:
            # Interrupted (Ctrl-C) with answers still unread: they would be taken for the next
            # call's, so the runner cannot be trusted any more.
            self.close(timeout=1.0)
            raise

    def _attach(self, shapes: Mapping[int, tuple[int, ...]]) -> None:
        """Give each env in ``shapes`` a fresh shared frame slot of that shape."""
        if not shapes:
            return
        chosen = sorted(shapes)
        for i in chosen:
            self._release_slot(i)
            shape = tuple(int(s) for s in shapes[i])
            shm = SharedMemory(create=True, size=max(1, int(np.prod(shape))))
            self._shms[i] = shm
            self._views[i] = np.ndarray(shape, dtype=np.uint8, buffer=shm.buf)
        self._request(
            chosen,
            "attach",
            [("attach", (self._shms[i].name, self._views[i].shape)) for i in chosen],
            None,
        )

    def _release_slot(self, index: int) -> None:
        self._views[index] = None  # numpy views pin the buffer; close() would refuse
        shm = self._shms[index]
        self._shms[index] = None
        if shm is not None:
            shm.close()
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()

    def _observe(
        self, index: int, frame: np.ndarray | None, text: str, meta: dict[str, Any]
    ) -> Observation:
        """An Observation owning its pixels; a frame that came inline gets a slot for next time."""
        if frame is None:
            view = self._views[index]
            assert view is not None, "worker sent no frame and no slot is attached"
            frame = view.copy()  # the worker overwrites the slot on the next turn
        return Observation(image=frame, text=text, meta=meta)

    # -- the API ---------------------------------------------------------------------------------

    @property
    def shm_names(self) -> list[str | None]:
        """Names of the frame slots (``None`` where none is attached yet)."""
        return [shm.name if shm is not None else None for shm in self._shms]

    @property
    def dead_workers(self) -> dict[int, str]:
        return dict(self._dead)

    def reset(
        self,
        seeds: Sequence[int | None] | int | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
        indices: Sequence[int] | None = None,
        *,
        timeout: float | None = None,
    ) -> tuple[list[Observation], list[dict[str, Any]]]:
        """Reset the chosen envs (all by default); ``seeds``/``options`` align with them."""
        chosen, seed_list, option_list = self._reset_args(seeds, options, indices)
        inline: dict[int, tuple[int, ...]] = {}

        def convert(i: int, answer: tuple) -> tuple[Observation, dict[str, Any]]:
            frame, text, meta, info = answer
            if frame is not None:
                inline[i] = frame.shape
            self._ended[i] = None
            return self._observe(i, frame, text, meta), info

        for i in chosen:
            self._ended[i] = "reset() failed"
        commands = [("reset", args) for args in zip(seed_list, option_list, strict=True)]
        results = self._request(chosen, "reset", commands, timeout, convert)
        self._attach(inline)  # after an error, the worker just keeps sending frames inline
        return [r[0] for r in results], [r[1] for r in results]

    def step(
        self,
        actions: Sequence[Any],
        indices: Sequence[int] | None = None,
        *,
        timeout: float | None = None,
    ) -> tuple[list[Observation], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """One turn of each chosen env (all by default); no env resets itself."""
        chosen = self._step_args(actions, indices)
        self._check_usable(chosen)
        self._refuse_ended(chosen, self._ended)
        inline: dict[int, tuple[int, ...]] = {}

        def convert(i: int, answer: tuple) -> tuple[Observation, float, bool, bool, dict]:
            frame, text, meta, reward, terminated, truncated, info = answer
            if frame is not None:
                inline[i] = frame.shape
            if terminated or truncated:
                self._ended[i] = "its episode has ended (" + (
                    "terminated)" if terminated else "truncated)"
                )
            return self._observe(i, frame, text, meta), reward, terminated, truncated, info

        commands = [("step", action) for action in actions]
        results = self._request(chosen, "step", commands, timeout, convert)
        self._attach(inline)  # after an error, the worker just keeps sending frames inline
        return self._pack_steps(results)

    def save_state(self, index: int, *, timeout: float | None = None) -> bytes:
        (i,) = self._indices([index])
        return self._request([i], "save_state", [("save_state", None)], timeout)[0]

    def load_state(self, index: int, state: bytes, *, timeout: float | None = None) -> None:
        (i,) = self._indices([index])
        self._request([i], "load_state", [("load_state", state)], timeout)
        self._ended[i] = None

    def call(
        self,
        name: str,
        *args: Any,
        indices: Sequence[int] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        """Call method ``name`` (or read attribute ``name``) on each chosen env.

        Arguments and results are pickled. Calling ``step``/``reset`` this way bypasses the
        episode bookkeeping; use :meth:`step` and :meth:`reset`.
        """
        chosen = self._indices(indices)
        commands = [("call", (name, args, kwargs))] * len(chosen)
        return self._request(chosen, f"call({name!r})", commands, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers (asking first, then terminating by handle) and free shared memory."""
        if self.closed:
            return
        self.closed = True
        for i, conn in enumerate(self._conns):
            if i not in self._dead and self._procs[i].is_alive():
                with contextlib.suppress(BrokenPipeError, ConnectionResetError, EOFError, OSError):
                    conn.send(("close", None))
        deadline = time.monotonic() + timeout
        for process in self._procs:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self._procs:
            if process.is_alive():
                process.terminate()
                process.join(timeout=1.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=1.0)
        self._pollers = []
        for conn in self._conns:
            conn.close()
        for i in range(len(self._shms)):
            self._release_slot(i)
        for process in self._procs:
            with contextlib.suppress(ValueError):  # still running after kill(): leave it be
                process.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close(timeout=1.0)
