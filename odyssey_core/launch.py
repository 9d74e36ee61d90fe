"""Start training under a distributed launcher (``torchrun`` or ``deepspeed``) and watch it.

A training preset's ``launch`` section (:class:`LaunchSettings`) says how many processes a run
takes. One process (the default) trains in the caller's process, no launcher involved. More
than one: the pipeline's RL and SFT stages start ``odyssey train`` / ``odyssey sft`` as a
launcher subprocess (:func:`launcher_command` builds the command line), stream its output line
by line into the caller's log, follow the run's ``metrics.jsonl`` for its metrics, and raise
:class:`LaunchError` with the failing rank's last lines when the launcher exits non-zero
(:func:`run_launcher`). The launcher itself never restarts a failed run (``--max_restarts
0``): a retry is the whole stage's, and it resumes from the last complete checkpoint.

The command lines, for ``odyssey train --preset p.yaml --out run``:

    torchrun, one node:   python -m torch.distributed.run --nproc_per_node 8 --nnodes 1
                            --standalone --max_restarts 0 --tee 3
                            -m odyssey_core.cli train --preset p.yaml --out run
    torchrun, node r of M: ... --nproc_per_node 8 --nnodes M --node_rank r
                            --master_addr HOST --master_port PORT --max_restarts 0 --tee 3 ...
                            (the same command on every node, each with its own node_rank)
    deepspeed:            deepspeed --num_gpus 8 --num_nodes M [--hostfile H]
                            --master_addr HOST --master_port PORT --no_local_rank
                            --module odyssey_core.cli train --preset p.yaml --out run
                            (from node 0 only: DeepSpeed starts the other nodes over ssh)

Every rank must see the same run folder (a shared file system across nodes).
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import click
from pydantic import Field, model_validator

from odyssey_core.common.metrics_log import parse_metrics_line
from odyssey_core.config import StrictModel

__all__ = [
    "LAUNCH_PRESET",
    "LaunchError",
    "LaunchSettings",
    "MetricsFollower",
    "launch_error",
    "launched_run_options",
    "launcher_command",
    "local_rank_option",
    "odyssey_command",
    "run_launcher",
    "run_training",
    "sft_args",
    "train_args",
    "write_preset",
]

#: ``torchrun --tee`` prefixes each worker line with its local rank: ``[default3]:...``
_RANK_PREFIX = re.compile(r"^\[default(\d+)\]:")
_ROOT_CAUSE_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_ROOT_CAUSE_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)")
TAIL_LINES = 40  # lines of the failing rank's output that a LaunchError quotes
LAUNCH_PRESET = "launch-preset.yaml"  # in a run folder: the settings a launched run loads


class LaunchSettings(StrictModel):
    """How many processes train, and how they are started (``launch:`` in a preset)."""

    nproc_per_node: int = Field(default=1, ge=1, description="processes per node (GPUs)")
    nnodes: int = Field(default=1, ge=1, description="nodes")
    launcher: Literal["torchrun", "deepspeed"] = Field(
        default="torchrun", description="torchrun (torch.distributed.run) or deepspeed"
    )
    node_rank: int = Field(
        default=0, ge=0, description="this node's index, 0..nnodes-1 (torchrun, several nodes)"
    )
    rdzv_endpoint: str | None = Field(
        default=None,
        description="HOST:PORT of node 0, where the nodes meet (needed for several nodes)",
    )
    hostfile: Path | None = Field(
        default=None, description="deepspeed: the hostfile naming the nodes and their slots"
    )

    @model_validator(mode="after")
    def _multi_node(self) -> LaunchSettings:
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} is not below nnodes {self.nnodes}")
        if self.nnodes > 1 and self.rdzv_endpoint is None:
            raise ValueError("several nodes need rdzv_endpoint: HOST:PORT of node 0")
        if self.rdzv_endpoint is not None and not re.fullmatch(r"[^:\s]+:\d+", self.rdzv_endpoint):
            raise ValueError(f"rdzv_endpoint must be HOST:PORT, got {self.rdzv_endpoint!r}")
        return self

    @property
    def processes(self) -> int:
        """The world size: every node's processes."""
        return self.nproc_per_node * self.nnodes

    @property
    def launched(self) -> bool:
        """Whether training needs a launcher (more than one process)."""
        return self.processes > 1


