"""Crash-safe RL checkpoints: ``<out>/checkpoints/step-XXXXXXXXX/`` plus a ``latest`` pointer.

A checkpoint folder holds

    policy/             the model (``save_pretrained`` safetensors) or only its LoRA adapter,
                        and the processor, so the folder loads like any checkpoint; written by
                        rank 0, the one consolidated model a pipeline publishes
    trainer_state.pt    rank 0's trainer state: critic, optimiser(s), RNG states, curriculum,
                        counters (loadable with ``torch.load(weights_only=True)``: tensors,
                        numbers, strings, containers)
    trainer_state.rank-00001.pt, ...
                        the trainer state of every other rank (its RNG streams, generator,
                        hooks, optimiser), when several ranks trained
    deepspeed/          DeepSpeed's own checkpoint (every rank's optimiser partition), for a
                        DeepSpeed run
    config.json         the run's settings

Why it is crash-safe: everything is written into ``.tmp-step-XXXXXXXXX``, synced, and renamed
to its final name only when complete (a re-save of a step swaps the new folder in for the old
one in one rename), and ``latest`` (the name of the newest complete folder) is replaced
atomically after that. With several ranks, rank 0 writes its own ``trainer_state.pt`` last,
after a barrier and after checking that every other rank's shard is there: a folder that has
it is complete. A run killed at any instant leaves ``latest`` naming a complete checkpoint;
half-written ``.tmp-*`` folders are ignored and removed on the next save.

Every file is read back with ``weights_only=True``; DeepSpeed's own files too, through
:class:`WeightsOnlyCheckpointEngine`, with exactly the four types DeepSpeed stores allowed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from odyssey_core.common.checkpointing import capture_rng_state, restore_rng_state
from odyssey_core.common.run_folder import (
    CHECKPOINTS_DIR,
    STATE_FILE,
    CheckpointWriteError,
    checkpoint_name,
    checkpoint_write_error,
    latest_checkpoint,
    point_latest,
    publish_step_folder,
)
from odyssey_core.rl.distributed import World, barrier

__all__ = [
    "CHECKPOINTS_DIR",
    "CheckpointWriteError",
    "WeightsOnlyCheckpointEngine",
    "capture_rng_state",
    "checkpoint_name",
    "latest_checkpoint",
    "load_trainer_state",
    "load_weights_only",
    "restore_rng_state",
    "save_checkpoint",
    "shard_file",
]

POLICY_DIR = "policy"
_OS_ERROR_RE = re.compile(r"\(os error (\d+)\)")
CONFIG_FILE = "config.json"


# -- save / find / load ---------------------------------------------------------------------------


def shard_file(rank: int) -> str:
    """The trainer-state file of ``rank`` in a checkpoint folder (rank 0's is the marker)."""
    return STATE_FILE if rank == 0 else f"{Path(STATE_FILE).stem}.rank-{rank:05d}.pt"


def _write_state(state: dict[str, Any], path: Path) -> None:
    with open(path, "wb") as handle:  # a file object: a failed write
        torch.save(state, handle)  # keeps its OSError (ENOSPC) as the context


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    *,
    model: Any,
    processor: Any,
    trainer_state: dict[str, Any],
    config: dict[str, Any],
    extra_writer: Any = None,
    world: World | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically and point ``latest`` at it; returns its folder.

    ``model`` is saved with its own ``save_pretrained`` (a PEFT model writes only its adapter).
    ``extra_writer(folder)``, if given, writes more files (e.g. DeepSpeed's optimiser shards);
    with several ranks it runs on every rank. With several ranks (``world``) every rank calls
    this with its own ``trainer_state``, and the folders of all ranks must be one shared
    file system; rank 0 writes the model and publishes the folder.
    """
    world = world or World()
    root = Path(out_dir) / CHECKPOINTS_DIR
    final = root / checkpoint_name(step)
    tmp = root / f".tmp-{checkpoint_name(step)}"
    if world.is_main:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".tmp-*"):  # leftovers of a run killed mid-save
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    barrier()  # the staging folder exists for everyone
    try:
        if not world.is_main:
            _write_state(trainer_state, tmp / shard_file(world.rank))
        if extra_writer is not None:
            extra_writer(tmp)
        if world.is_main:
            model.save_pretrained(tmp / POLICY_DIR, safe_serialization=True)
            processor.save_pretrained(tmp / POLICY_DIR)
            (tmp / CONFIG_FILE).write_text(
                json.dumps(config, indent=2, sort_keys=True, default=str)
            )
        barrier()  # every rank's shard is written
        if world.is_main:
            missing = [r for r in range(1, world.size) if not (tmp / shard_file(r)).is_file()]
            if missing:
                raise RuntimeError(f"{final.name}: no trainer state from ranks {missing}")
            _write_state(trainer_state, tmp / STATE_FILE)  # last: the folder is complete
    except Exception as error:  # full disk, quota, ...: drop the partial folder, say what to do
        if world.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        cause = _os_error_in(error)
        if cause is None:
            raise
        raise checkpoint_write_error(cause, out_dir, f"checkpoint {final.name}") from error
    if world.is_main:
        try:  # a re-run of the same step (a fresh run in an old folder) replaces it
            publish_step_folder(tmp, final)
        except OSError as error:
            shutil.rmtree(tmp, ignore_errors=True)
            raise checkpoint_write_error(error, out_dir, f"checkpoint {final.name}") from error
        try:
            point_latest(out_dir, final)
        except OSError as error:  # the folder is complete; latest_checkpoint still finds it
            raise checkpoint_write_error(
                error, out_dir, f"the 'latest' pointer to {final.name}"
            ) from error
    barrier()  # the checkpoint is published when any rank returns
    return final


def _os_error_in(error: BaseException) -> OSError | None:
    """The OSError behind a failed write. Writers wrap it: torch raises a RuntimeError whose
    context is the file object's OSError, safetensors a SafetensorError saying
    ``I/O error: ... (os error 28)``."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        match = _OS_ERROR_RE.search(str(seen))
        if match is not None:
            code = int(match.group(1))
            return OSError(code, os.strerror(code))
        seen = seen.__cause__ or seen.__context__
    return None


#: the only non-container types a DeepSpeed ZeRO optimiser puts in its state dict
_DEEPSPEED_STATE_TYPES = (
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"),
)


def deepspeed_state_types() -> list[type]:
    """DeepSpeed's optimiser-state types, when DeepSpeed is installed (else none)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        return []
    return [getattr(importlib.import_module(m), name) for m, name in _DEEPSPEED_STATE_TYPES]


def load_weights_only(path: str | Path, map_location: Any = "cpu") -> Any:
    """``torch.load(weights_only=True)``: tensors, numbers, strings, containers, and exactly
    the types DeepSpeed's ZeRO optimiser stores; never any other pickled object."""
    with torch.serialization.safe_globals(deepspeed_state_types()):
        return torch.load(Path(path), weights_only=True, map_location=map_location)


def load_trainer_state(checkpoint: str | Path, rank: int = 0) -> dict[str, Any]:
    """The trainer state ``rank`` wrote into a checkpoint (rank 0: ``trainer_state.pt``),
    read with :func:`load_weights_only`."""
    path = Path(checkpoint) / shard_file(rank)
    if not path.is_file():
        raise FileNotFoundError(
            f"{checkpoint} has no trainer state for rank {rank} ({path.name}): it was written "
            "by fewer ranks; resume with the number of processes that wrote it"
        )
    return load_weights_only(path)


class WeightsOnlyCheckpointEngine:
    """DeepSpeed's checkpoint engine with a safe ``load``: the files DeepSpeed's own
    ``load_checkpoint`` reads go through :func:`load_weights_only` instead of an unrestricted
    unpickle. Everything else is the wrapped engine's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def load(self, path: str, map_location: Any = None) -> Any:
        return load_weights_only(path, map_location)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def policy_dir(checkpoint: str | Path) -> Path:
    return Path(checkpoint) / POLICY_DIR
