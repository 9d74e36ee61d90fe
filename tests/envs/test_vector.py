"""The vector env runners: same results as in-process envs, and errors that never hang."""

from __future__ import annotations

import functools
import os
import signal
import time
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import pytest
from helpers_envs import FakeTurnEnv

from odyssey_core.envs.vector import SubprocVectorEnv, SyncVectorEnv, VectorEnvError

FAKE_ACTIONS = ["right", "right", "left", "right", "left"]


def fake_fns(count: int, **kwargs) -> list:
    return [functools.partial(FakeTurnEnv, f"fake-{i}", **kwargs) for i in range(count)]


def assert_unlinked(names: list[str | None]) -> None:
    for name in names:
        assert name is not None
        with pytest.raises(FileNotFoundError):
            SharedMemory(name=name)


def run_direct(env, seed: int, actions: list) -> list[tuple]:
    """The reference: the env driven in this process, without any runner."""
    obs, _ = env.reset(seed=seed)
    trace = [(obs.image.copy(), obs.text, 0.0, False, False)]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        trace.append((obs.image.copy(), obs.text, reward, terminated, truncated))
    return trace


def run_vector(runner, seeds: list[int], actions: list) -> list[list[tuple]]:
    obs, _ = runner.reset(seeds=seeds)
    traces = [[(o.image, o.text, 0.0, False, False)] for o in obs]
    for action in actions:
        obs, rewards, terminated, truncated, _ = runner.step([action] * runner.num_envs)
        for k, o in enumerate(obs):
            traces[k].append((o.image, o.text, rewards[k], terminated[k], truncated[k]))
    return traces


def assert_same_trace(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected)
    for turn, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert np.array_equal(g[0], e[0]), f"frame differs at turn {turn}"
        assert g[1:] == e[1:], f"text/reward/flags differ at turn {turn}"


# -- fake env: semantics and error paths ---------------------------------------------------------


@pytest.mark.parametrize("declare_shape", [True, False])
def test_subproc_matches_sync_and_direct(declare_shape: bool) -> None:
    seeds = [3, 4]
    expected = [run_direct(FakeTurnEnv(f"fake-{k}"), s, FAKE_ACTIONS) for k, s in enumerate(seeds)]
    with SyncVectorEnv(fake_fns(2, declare_shape=declare_shape)) as sync:
        sync_traces = run_vector(sync, seeds, FAKE_ACTIONS)
    with SubprocVectorEnv(fake_fns(2, declare_shape=declare_shape)) as sub:
        assert sub.num_envs == 2 and sub.env_ids == ["fake-0", "fake-1"]
        assert (None in sub.shm_names) is not declare_shape  # learnt from the first frame
        sub_traces = run_vector(sub, seeds, FAKE_ACTIONS)
        assert None not in sub.shm_names
    for k in range(2):
        assert_same_trace(sync_traces[k], expected[k])
        assert_same_trace(sub_traces[k], expected[k])
    # observations own their pixels: later turns did not overwrite earlier frames
    assert not np.array_equal(sub_traces[0][1][0], sub_traces[0][2][0])


def test_subproc_api_roundtrips() -> None:
    with SubprocVectorEnv(fake_fns(3)) as envs:
        obs, infos = envs.reset(seeds=7, options=[None, {"position": 5}, None])
        assert [o.text for o in obs] == [
            "fake-0 seed=7 turn=0 pos=0",
            "fake-1 seed=8 turn=0 pos=5",
            "fake-2 seed=9 turn=0 pos=0",
        ]
        assert [info["pid"] for info in infos] == envs.pids
        obs, rewards, terminated, truncated, infos = envs.step(["right", "left"], indices=[2, 0])
        assert rewards.tolist() == [10.0, -8.0] and rewards.dtype == np.float64
        assert terminated.dtype == bool and not terminated.any() and not truncated.any()
        assert [i["position"] for i in infos] == [1, -1]

        state = envs.save_state(1)
        envs.step(["right"], indices=[1])
        envs.load_state(1, state)
        assert envs.call("save_state", indices=[1]) == [state]
        assert envs.call("episode_len") == [5, 5, 5]  # attributes are read, not called
        # a new frame shape gets a new shared slot
        assert envs.call("resize", 8, 10, indices=[0]) == [(8, 10, 3)]
        old_names = envs.shm_names
        obs, *_ = envs.step(["right"], indices=[0])
        assert obs[0].image.shape == (8, 10, 3)
        assert envs.shm_names[0] != old_names[0] and envs.shm_names[1:] == old_names[1:]
        assert_unlinked([old_names[0]])


def test_step_after_episode_end_is_refused() -> None:
    for runner_cls in (SyncVectorEnv, SubprocVectorEnv):
        with runner_cls(fake_fns(2, episode_len=2)) as envs:
            with pytest.raises(VectorEnvError, match=r"env 0 \(fake-0\) cannot step.*reset"):
                envs.step(["right", "right"])  # never reset
            envs.reset()
            envs.step(["right", "right"])
            _, _, terminated, _, _ = envs.step(["right", "right"], indices=[0, 1])
            assert terminated.all()
            envs.reset(indices=[1])
            with pytest.raises(VectorEnvError, match="episode has ended") as err:
                envs.step(["right", "right"])
            assert err.value.indices == [0]
            # env 1 did not move: the batch was refused as a whole
            obs, *_ = envs.step(["right"], indices=[1])
            assert obs[0].text == "fake-1 seed=0 turn=1 pos=1"