def odyssey_command(command: str, **options: Any) -> list[str]:
    """The arguments of ``odyssey <command>``: ``--name value`` per option in order
    (underscores become dashes), ``--name`` alone for True, nothing for False or None."""
    args = [command]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False and value is not None:
            args += [flag, str(value)]
    return args


def launcher_command(
    launch: LaunchSettings, args: Sequence[str], *, python: str | None = None
) -> list[str]:
    """The launcher's command line that runs ``odyssey <args>`` on every process of this node
    (see the module docstring). ``python`` is the interpreter (default: this one; ``deepspeed``
    is the script beside it)."""
    python = python or sys.executable
    module = "odyssey_core.cli"
    if launch.rdzv_endpoint is not None:
        host, port = launch.rdzv_endpoint.rsplit(":", 1)
    if launch.launcher == "torchrun":
        cmd = [python, "-m", "torch.distributed.run"]
        cmd += ["--nproc_per_node", str(launch.nproc_per_node), "--nnodes", str(launch.nnodes)]
        if launch.nnodes == 1 and launch.rdzv_endpoint is None:
            cmd.append("--standalone")  # a free local port, nothing to configure
        else:
            cmd += ["--node_rank", str(launch.node_rank)]
            cmd += ["--master_addr", host, "--master_port", port]
        cmd += ["--max_restarts", "0", "--tee", "3", "-m", module]
        return cmd + list(args)
    cmd = [str(Path(python).with_name("deepspeed"))]
    cmd += ["--num_gpus", str(launch.nproc_per_node), "--num_nodes", str(launch.nnodes)]
    if launch.hostfile is not None:
        cmd += ["--hostfile", str(launch.hostfile)]
    if launch.rdzv_endpoint is not None:
        cmd += ["--master_addr", host, "--master_port", port]
    cmd += ["--no_local_rank", "--module", module]
    return cmd + list(args)


class LaunchError(RuntimeError):
    """The launcher exited non-zero: some rank failed. ``rank`` is the failing one when the
    launcher said which (else None), ``exitcode`` its exit code (negative: the signal that
    killed it), ``tail`` its last lines."""

    def __init__(self, message: str, *, rank: int | None, exitcode: int, tail: list[str]) -> None:
        super().__init__(message)
        self.rank, self.exitcode, self.tail = rank, exitcode, tail


