"""Ranks, devices and the few collectives the engine needs, on ``torch.distributed``.

A process learns its place from the launcher's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``, set by ``torchrun`` and by the ``deepspeed``
launcher). Without a launcher it is rank 0 of a world of one, and when something needs a
process group there (DeepSpeed always does) :func:`init_process_group` sets up that
one-process world explicitly on a free loopback port, so nothing falls back to MPI discovery.

The collectives here are what the trainer adds to a one-process run, and each one is a no-op
in a world of one:

- :func:`gather_turns`: every rank's turn-level scalars (what the advantage estimators read),
  joined in rank order, so batch-wide statistics (a sigma over the batch, group statistics)
  are taken over the union of the ranks' turns;
- :func:`average_gradients`: the mean gradient over ranks (one flat all-reduce), for the
  plain optimiser; DeepSpeed reduces its own;
- :func:`average_state`: the mean of the floating tensors of a state (a value network that
  fits on its own rank's turns stays identical on every rank);
- :func:`max_over_ranks`, :func:`sum_over_ranks`, :func:`mean_over_ranks`, :func:`barrier`.

Collectives run on the process group's device: the current CUDA device under NCCL, the CPU
under gloo.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from odyssey_core.rollout.batch import TurnBatch

__all__ = [
    "UNION_EXTRAS",
    "GatheredTurns",
    "World",
    "average_gradients",
    "average_state",
    "backend_for",
    "barrier",
    "comm_device",
    "current_world",
    "free_port",
    "gather_json",
    "gather_turns",
    "init_process_group",
    "join_launched_world",
    "launcher_world",
    "leave_process_group",
    "max_over_ranks",
    "mean_over_ranks",
    "rank_device",
    "rank_seed",
    "split_evenly",
    "sum_over_ranks",
]

log = logging.getLogger(__name__)

#: the per-turn extras that estimators read (ESPO's stage rewards); the gathered batch keeps
#: only these, not the responses and env facts every turn carries
UNION_EXTRAS = ("accuracy", "intent_acc")


@dataclass(frozen=True)
class World:
    """Where this process stands: its global rank, the number of processes, its rank on this
    node (which accelerator it drives)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, calls callbacks and writes what is shared."""
        return self.rank == 0


def launcher_world() -> World | None:
    """The world a launcher described in the environment, or None when no launcher ran us."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank = int(os.environ["RANK"])
    return World(rank, int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", rank)))


def current_world() -> World:
    """The process group's world when one is set up, else the launcher's, else a world of one."""
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
        local = int(os.environ.get("LOCAL_RANK", rank))
        return World(rank, dist.get_world_size(), local)
    return launcher_world() or World()


def backend_for(device: str | torch.device) -> str:
    """NCCL for CUDA devices, gloo for the CPU."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def free_port() -> int:
    """A TCP port nothing listens on right now (for a one-process world's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_process_group(device: str | torch.device = "cpu") -> World:
    """Set up this process's group once (later calls return the world as it is).

    Under a launcher: ``env://`` from its variables. Without one: the variables of a
    one-process world are set first (rank 0 of 1, ``MASTER_ADDR`` 127.0.0.1 and a free port),
    so that ``deepspeed.init_distributed`` afterwards finds a complete environment and an
    initialised group instead of trying MPI discovery. On CUDA the current device becomes
    ``cuda:LOCAL_RANK`` before the group starts, so ``"cuda"`` means this rank's GPU.
    """
    if dist.is_initialized():
        return current_world()
    world = launcher_world()
    if world is None:
        os.environ.update(
            RANK="0",
            LOCAL_RANK="0",
            WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
        )
        world = World()
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(world.local_rank)
    dist.init_process_group(backend, init_method="env://")
    log.info("rank %d of %d (local %d) on %s", world.rank, world.size, world.local_rank, backend)
    return current_world()


def join_launched_world(device: str | torch.device = "cpu") -> World:
    """The world of this process; a launcher's world of several processes is joined (its
    process group set up) if nobody did yet. A process without a launcher stays alone."""
    world = launcher_world()
    if world is not None and world.size > 1 and not dist.is_initialized():
        return init_process_group(device)
    return current_world()


def leave_process_group() -> None:
    """End this process's part of its process group, if it joined one (every rank first
    waits for the others, so none exits while another still talks to it)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def rank_device(requested: str, world: World | None = None) -> str:
    """This rank's device for a preset's ``device``: ``cuda:LOCAL_RANK`` when the preset asks
    for CUDA and CUDA is there, ``cpu`` when it is not; anything else as asked."""
    if not requested.startswith("cuda"):
        return requested
    if not torch.cuda.is_available():
        log.warning("the preset asks for %s but CUDA is not available: using the CPU", requested)
        return "cpu"
    world = world or current_world()
    return f"cuda:{world.local_rank}"


def rank_seed(seed: int, rank: int) -> int:
    """The collection seed of ``rank`` for a step whose seed is ``seed``: rank 0 keeps it
    (so a one-process run collects exactly as it always did), every other rank gets its own
    stream mixed from (seed, rank)."""
    if rank == 0:
        return int(seed)
    words = [int(seed) % 2**64, int(rank), 0x5A4D]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint32)[0])


def split_evenly(total: int, world: World) -> tuple[int, int]:
    """``(start, count)`` of this rank's share of ``total`` items: every rank gets
    ``total // size``, and the first ``total % size`` ranks one more."""
    base, extra = divmod(int(total), world.size)
    start = world.rank * base + min(world.rank, extra)
    return start, base + (1 if world.rank < extra else 0)


# -- collectives ----------------------------------------------------------------------------------


def comm_device() -> torch.device:
    """Where collective tensors live: this rank's GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Wait for every rank (nothing to wait for alone)."""
    if _distributed():
        dist.barrier()


def max_over_ranks(value: int) -> int:
    """The largest ``value`` any rank holds."""
    if not _distributed():
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.long, device=comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _gather_rows(rows: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``[n_r, C]`` table (n_r may differ, dtype and C may not), in rank order."""
    device = comm_device()
    count = torch.tensor([rows.shape[0]], dtype=torch.long, device=device)
    counts = [torch.zeros_like(count) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    padded = torch.zeros((max(sizes), rows.shape[1]), dtype=rows.dtype, device=device)
    padded[: rows.shape[0]] = rows.to(device)
    tables = [torch.zeros_like(padded) for _ in sizes]
    dist.all_gather(tables, padded)
    return [t[:n].cpu() for t, n in zip(tables, sizes, strict=True)]


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.tolist()
    raise TypeError(f"not JSON-able: {type(value).__name__}")


def gather_json(obj: Any) -> list[Any]:
    """Every rank's JSON-able ``obj``, in rank order (sent as UTF-8 JSON, never pickled)."""
    if not _distributed():
        return [obj]
    data = bytearray(json.dumps(obj, default=_json_default).encode())
    rows = torch.frombuffer(data, dtype=torch.uint8).reshape(-1, 1)
    return [json.loads(t.flatten().numpy().tobytes().decode()) for t in _gather_rows(rows)]


def sum_over_ranks(values: Mapping[str, float]) -> dict[str, float]:
    """Per key, the sum over the ranks that have it."""
    out: dict[str, float] = {}
    for part in gather_json(dict(values)):
        for key, value in part.items():
            out[key] = out.get(key, 0.0) + float(value)
    return out


def mean_over_ranks(metrics: Mapping[str, float]) -> dict[str, float]:
    """Per key, the mean over the ranks that have it (a rank without a level's episodes has
    no metric for that level). A world of one gets its metrics back unchanged."""
    if not _distributed():
        return dict(metrics)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for part in gather_json(dict(metrics)):
        for key, value in part.items():
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


def average_gradients(params: Sequence[torch.Tensor]) -> None:
    """Replace each gradient by its mean over ranks: one all-reduce of all gradients flattened
    into one float32 buffer (with one presence flag per tensor, so a tensor that got no
    gradient on any rank keeps ``grad = None``, and one that got it somewhere is averaged
    with zeros from the others)."""
    if not _distributed() or not params:
        return
    device = comm_device()
    pieces = []
    for p in params:
        grad = p.grad
        pieces.append(
            torch.zeros(p.numel(), device=device)
            if grad is None
            else grad.detach().flatten().to(device, torch.float32)
        )
    flags = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
    flat = torch.cat([*pieces, flags])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    present = flat[-len(params) :] > 0
    offset = 0
    for p, seen in zip(params, present.tolist(), strict=True):
        chunk = flat[offset : offset + p.numel()]
        offset += p.numel()
        if seen:
            p.grad = chunk.view_as(p).to(p.device, p.dtype).clone()


def average_state(state: Any) -> Any:
    """``state`` (nested dicts, lists, tuples) with every floating-point tensor replaced by its
    mean over ranks; other entries (integer tensors, generator states, numbers) as they are."""
    if not _distributed():
        return state
    tensors: list[torch.Tensor] = []

    def collect(value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            tensors.append(value)
        elif isinstance(value, Mapping):
            for item in value.values():
                collect(item)
        elif isinstance(value, list | tuple):
            for item in value:
                collect(item)

    collect(state)
    if not tensors:
        return state
    device = comm_device()
    flat = torch.cat([t.detach().flatten().to(device, torch.float64) for t in tensors])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    means: dict[int, torch.Tensor] = {}
    offset = 0
    for t in tensors:
        means[id(t)] = flat[offset : offset + t.numel()].view_as(t).to(t.device, t.dtype)
        offset += t.numel()

    def rebuild(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and id(value) in means:
            return means[id(value)]
        if isinstance(value, Mapping):
            return type(value)((k, rebuild(v)) for k, v in value.items())
        if isinstance(value, list | tuple):
            return type(value)(rebuild(v) for v in value)
        return value

    return rebuild(state)


# -- every rank's turns -----------------------------------------------------------------------


@dataclass(frozen=True)
class GatheredTurns:
    """The turn-level columns of every rank's batch, joined in rank order.

    ``batch`` holds, for the union, what estimators and step-end hooks read: rewards, values,
    bootstrap values, episode ids (renumbered 0, 1, ... over the union, as
    :meth:`TurnBatch.concat` numbers them), turn indices, terminated/truncated, group ids,
    sample indices, stages, levels, and of the extras only :data:`UNION_EXTRAS`; its frames and
    token columns are empty. ``response_lengths`` are the response token counts of the union's
    turns. This rank's turns are rows ``offset : offset + counts[rank]``. In a world of one,
    ``batch`` is the rank's own batch itself.
    """

    batch: TurnBatch
    response_lengths: torch.Tensor
    offset: int
    counts: list[int]
    rank: int = 0

    @property
    def size(self) -> int:
        """How many of the union's turns are this rank's."""
        return self.counts[self.rank]

    def local(self, column: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a union-length ``column``."""
        return column[self.offset : self.offset + self.size]


def _hollow_turns(n: int) -> dict[str, list[Any]]:
    """Frames and token columns of ``n`` turns that carry no data (shared empty objects)."""
    frame = np.zeros((0, 0, 3), dtype=np.uint8)
    ids = torch.zeros(0, dtype=torch.long)
    mask = torch.zeros(0, dtype=torch.bool)
    logprobs = torch.zeros(0, dtype=torch.float32)
    return {
        "frames": [frame] * n,
        "prompt_ids": [ids] * n,
        "response_ids": [ids] * n,
        "thought_mask": [mask] * n,
        "action_mask": [mask] * n,
        "behaviour_logprobs": [logprobs] * n,
    }


_OPTIONAL_COLUMNS = ("values", "bootstrap_values", "group_id", "sample_index")


def gather_turns(batch: TurnBatch) -> GatheredTurns:
    """Every rank's turn-level scalars as one :class:`GatheredTurns` (collective: every rank
    calls it once per step). An optional column must be present on all ranks or on none."""
    lengths = torch.tensor([r.numel() for r in batch.response_ids], dtype=torch.long)
    if not _distributed():
        return GatheredTurns(batch, lengths, 0, [len(batch)])
    world = current_world()
    present = [getattr(batch, name) is not None for name in _OPTIONAL_COLUMNS]
    has_stage = batch.stage is not None
    everyone = gather_json([*present, has_stage])
    if any(flags != everyone[0] for flags in everyone):
        raise ValueError(f"ranks disagree on which optional turn columns they have: {everyone}")
    _, local_episode = torch.unique_consecutive(batch.episode_ids, return_inverse=True)
    columns: list[torch.Tensor] = [
        batch.rewards,
        batch.terminated,
        batch.truncated,
        local_episode,
        batch.turn_index,
        lengths,
    ]
    columns += [
        getattr(batch, name) for name, has in zip(_OPTIONAL_COLUMNS, present, strict=True) if has
    ]
    table = torch.stack([c.to(torch.float64) for c in columns], dim=1).reshape(len(batch), -1)
    tables = _gather_rows(table)
    texts = gather_json(
        {
            "levels": batch.levels,
            "stage": batch.stage,
            "extras": [{k: e[k] for k in UNION_EXTRAS if k in e} for e in batch.extras],
        }
    )
    counts = [t.shape[0] for t in tables]
    episode_ids, first = [], 0  # each rank's episodes numbered after the previous ranks'
    for t in tables:
        episode_ids.append(t[:, 3].long() + first)
        first += int(t[:, 3].max().item()) + 1 if t.shape[0] else 0
    union = torch.cat(tables)
    optional: dict[str, torch.Tensor | None] = dict.fromkeys(_OPTIONAL_COLUMNS)
    column = 6
    for name, has in zip(_OPTIONAL_COLUMNS, present, strict=True):
        if has:
            dtype = torch.long if name in ("group_id", "sample_index") else torch.float32
            optional[name] = union[:, column].to(dtype)
            column += 1
    gathered = TurnBatch(
        episode_ids=torch.cat(episode_ids),
        turn_index=union[:, 4].long(),
        levels=[level for part in texts for level in part["levels"]],
        rewards=union[:, 0].to(torch.float32),
        terminated=union[:, 1] > 0,
        truncated=union[:, 2] > 0,
        values=optional["values"],
        bootstrap_values=optional["bootstrap_values"],
        group_id=optional["group_id"],
        sample_index=optional["sample_index"],
        stage=[s for part in texts for s in part["stage"]] if has_stage else None,
        extras=[e for part in texts for e in part["extras"]],
        **_hollow_turns(int(union.shape[0])),
    )
    offset = sum(counts[: world.rank])
    return GatheredTurns(gathered, union[:, 5].long(), offset, counts, world.rank)