def test_worker_exception_names_env_and_runner_stays_usable() -> None:
    with SubprocVectorEnv(fake_fns(3)) as envs:
        envs.reset()
        with pytest.raises(VectorEnvError) as err:
            envs.step(["right", "boom", "right"])
        message = str(err.value)
        assert err.value.indices == [1] and err.value.env_ids == ["fake-1"]
        assert "env 1 (fake-1) raised ValueError in step: fake-1: boom at turn 0" in message
        assert "Traceback" in message and "helpers_envs.py" in message
        assert isinstance(err.value, RuntimeError)
        # the envs that did step keep their turn
        assert sorted(err.value.partial) == [0, 2]
        assert err.value.partial[2][0].text == "fake-2 seed=0 turn=1 pos=1"
        obs, _rewards, *_ = envs.step(["right", "right", "right"])
        assert [o.text.split()[-2:] for o in obs] == [
            ["turn=2", "pos=2"],
            ["turn=1", "pos=1"],
            ["turn=2", "pos=2"],
        ]
    with SyncVectorEnv(fake_fns(3)) as sync:
        sync.reset()
        with pytest.raises(VectorEnvError, match=r"env 1 \(fake-1\) raised ValueError") as err:
            sync.step(["right", "boom", "right"])
        assert isinstance(err.value.__cause__, ValueError)
        assert sorted(err.value.partial) == [0, 2]


def test_env_that_fails_to_build() -> None:
    fns = [*fake_fns(1), functools.partial(FakeTurnEnv, "broken", fail_on_init=True)]
    start = time.monotonic()
    with pytest.raises(VectorEnvError, match=r"env 1 .*RuntimeError.*could not start"):
        SubprocVectorEnv(fns)
    assert time.monotonic() - start < 10
    with pytest.raises(TypeError, match="cannot be pickled"):
        SubprocVectorEnv([lambda: FakeTurnEnv()])


def test_killed_worker_is_reported_not_hung() -> None:
    envs = SubprocVectorEnv(fake_fns(3), timeout=10)
    names = envs.shm_names
    try:
        envs.reset()
        os.kill(envs.pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(VectorEnvError, match=r"env 1 \(fake-1\) worker died with exit code -9"):
            envs.step(["right"] * 3)
        assert time.monotonic() - start < 5
        assert 1 in envs.dead_workers
        # the dead env keeps failing fast; the others still work
        with pytest.raises(VectorEnvError, match="worker died"):
            envs.reset(indices=[1])
        obs, *_ = envs.step(["right", "right"], indices=[0, 2])
        assert obs[1].text == "fake-2 seed=0 turn=2 pos=2"
        # a worker that exits by itself mid-turn is reported with its exit code
        with pytest.raises(VectorEnvError, match=r"env 2 \(fake-2\) worker died with exit code 3"):
            envs.step(["exit"], indices=[2])
    finally:
        envs.close()
        envs.close()  # idempotent
    assert envs.closed
    assert_unlinked(names)


def test_hung_worker_times_out() -> None:
    with SubprocVectorEnv(fake_fns(2), timeout=5) as envs:
        envs.reset()
        start = time.monotonic()
        with pytest.raises(
            VectorEnvError, match=r"env 0 \(fake-0\) did not answer step within 0.3"
        ):
            envs.step([("sleep", 30), "right"], timeout=0.3)
        assert time.monotonic() - start < 5
        assert list(envs.dead_workers) == [0]
        obs, *_ = envs.step(["right"], indices=[1])
        assert obs[0].text == "fake-1 seed=0 turn=2 pos=2"


def test_close_is_idempotent_and_frees_everything() -> None:
    envs = SubprocVectorEnv(fake_fns(2), context="spawn")
    envs.reset()
    names, processes = envs.shm_names, list(envs._procs)
    envs.close()
    envs.close()
    assert_unlinked(names)
    with pytest.raises(ValueError):  # closed Process objects: their workers were reaped
        processes[0].is_alive()
    with pytest.raises(VectorEnvError, match="closed"):
        envs.step(["right", "right"])


# -- the real env --------------------------------------------------------------------------------


def _odland_rom_present() -> bool:
    from odyssey_core.envs.pyboy.odland import packaged_rom

    return packaged_rom().is_file()


needs_odland = pytest.mark.skipif(
    not _odland_rom_present(),
    reason="the packaged odland ROM is missing (odyssey_core/envs/pyboy/roms/odland.gb); "
    "build it with `make rom-update`",
)

ODLAND_ACTIONS = [("right",)] * 6 + [("a", "right")] + [("right",)] * 4 + [("left",), ("b",)]


@needs_odland
def test_odland_subproc_matches_sync_and_direct() -> None:
    from odyssey_core.envs.registry import make_env

    kwargs = {"max_turns": 50}
    expected = run_direct(make_env("odland-1-1", **kwargs), 0, ODLAND_ACTIONS)
    with SyncVectorEnv(["odland-1-1"] * 2, env_kwargs=kwargs) as sync:
        sync_traces = run_vector(sync, [0, 1], ODLAND_ACTIONS)
    with SubprocVectorEnv(["odland-1-1", ("odland-1-1", kwargs)], env_kwargs=kwargs) as sub:
        assert sub.env_ids == ["odland-1-1", "odland-1-1"]
        sub_traces = run_vector(sub, [0, 1], ODLAND_ACTIONS)
        # save/load through the workers reproduces the same continuation
        state = sub.save_state(0)
        after_a = sub.step([("right",)], indices=[0])[0][0].image
        sub.load_state(0, state)
        after_b = sub.step([("right",)], indices=[0])[0][0].image
        assert np.array_equal(after_a, after_b)
    for trace in (*sync_traces, *sub_traces):
        assert_same_trace(trace, expected)
    frames = [t[0] for t in expected]
    assert any(not np.array_equal(frames[0], f) for f in frames[1:]), "the screen never changed"