class MetricsFollower:
    """Reports each new record of a run's ``metrics.jsonl`` to ``on_metrics(record)`` as the
    run writes it, each line once. Records already in the file when following starts (an
    earlier attempt's) are not reported again; a resumed run that drops and rewrites steps
    gets its rewritten steps reported (they are new measurements). ``poll`` rereads the file
    at most every ``interval`` seconds unless forced."""

    def __init__(
        self,
        path: Path,
        on_metrics: Callable[[dict[str, Any]], None],
        *,
        interval: float = 1.0,
    ) -> None:
        self.path, self.on_metrics, self.interval = Path(path), on_metrics, interval
        self.seen = set(self._lines())
        self.polled = 0.0

    def _lines(self) -> list[str]:
        if not self.path.is_file():
            return []
        text = self.path.read_text()
        complete = text[: text.rfind("\n") + 1]  # a line still being written waits
        return [line for line in complete.splitlines() if line.strip()]

    def poll(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.polled < self.interval:
            return
        self.polled = now
        for line in self._lines():
            if line not in self.seen:
                self.seen.add(line)
                record = parse_metrics_line(line)
                if record is not None:  # a line a crash tore is not a measurement
                    self.on_metrics(record)


def launch_error(
    returncode: int, lines: Sequence[str], tails: Mapping[int, Sequence[str]]
) -> LaunchError:
    """What went wrong in a launch that exited with ``returncode``: the failing rank and its
    exit code from torchrun's "Root Cause" summary in ``lines`` (the launcher's output), and
    that rank's last lines from ``tails`` (local rank -> its lines); without a summary, the
    launcher's own last lines."""
    rank = local = exitcode = None
    text = "\n".join(lines)
    cause = text.rfind("Root Cause")
    if cause >= 0:
        found = _ROOT_CAUSE_RANK.search(text, cause)
        code = _ROOT_CAUSE_EXIT.search(text, cause)
        if found is not None:
            rank, local = int(found.group(1)), int(found.group(2))
        if code is not None:
            exitcode = int(code.group(1))
    how = ""
    if exitcode is not None:
        how = f" with exit code {exitcode}"
        if exitcode < 0:
            how += f" ({signal.Signals(-exitcode).name})"
    who = f"rank {rank}" if rank is not None else "a rank"
    tail = list(tails.get(local, ())) if local is not None else []
    source = f"{who}'s last lines" if tail else "the launcher's last lines"
    tail = tail or list(lines)[-TAIL_LINES:]
    message = (
        f"training failed: {who} exited{how}; the launcher exited with {returncode}.\n"
        f"{source}:\n" + "\n".join(tail)
    )
    return LaunchError(
        message, rank=rank, exitcode=returncode if exitcode is None else exitcode, tail=tail
    )


def run_launcher(
    cmd: Sequence[str],
    *,
    emit: Callable[[str], None],
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> None:
    """Run a launcher command to its end: every output line (stdout and stderr, in order)
    goes to ``emit`` and then ``on_line``; a non-zero exit raises :class:`LaunchError`. If the
    caller is interrupted, the launcher's process group is stopped (SIGTERM, then SIGKILL)."""
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,  # its own process group: stopped as a whole
    )
    lines: collections.deque[str] = collections.deque(maxlen=400)
    tails: dict[int, collections.deque[str]] = collections.defaultdict(
        lambda: collections.deque(maxlen=TAIL_LINES)
    )
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            lines.append(line)
            prefix = _RANK_PREFIX.match(line)
            if prefix is not None:
                tails[int(prefix.group(1))].append(line[prefix.end() :])
            emit(line)
            if on_line is not None:
                on_line(line)
        returncode = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if returncode != 0:
        raise launch_error(returncode, list(lines), tails)


def run_training(
    launch: LaunchSettings,
    args: Sequence[str],
    *,
    emit: Callable[[str], None],
    metrics_file: Path | None = None,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run ``odyssey <args>`` under the launcher ``launch`` names, streaming its output to
    ``emit`` and each new step of ``metrics_file`` (what rank 0 writes) to ``on_metrics``."""
    follower = None
    if metrics_file is not None and on_metrics is not None:
        follower = MetricsFollower(metrics_file, on_metrics)
    run_launcher(
        launcher_command(launch, args),
        emit=emit,
        on_line=None if follower is None else (lambda _line: follower.poll()),
        env=env,
    )
    if follower is not None:
        follower.poll(force=True)  # the records written after the last poll


# -- the launchers' conventions on our side ------------------------------------------------------


def _take_local_rank(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    """``--local_rank N`` from the deepspeed launcher: this process's rank on its node (the
    launcher's ``LOCAL_RANK`` variable wins when both are there)."""
    if value is not None:
        os.environ.setdefault("LOCAL_RANK", str(value))
    return value


def local_rank_option(command: Any) -> Any:
    """The launchers' ``--local_rank`` / ``--local-rank`` option (hidden, read into
    ``LOCAL_RANK``)."""
    return click.option(
        "--local_rank",
        "--local-rank",
        "local_rank",
        type=int,
        default=None,
        hidden=True,
        expose_value=False,
        callback=_take_local_rank,
        help="set by the deepspeed launcher",
    )(command)


def launched_run_options(command: Any) -> Any:
    """What every command a launcher or a pipeline starts takes: ``--out`` (the run folder),
    ``--resume`` (from its ``checkpoints/latest``; the pipelines always pass it, see
    :func:`train_args`) and the launchers' hidden ``--local_rank``."""
    out = click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path))
    resume = click.option("--resume", is_flag=True, help="continue from OUT/checkpoints/latest")
    return out(resume(local_rank_option(command)))


# -- what the pipelines launch ------------------------------------------------------------------


def write_preset(settings: StrictModel, path: Path) -> Path:
    """``settings`` as a preset file the launched command loads back (JSON is YAML)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings.model_dump(mode="json"), indent=2, sort_keys=True))
    return path


def train_args(recipe: str, preset: Path, out_dir: Path) -> list[str]:
    """``odyssey train`` of a pipeline's RL stage: always resuming (a retried stage continues
    from the last complete checkpoint)."""
    return odyssey_command("train", recipe=recipe, preset=preset, out=out_dir, resume=True)


def sft_args(
    preset: Path, dataset: Path, model: Path, out_dir: Path, system_prompts: Path | None = None
) -> list[str]:
    """``odyssey sft`` of a pipeline's SFT stage, resuming like :func:`train_args`."""
    return odyssey_command(
        "sft",
        preset=preset,
        dataset=dataset,
        model=model,
        out=out_dir,
        resume=True,
        system_prompts=system_prompts,
    )
