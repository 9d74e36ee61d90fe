"""Benchmark: what Prefect orchestration costs on the tiny pipeline.

    .venv/bin/python bench/pipeline_overhead.py [--rounds 2] [--target 1.10] [--keep DIR]

Runs the whole tiny pipeline (``configs/odysseus/pipeline/tiny.yaml``: 20 frames, 4 SFT steps, 1 RL
step, 2 eval runs of 3 turns) two ways, each from scratch in a fresh run_dir and a fresh
Python process, in interleaved rounds (direct, flow, flow, direct, ...):

* ``flow``: the ``train-odysseus`` Prefect flow (tasks, input cache, persisted results, state
  reports) against a real ``prefect server`` subprocess with a private home and SQLite DB;
* ``direct``: the same ``odyssey_core.recipes.odysseus.pipeline.stage_*`` functions called in
  order, under the same MLflow parent run the flow opens, so the difference is Prefect's alone.

The timed span is the pipeline call inside the child (imports and interpreter start are
excluded and reported apart as process wall time). Prints the medians and the ratio
flow/direct with PASS when it is at most ``--target``. Not a test: it takes minutes.

Each child also times every stage function (and, in the flow, every task call around it), so
the output splits each run into stage work (the same in both modes: its spread is the shared
machine's noise) and the time outside it (MLflow parent run, Prefect flow/task bookkeeping):
the flow's extra time outside the stages is Prefect's cost, measured without that noise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "GX_ANALYTICS_ENABLED": "false",
}


# -- child: one pipeline run ----------------------------------------------------------------


def _direct(run_dir: Path) -> dict:
    from odyssey_core.recipes.odysseus import pipeline as p
    from odyssey_core.stages import parent_run

    cfg = p.load_pipeline_config("tiny", {"run_dir": str(run_dir)})
    with parent_run(cfg, "train-odysseus") as parent:
        curate = p.stage_curate(cfg, parent_run_id=parent)
        sft = p.stage_sft(cfg, curate["dataset_uri"], parent_run_id=parent)
        rl = p.stage_rl(cfg, sft["model_uri"], parent_run_id=parent)
        evaluation = p.stage_evaluate(cfg, rl["checkpoint_uri"], parent_run_id=parent)
        return p.stage_promote(
            cfg, rl["checkpoint_uri"], evaluation, sft["base_model_uri"], parent_run_id=parent
        )


def _flow(run_dir: Path) -> dict:
    from flows.odysseus import train_odysseus_flow

    return train_odysseus_flow(preset="tiny", overrides={"run_dir": str(run_dir)})["promote"]


STAGE_FUNCS = (
    "stage_record",
    "stage_sample",
    "stage_annotate",
    "stage_validate",
    "stage_build_dataset",
    "stage_sft",
    "stage_rl",
    "stage_evaluate",
    "stage_promote",
)


def _instrument() -> tuple[dict[str, float], dict[str, float]]:
    """Time every stage function (both modes) and, in the flow, every task call around it.

    The tasks call ``odyssey_core.recipes.odysseus.pipeline.stage_*`` through the module and
    ``_chain`` calls the tasks through ``flows.odysseus``'s globals, so wrapping those names
    times the same calls without touching the Task objects (their cache keys and options stay
    as they are).
    """
    import flows.odysseus as flow_module
    import odyssey_core.recipes.odysseus.pipeline as core

    stage_s: dict[str, float] = {}
    task_s: dict[str, float] = {}

    def timed(fn, name: str, into: dict[str, float]):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                into[name] = into.get(name, 0.0) + time.perf_counter() - start

        return wrapper

    for name in STAGE_FUNCS:
        setattr(core, name, timed(getattr(core, name), name, stage_s))
    for name in dir(flow_module):
        if name.endswith("_task"):
            setattr(flow_module, name, timed(getattr(flow_module, name), name, task_s))
    return stage_s, task_s


def child(mode: str, run_dir: Path) -> None:
    # imports outside the timed span, the same for both modes
    import flows.odysseus  # noqa: F401
    import odyssey_core.recipes.odysseus.pipeline  # noqa: F401

    stage_s, task_s = _instrument()
    start = time.perf_counter()
    promote = (_flow if mode == "flow" else _direct)(run_dir)
    seconds = time.perf_counter() - start
    assert promote["version"] == 1, promote
    assert len(stage_s) == len(STAGE_FUNCS), sorted(stage_s)
    result = {"mode": mode, "seconds": seconds, "stages": stage_s, "tasks": task_s}
    print("RESULT " + json.dumps(result), flush=True)


# -- parent: the server and the rounds ----------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(home: Path, env: dict[str, str]) -> subprocess.Popen:
    prefect = str(Path(sys.executable).with_name("prefect"))
    log = (home / "server.log").open("w")
    port = env["PREFECT_API_URL"].rsplit(":", 1)[1].split("/")[0]
    proc = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", port],
        cwd=home,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited; see {home / 'server.log'}")
        try:
            with urllib.request.urlopen(f"{env['PREFECT_API_URL']}/health", timeout=2) as r:
                if json.loads(r.read()) is True:
                    return proc
        except OSError:
            pass
        time.sleep(0.5)
    stop(proc)
    raise RuntimeError("prefect server did not become healthy")


def stop(proc: subprocess.Popen) -> None:
    """End the server (and its children, its own session) by PID."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(mode: str, run_dir: Path, env: dict[str, str], log: Path) -> tuple[dict, float]:
    start = time.perf_counter()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--run-dir"]
    with log.open("w") as out:
        done = subprocess.run(
            [*cmd, str(run_dir)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    wall = time.perf_counter() - start
    lines = [x for x in log.read_text().splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} run failed (rc {done.returncode}); see {log}")
    return json.loads(lines[-1][len("RESULT ") :]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each mode")
    parser.add_argument("--target", type=float, default=1.10, help="max flow/direct ratio")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    parser.add_argument("--child", choices=["flow", "direct"], help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.run_dir)
        return

    work = args.keep or Path(tempfile.mkdtemp(prefix="pipeline-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    home = work / "prefect-home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, **QUIET)
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=f"http://127.0.0.1:{_free_port()}/api",
        PREFECT_API_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{home / 'prefect.db'}",
        PREFECT_UI_ENABLED="false",
        PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="false",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    print(f"work dir {work}; prefect server at {env['PREFECT_API_URL']}", flush=True)
    server = start_server(home, env)
    timings: dict[str, list[float]] = {"direct": [], "flow": []}
    walls: dict[str, list[float]] = {"direct": [], "flow": []}
    outside: dict[str, list[float]] = {"direct": [], "flow": []}  # not in a stage function
    stage_sums: list[float] = []
    wrap: list[float] = []  # flow: task call minus the stage function inside it, all tasks
    try:
        for i in range(args.rounds):
            # ABBA order, so neither mode always runs first on a warm page cache
            order = ("direct", "flow") if i % 2 == 0 else ("flow", "direct")
            for mode in order:
                run_dir = work / f"{mode}-{i}"
                res, wall = run_child(mode, run_dir, env, work / f"{mode}-{i}.log")
                seconds, stages = res["seconds"], sum(res["stages"].values())
                timings[mode].append(seconds)
                walls[mode].append(wall)
                outside[mode].append(seconds - stages)
                stage_sums.append(stages)
                line = (
                    f"round {i + 1} {mode:6s} {seconds:7.1f} s (process {wall:.1f} s; stage "
                    f"functions {stages:.1f} s, outside them {seconds - stages:.2f} s"
                )
                if mode == "flow":
                    per_task = sum(res["tasks"].values()) - stages
                    wrap.append(per_task)
                    line += f"; task wrappers {per_task:.2f} s over {len(res['tasks'])} tasks"
                print(line + ")", flush=True)
                print("    " + "  ".join(f"{k[6:]} {v:.2f}" for k, v in res["stages"].items()))
    finally:
        stop(server)

    direct, flow = (statistics.median(timings[m]) for m in ("direct", "flow"))
    ratio = flow / direct
    print(
        f"median direct {direct:.1f} s, flow {flow:.1f} s (process wall: "
        f"{statistics.median(walls['direct']):.1f} s, {statistics.median(walls['flow']):.1f} s)"
    )
    # The stage functions do the same work in both modes, so their run-to-run spread is the
    # machine's noise; Prefect's cost is what the flow spends outside them beyond the direct run.
    out_d, out_f = (statistics.median(outside[m]) for m in ("direct", "flow"))
    work_s = statistics.median(stage_sums)
    print(
        f"outside the stage functions (median): direct {out_d:.2f} s, flow {out_f:.2f} s; "
        f"Prefect's share {out_f - out_d:.2f} s, of which inside task calls "
        f"{statistics.median(wrap):.2f} s over 9 tasks; stage functions median {work_s:.1f} s "
        f"(range {min(stage_sums):.1f}-{max(stage_sums):.1f} s)"
    )
    print(
        f"noise-adjusted ratio (median stage work + each mode's outside time): "
        f"{(work_s + out_f) / (work_s + out_d):.3f}"
    )
    verdict = "PASS" if ratio <= args.target else "FAIL"
    print(f"ratio flow/direct {ratio:.3f} (target <= {args.target:.2f}): {verdict}")


if __name__ == "__main__":
    main()
