"""RL rollouts on another engine (vLLM in-process, a vLLM server, ``odyssey serve``), with the
trainer's weights pushed to it after every update.

With ``rollout.backend: vllm | openai`` the two jobs of the policy split: the engine samples
the answers, the trainer's :class:`~odyssey_core.policy.hf.HFPolicy` scores them (the trainer
recomputes the old log-probs with its own weights; the engine's log-probs are only the
behaviour log-probs, whose gap to the trainer's is the metric
``actor/old_vs_behaviour_logprob_abs``). Three things make that sound:

* **Exact tokens** (:class:`RolloutPolicy`). The prompt ids are built locally with the trainer
  policy's processor, exactly as ``HFPolicy.generate`` builds them; the response ids are the
  ids the engine sampled, never a re-tokenisation of its text (which can differ from what
  was sampled). An engine that returns no ids is an error (:class:`TokenIdsMissing`), not a
  silent fallback. Where the engine reports its own prompt ids and they differ from the
  local ones, the turn is counted (``rollout/engine_prompt_mismatch_frac``): the answer was
  then sampled for a prompt other than the one the trainer scores.
* **The same weights** (:class:`SyncTarget`, driven by ``rl.hooks.WeightSync``). After every
  update the trainer's weights go to the engine under their checkpoint names
  (:func:`export_weights`: ``save_pretrained``'s names, LoRA merged in, tied weights once):
  ``odyssey serve`` and a vLLM server reload a safetensors folder the trainer just wrote
  (``POST /v1/weights/reload`` / vLLM's dev-mode ``POST /collective_rpc`` into
  :class:`VLLMWorkerExtension`), so the folder must be on a filesystem both see; the
  in-process engine gets the tensors themselves, in buckets of at most ``bucket_mb``, through
  ``collective_rpc`` (vLLM's RLHF pattern), then its prefix cache is reset.
* **A checksum** (:func:`weights_checksum`): SHA-256 over the named tensors, each tensor's
  bytes hashed on its own and the (name, dtype, shape, digest) lines combined in name order,
  so it does not depend on the order tensors travel in. ``odyssey serve`` reports it over
  the weights it serves; vLLM workers over the tensors they were handed and loaded (vLLM
  fuses and shards its own parameters, so their bytes cannot be compared by name). The
  trainer computes the same function over its exported weights and stops the run on a
  mismatch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
import torch
from pydantic import Field, model_validator
from safetensors import safe_open
from safetensors.torch import save_file

from odyssey_core.config import StrictModel
from odyssey_core.envs.base import Observation
from odyssey_core.policy.base import Generation, GenerationParams, PolicyBackend
from odyssey_core.policy.openai_backend import OpenAIPolicy
from odyssey_core.policy.vllm_backend import VLLMPolicy

__all__ = [
    "Checksum",
    "ChecksumBuilder",
    "OdysseyServeTarget",
    "RolloutBackendSettings",
    "RolloutPolicy",
    "SyncReport",
    "SyncTarget",
    "TokenIdsMissing",
    "VLLMEngineTarget",
    "VLLMServerTarget",
    "VLLMWorkerExtension",
    "WeightSyncError",
    "build_rollout_engine",
    "export_checkpoint",
    "export_weights",
    "iter_buckets",
    "load_weights_into",
    "read_weights",
    "resolve_dtype",
    "server_root",
    "tensor_digest",
    "weight_index",
    "weights_checksum",
    "write_weights",
]

log = logging.getLogger(__name__)

DTypeName = Literal["auto", "float32", "bfloat16", "float16"]


class TokenIdsMissing(RuntimeError):
    """The engine returned text without the ids it sampled."""


class WeightSyncError(RuntimeError):
    """A weight push failed, or the engine's checksum differs from the trainer's."""


# -- settings -------------------------------------------------------------------------------------


class RolloutBackendSettings(StrictModel):
    """Which engine samples the RL rollouts (``rollout.backend``), and how its weights follow
    the trainer's. A bare name (``backend: openai``) is read as ``{kind: openai}``."""

    kind: Literal["hf", "vllm", "openai"] = Field(
        default="hf",
        description="hf: the trainer's own model generates (no sync); vllm: vLLM's in-process "
        "engine, colocated on the trainer's GPU; openai: an OpenAI-compatible server",
    )
    base_url: str | None = Field(
        default=None, description="openai: the API root, e.g. http://127.0.0.1:8000/v1"
    )
    model: str | None = Field(
        default=None,
        description="openai: the served model name (null: the first of GET /models)",
    )
    server: Literal["odyssey", "vllm"] = Field(
        default="odyssey",
        description="openai: which weight-reload call the server speaks: `odyssey serve`'s "
        "POST /v1/weights/reload, or vLLM's dev-mode POST /collective_rpc into "
        "VLLMWorkerExtension (vllm serve ... --worker-extension-cls "
        "odyssey_core.policy.weight_sync.VLLMWorkerExtension, VLLM_SERVER_DEV_MODE=1)",
    )
    api_key_env: str | None = Field(
        default=None, description="openai: the environment variable holding the server's key"
    )
    concurrency: int = Field(default=64, ge=1, description="openai: requests in flight")
    timeout: float = Field(default=600.0, gt=0, description="openai: seconds per request")
    sync: bool = Field(default=True, description="push the weights after every update")
    sync_dir: Path | None = Field(
        default=None,
        description="where weight folders for a server are written (null: <out>/rollout-"
        "weights); a vLLM server on another machine needs a path both machines see",
    )
    weights_dtype: DTypeName = Field(
        default="auto", description="dtype the weights travel in (auto: the trainer's)"
    )
    verify_every: int = Field(
        default=1,
        ge=0,
        description="compare the engine's weight checksum with the trainer's every N pushes "
        "(0: never; hashing an 8B model's weights takes seconds on each side)",
    )
    bucket_mb: int = Field(
        default=512, ge=1, description="MiB per shard file or per in-process transfer"
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="vllm: vllm.LLM arguments (gpu_memory_utilization, max_model_len, ...)",
    )
    sleep_level: Literal[0, 1, 2] = Field(
        default=1,
        description="vllm: sleep between rollout and update to free the GPU for training (1: "
        "weights to CPU, KV cache dropped; 2: both dropped, the push refills the weights; "
        "0: stay awake)",
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _complete(self) -> RolloutBackendSettings:
        if self.kind == "openai" and not self.base_url:
            raise ValueError("rollout.backend kind openai needs base_url (e.g. .../v1)")
        return self


# -- exact tokens ---------------------------------------------------------------------------------


class RolloutPolicy(PolicyBackend):
    """Samples with ``engine``, returns Generations the trainer's policy can score.

    ``trainer_policy`` is the trainer's HFPolicy (anything with ``encode`` and ``tokenizer``):
    it builds each prompt's ids as ``HFPolicy.generate`` would, and decodes the response
    text from the engine's ids as ``HFPolicy`` does (special tokens removed, a matched stop
    string kept), so the text the env parses and the ids the trainer scores agree.
    """

    def __init__(self, engine: PolicyBackend, trainer_policy: Any) -> None:
        self.engine = engine
        self.trainer_policy = trainer_policy
        self.banned_ids = frozenset(getattr(trainer_policy, "banned_ids", ()) or ())
        self._counts = dict.fromkeys(("turns", "prompt_mismatches", "banned_token_turns"), 0)

    @property
    def tokenizer(self) -> Any:
        return self.trainer_policy.tokenizer

    def local_prompt_ids(
        self, observations: Sequence[Observation]
    ) -> tuple[list[list[int]], list[str]]:
        """The unpadded prompt ids and texts HFPolicy builds for ``observations``."""
        inputs, texts = self.trainer_policy.encode(observations)
        ids, mask = inputs["input_ids"].cpu(), inputs["attention_mask"].cpu().bool()
        return [ids[b][mask[b]].tolist() for b in range(ids.shape[0])], texts

    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        observations = list(observations)
        if not observations:
            return []
        generated = self.engine.generate(observations, params)
        prompts, texts = self.local_prompt_ids(observations)
        results = []
        for gen, prompt, text in zip(generated, prompts, texts, strict=True):
            if not gen.response_ids:
                raise TokenIdsMissing(
                    f"{self.engine!r} returned an answer without the token ids it sampled. RL "
                    "trains on the sampled ids, and re-tokenising the text can give other ids; "
                    "use `odyssey serve`, or a vLLM server (it returns them for "
                    "`return_token_ids`, or as `token_id:N` log-prob tokens for "
                    "`return_tokens_as_token_ids`)"
                )
            if len(gen.logprobs) != len(gen.response_ids):
                raise TokenIdsMissing(
                    f"{self.engine!r} returned {len(gen.logprobs)} log-probs for "
                    f"{len(gen.response_ids)} tokens; ask it for log-probs (logprobs: true)"
                )
            self._counts["turns"] += 1
            self._counts["prompt_mismatches"] += bool(gen.prompt_ids and gen.prompt_ids != prompt)
            self._counts["banned_token_turns"] += bool(self.banned_ids & set(gen.response_ids))
            results.append(
                Generation(
                    text=self.tokenizer.decode(gen.response_ids, skip_special_tokens=True),
                    prompt_ids=prompt,
                    response_ids=list(gen.response_ids),
                    logprobs=list(gen.logprobs),
                    finish_reason=gen.finish_reason,
                    prompt_text=text,
                    extra={**gen.extra, "engine_text": gen.text},
                )
            )
        return results

    def pop_metrics(self) -> dict[str, float]:
        """Counters since the last call: turns whose engine prompt ids differ from the local
        ones, and turns whose response holds a vision placeholder token."""
        turns = max(1, self._counts["turns"])
        metrics = {
            "rollout/engine_prompt_mismatch_frac": self._counts["prompt_mismatches"] / turns,
            "rollout/engine_banned_token_frac": self._counts["banned_token_turns"] / turns,
        }
        self._counts = dict.fromkeys(self._counts, 0)
        return metrics


# -- weights: names, checksum, buckets, files ------------------------------------------------------


def _is_peft(model: Any) -> bool:
    return hasattr(model, "get_base_model") and hasattr(model, "peft_config")


def _merged_lora_weight(layer: Any) -> torch.Tensor:
    """A LoRA layer's base weight plus its active adapters' deltas (the layer is unchanged)."""
    base = layer.get_base_layer().weight
    if layer.merged or layer.disable_adapters:
        return base.detach()
    weight = base.detach()
    for adapter in layer.active_adapters:
        if adapter not in getattr(layer, "lora_A", {}):
            continue
        if getattr(layer, "use_dora", {}).get(adapter):
            raise NotImplementedError("exporting DoRA adapters is not supported")
        weight = weight + layer.get_delta_weight(adapter).to(weight.dtype)
    return weight


def export_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for every weight of an HF model, named as ``save_pretrained`` writes
    them: parameters and persistent buffers in ``state_dict`` order, a tied weight once (under its
    first name, e.g. the input embeddings), and for a PEFT LoRA model the base model's names
    with the active adapters merged in (computed apart; the model is not modified). Tensors
    are detached, on the model's device, in its dtype."""
    base = model.get_base_model() if _is_peft(model) else model
    lora_layers = {
        name: module
        for name, module in base.named_modules()
        if hasattr(module, "get_delta_weight") and hasattr(module, "get_base_layer")
    }
    seen: set[int] = set()
    with torch.no_grad():
        for name, tensor in base.state_dict(keep_vars=True).items():
            if id(tensor) in seen:
                continue
            seen.add(id(tensor))
            if hasattr(tensor, "ds_id"):
                raise NotImplementedError(
                    "ZeRO-3 partitions the weights across ranks; gather them before exporting "
                    "(weight sync supports plain and ZeRO-1/2 models)"
                )
            if "modules_to_save" in name or "original_module" in name:
                raise NotImplementedError("exporting PEFT modules_to_save is not supported")
            if ".lora_" in name:  # adapter weights: merged into their base weight below
                continue
            if ".base_layer." in name:
                owner, _, kind = name.rpartition(".base_layer.")
                if kind == "weight" and owner in lora_layers:
                    yield f"{owner}.weight", _merged_lora_weight(lora_layers[owner])
                    continue
                name = f"{owner}.{kind}"
            yield name, tensor.detach()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def resolve_dtype(name: str | None) -> torch.dtype | None:
    """``"bfloat16"`` -> ``torch.bfloat16``; ``None`` / ``"auto"`` -> ``None`` (keep each)."""
    if name in (None, "auto"):
        return None
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def tensor_digest(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (row-major, native byte order)."""
    data = tensor.detach().contiguous().cpu().reshape(-1)
    return hashlib.sha256(data.view(torch.uint8).numpy()).hexdigest()


@dataclass(frozen=True)
class Checksum:
    """A weights checksum with what it covers; ``dtype`` is None when tensors differ in it."""

    value: str
    tensors: int
    bytes: int
    dtype: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "tensors": self.tensors,
            "bytes": self.bytes,
            "dtype": self.dtype,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checksum:
        return cls(str(data["value"]), int(data["tensors"]), int(data["bytes"]), data.get("dtype"))


@dataclass
class ChecksumBuilder:
    """Collects per-tensor digests in any order; :meth:`result` combines them in name order."""

    entries: dict[str, tuple[str, tuple[int, ...], str, int]] = field(default_factory=dict)

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if name in self.entries:
            raise ValueError(f"tensor {name!r} appears twice")
        self.entries[name] = (
            _dtype_name(tensor.dtype),
            tuple(int(s) for s in tensor.shape),
            tensor_digest(tensor),
            tensor.numel() * tensor.element_size(),
        )

    def update(self, entries: dict[str, Sequence[Any]]) -> None:
        """Merge entries computed elsewhere (a vLLM worker's :meth:`VLLMWorkerExtension`)."""
        for name, (dtype, shape, digest, nbytes) in entries.items():
            if name in self.entries:
                raise ValueError(f"tensor {name!r} appears twice")
            self.entries[name] = (
                str(dtype),
                tuple(int(s) for s in shape),
                str(digest),
                int(nbytes),
            )

    def result(self) -> Checksum:
        combined = hashlib.sha256()
        for name in sorted(self.entries):
            dtype, shape, digest, _ = self.entries[name]
            combined.update(f"{name}\t{dtype}\t{list(shape)}\t{digest}\n".encode())
        dtypes = {entry[0] for entry in self.entries.values()}
        return Checksum(
            value="sha256:" + combined.hexdigest(),
            tensors=len(self.entries),
            bytes=sum(entry[3] for entry in self.entries.values()),
            dtype=dtypes.pop() if len(dtypes) == 1 else None,
        )


def _cast(
    named: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None
) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in named:
        yield (
            name,
            (tensor if dtype is None or not tensor.is_floating_point() else tensor.to(dtype)),
        )


def weights_checksum(
    named: Iterable[tuple[str, torch.Tensor]], dtype: str | torch.dtype | None = None
) -> Checksum:
    """The checksum of ``named`` tensors, floating-point ones cast to ``dtype`` first (None:
    as they are). Order-independent; one tensor is copied to the CPU at a time."""
    target = dtype if isinstance(dtype, torch.dtype) or dtype is None else resolve_dtype(dtype)
    builder = ChecksumBuilder()
    for name, tensor in _cast(named, target):
        builder.add(name, tensor)
    return builder.result()


def iter_buckets(
    named: Iterable[tuple[str, torch.Tensor]], max_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of ``(name, tensor)`` of at most ``max_bytes`` each, in order; a
    tensor larger than ``max_bytes`` travels alone. Bounds what one transfer holds."""
    if max_bytes < 1:
        raise ValueError("max_bytes must be >= 1")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


INDEX_FILE = "model.safetensors.index.json"


def write_weights(
    named: Iterable[tuple[str, torch.Tensor]],
    folder: str | Path,
    *,
    dtype: str | torch.dtype | None = None,
    shard_bytes: int = 2**30,
) -> Checksum:
    """Write ``named`` tensors as an HF safetensors checkpoint (``model.safetensors``, or
    shards with an index) into ``folder``, floating-point ones cast to ``dtype``; returns the
    checksum of what was written. The folder appears whole or not at all (written aside,
    then renamed); an existing one is replaced."""
    target = dtype if isinstance(dtype, torch.dtype) or dtype is None else resolve_dtype(dtype)
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    builder = ChecksumBuilder()
    shards: list[list[str]] = []
    for i, bucket in enumerate(iter_buckets(_cast(named, target), shard_bytes)):
        tensors = {name: tensor.detach().contiguous().cpu() for name, tensor in bucket}
        for name, tensor in tensors.items():
            builder.add(name, tensor)
        save_file(tensors, str(tmp / f"shard-{i:05d}.safetensors"), metadata={"format": "pt"})
        shards.append(list(tensors))
    if len(shards) == 1:
        (tmp / "shard-00000.safetensors").rename(tmp / "model.safetensors")
    else:
        weight_map: dict[str, str] = {}
        for i, names in enumerate(shards):
            final = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            (tmp / f"shard-{i:05d}.safetensors").rename(tmp / final)
            weight_map.update(dict.fromkeys(names, final))
        result = builder.result()
        index = {"metadata": {"total_size": result.bytes}, "weight_map": weight_map}
        (tmp / INDEX_FILE).write_text(json.dumps(index, indent=1, sort_keys=True))
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return builder.result()


def _weight_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {folder}")
    return files


def weight_index(folder: str | Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, safetensors dtype) of every tensor in ``folder``, from the headers."""
    index: dict[str, tuple[tuple[int, ...], str]] = {}
    for path in _weight_files(Path(folder)):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                piece = f.get_slice(name)
                if name in index:
                    raise ValueError(f"tensor {name!r} appears in two files of {folder}")
                index[name] = (tuple(int(s) for s in piece.get_shape()), str(piece.get_dtype()))
    return index


def read_weights(folder: str | Path, device: str = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """Every ``(name, tensor)`` of the safetensors files in ``folder``, file by file."""
    for path in _weight_files(Path(folder)):
        with safe_open(str(path), framework="pt", device=device) as f:
            for name in f.keys():  # noqa: SIM118
                yield name, f.get_tensor(name)


def load_weights_into(model: torch.nn.Module, folder: str | Path) -> int:
    """Copy the weights in ``folder`` into ``model`` (a plain HF model), by checkpoint name.

    Every name and shape is checked against the model before anything is copied, and the
    folder must hold exactly the model's weights, so a failed load leaves the model as it
    was. Values are cast to each weight's dtype. Returns the number of tensors copied."""
    if _is_peft(model):
        raise ValueError("loading merged weights into a PEFT model would add the adapters twice")
    targets = dict(export_weights(model))
    index = weight_index(folder)
    missing, unexpected = sorted(set(targets) - set(index)), sorted(set(index) - set(targets))
    if missing or unexpected:
        raise ValueError(
            f"{folder} does not match the served model: missing {missing[:5]}"
            f"{'...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
            f"{'...' if len(unexpected) > 5 else ''}"
        )
    wrong = [n for n, (shape, _) in index.items() if tuple(targets[n].shape) != shape]
    if wrong:
        name = wrong[0]
        raise ValueError(
            f"{folder}: {len(wrong)} tensors have another shape than the served model's, e.g. "
            f"{name!r} {list(index[name][0])} vs {list(targets[name].shape)}"
        )
    with torch.no_grad():
        for name, tensor in read_weights(folder):
            targets[name].copy_(tensor)
    return len(index)


def export_checkpoint(policy: Any, folder: str | Path, *, dtype: str | None = None) -> Path:
    """A loadable checkpoint of ``policy``'s current weights (config, generation config,
    processor, safetensors) in ``folder``: what a fresh engine starts from, so it begins with
    the trainer's weights (after a resume, with LoRA merged) rather than the base model's."""
    folder = Path(folder)
    write_weights(export_weights(policy.model), folder, dtype=dtype)
    model = policy.model.get_base_model() if _is_peft(policy.model) else policy.model
    model.config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    policy.processor.save_pretrained(folder)
    return folder


# -- sync targets ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncReport:
    """One push: the trainer-side checksum of what was sent and, when verified, the engine's."""

    sent: Checksum | None
    served: Checksum | None
    seconds: float
    version: int


class SyncTarget(Protocol):
    """Where weights go. ``shared``: one engine for every rank (only rank 0 pushes)."""

    shared: bool

    def push(self, model: torch.nn.Module, *, verify: bool) -> SyncReport: ...

    def sleep(self) -> None: ...


def server_root(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000`` (where non-OpenAI routes live)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _answer(response: httpx.Response, what: str, hint: str = "") -> Any:
    if response.status_code >= 400:
        detail = response.text[:500]
        raise WeightSyncError(f"{what} failed: HTTP {response.status_code}: {detail}{hint}")
    return response.json() if response.content else None


class _FolderTarget:
    """Shared by the server targets: weights written to ``sync_dir/weights-<n>``, the older
    folders removed once the server has loaded a newer one."""

    shared = True

    def __init__(
        self,
        base_url: str,
        sync_dir: str | Path,
        *,
        dtype: str | None = None,
        api_key: str | None = None,
        shard_bytes: int = 2**30,
        timeout: float = 600.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.root = server_root(base_url)
        self.sync_dir = Path(sync_dir).resolve()
        self.dtype = dtype
        self.shard_bytes = shard_bytes
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = client or httpx.Client(timeout=timeout, headers=headers)
        self.version = 0

    def sleep(self) -> None:
        return None

    def push(self, model: torch.nn.Module, *, verify: bool) -> SyncReport:
        started = time.perf_counter()
        self.version += 1
        folder = self.sync_dir / f"weights-{self.version:06d}"
        sent = write_weights(
            export_weights(model), folder, dtype=self.dtype, shard_bytes=self.shard_bytes
        )
        served = self._reload(folder, verify)
        for old in self.sync_dir.glob("weights-*"):
            if old.is_dir() and old != folder:
                shutil.rmtree(old, ignore_errors=True)
        return SyncReport(sent, served, time.perf_counter() - started, self.version)

    def _reload(self, folder: Path, verify: bool) -> Checksum | None:
        raise NotImplementedError


class OdysseyServeTarget(_FolderTarget):
    """``odyssey serve``: ``POST /v1/weights/reload {"path", "checksum"}``; it answers with the
    checksum of the weights it now serves."""

    def _reload(self, folder: Path, verify: bool) -> Checksum | None:
        body = _answer(
            self.http.post(
                f"{self.root}/v1/weights/reload", json={"path": str(folder), "checksum": verify}
            ),
            f"reloading the weights of {self.root}",
        )
        return Checksum.from_dict(body["checksum"]) if verify else None

    def served_checksum(self) -> Checksum:
        """``GET /v1/weights/checksum``: the server's weights as they are now."""
        body = _answer(self.http.get(f"{self.root}/v1/weights/checksum"), "the checksum")
        return Checksum.from_dict(body["checksum"])


VLLM_SERVER_HINT = (
    " (start vLLM with VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls "
    "odyssey_core.policy.weight_sync.VLLMWorkerExtension, with odyssey-core importable)"
)


class VLLMServerTarget(_FolderTarget):
    """A vLLM OpenAI server in dev mode: ``POST /collective_rpc`` runs
    :meth:`VLLMWorkerExtension.odyssey_reload_from_path` on every worker (each loads the
    folder through the model's ``load_weights``), then ``POST /reset_prefix_cache`` drops
    the KV blocks computed with the old weights."""

    def _reload(self, folder: Path, verify: bool) -> Checksum | None:
        body = _answer(
            self.http.post(
                f"{self.root}/collective_rpc",
                json={
                    "method": "odyssey_reload_from_path",
                    "args": [str(folder), "1" if verify else "0"],
                },
            ),
            f"reloading the weights of the vLLM server at {self.root}",
            VLLM_SERVER_HINT,
        )
        _answer(self.http.post(f"{self.root}/reset_prefix_cache"), "resetting the prefix cache")
        results = (body or {}).get("results") or []
        if not results:
            raise WeightSyncError(
                f"{self.root}/collective_rpc answered no results{VLLM_SERVER_HINT}"
            )
        if not verify:
            return None
        checksums = {json.dumps(r["checksum"], sort_keys=True) for r in results}
        if len(checksums) != 1:
            raise WeightSyncError(f"vLLM workers disagree on the weights they loaded: {checksums}")
        return Checksum.from_dict(results[0]["checksum"])


class VLLMEngineTarget:
    """vLLM's in-process engine, colocated with training: woken for the push (weights first,
    so the KV cache is not allocated while both copies of the weights exist), fed the
    exported tensors in buckets through ``collective_rpc`` into
    :meth:`VLLMWorkerExtension.odyssey_load_weights`, its prefix cache reset, then its KV
    cache woken. :meth:`sleep` frees its GPU memory for the update."""

    shared = False

    def __init__(
        self,
        engine: VLLMPolicy,
        *,
        dtype: str | None = None,
        bucket_bytes: int = 512 * 2**20,
        sleep_level: int = 1,
    ) -> None:
        self.engine = engine
        self.dtype = resolve_dtype(dtype)
        self.bucket_bytes = bucket_bytes
        self.sleep_level = sleep_level
        self.version = 0

    def sleep(self) -> None:
        if self.sleep_level:
            self.engine.sleep(self.sleep_level)

    def push(self, model: torch.nn.Module, *, verify: bool) -> SyncReport:
        started = time.perf_counter()
        self.version += 1
        self.engine.wake_up(["weights"])
        sent = ChecksumBuilder() if verify else None
        served = ChecksumBuilder() if verify else None
        for bucket in iter_buckets(_cast(export_weights(model), self.dtype), self.bucket_bytes):
            if sent is not None:
                for name, tensor in bucket:
                    sent.add(name, tensor)
            results = self.engine.load_weights(bucket, checksum=verify)
            if served is not None:
                served.update(results[0])
        self.engine.reset_prefix_cache()
        self.engine.wake_up(["kv_cache"])
        return SyncReport(
            None if sent is None else sent.result(),
            None if served is None else served.result(),
            time.perf_counter() - started,
            self.version,
        )


class VLLMWorkerExtension:
    """Mixed into every vLLM worker (``worker_extension_cls``); called by ``collective_rpc``.

    Only ``odyssey_``-prefixed methods, so nothing collides with the worker's own names.
    Each loads through the model's own ``load_weights`` (vLLM maps checkpoint names onto its
    fused, sharded parameters) and returns digests of exactly the tensors it loaded.
    """

    def _odyssey_model(self) -> Any:
        runner = self.model_runner  # type: ignore[attr-defined]
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def odyssey_load_weights(
        self, weights: list[tuple[str, torch.Tensor]], checksum: bool = True
    ) -> dict[str, list[Any]]:
        """Load one bucket of tensors; returns ``name -> [dtype, shape, digest, bytes]``."""
        self._odyssey_model().load_weights(weights=weights)
        if not checksum:
            return {}
        builder = ChecksumBuilder()
        for name, tensor in weights:
            builder.add(name, tensor)
        return {name: list(entry) for name, entry in builder.entries.items()}

    def odyssey_reload_from_path(self, path: str, checksum: str = "1") -> dict[str, Any]:
        """Load a safetensors folder (the server path: collective_rpc passes strings)."""
        builder = ChecksumBuilder()
        verify = checksum not in ("0", "false", "False", "")
        count = 0

        def weights() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal count
            for name, tensor in read_weights(path):
                count += 1
                if verify:
                    builder.add(name, tensor)
                yield name, tensor

        self._odyssey_model().load_weights(weights=weights())
        return {"tensors": count, "checksum": builder.result().as_dict() if verify else None}


# -- wiring ---------------------------------------------------------------------------------------


def _served_model_name(base_url: str, api_key: str | None, timeout: float) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = base_url.rstrip("/") + "/models"
    body = _answer(httpx.get(url, headers=headers, timeout=timeout), f"GET {url}")
    models = body.get("data") or []
    if not models:
        raise WeightSyncError(f"{url} lists no models")
    return str(models[0]["id"])


def build_rollout_engine(
    settings: RolloutBackendSettings, trainer_policy: Any, out_dir: str | Path
) -> tuple[RolloutPolicy, SyncTarget | None]:
    """The rollout policy for ``settings`` (``kind`` vllm or openai) on top of the trainer's
    HFPolicy, and the target its weights are pushed to (None when ``sync`` is off)."""
    dtype = None if settings.weights_dtype == "auto" else settings.weights_dtype
    sync_dir = Path(settings.sync_dir or Path(out_dir) / "rollout-weights")
    bucket_bytes = settings.bucket_mb * 2**20
    banned = sorted(getattr(trainer_policy, "banned_ids", ()) or ())
    common = {
        "system_prompt": trainer_policy.system_prompt,
        "image_scale": trainer_policy.image_scale,
        "image_size": trainer_policy.image_size,
    }
    target: SyncTarget | None
    if settings.kind == "openai":
        assert settings.base_url is not None
        api_key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        model = settings.model or _served_model_name(settings.base_url, api_key, settings.timeout)
        engine: PolicyBackend = OpenAIPolicy(
            model,
            settings.base_url,
            api_key,
            api_key_env=settings.api_key_env,
            concurrency=settings.concurrency,
            timeout=settings.timeout,
            logprobs=True,
            return_token_ids=True,
            tokens_as_ids=settings.server == "vllm",
            # vision placeholders are never sampled (HFPolicy bans them; so does odyssey serve)
            extra_body={"logit_bias": {str(i): -100 for i in banned}} if banned else None,
            **common,
        )
        kind = OdysseyServeTarget if settings.server == "odyssey" else VLLMServerTarget
        target = kind(
            settings.base_url,
            sync_dir,
            dtype=dtype,
            api_key=api_key,
            shard_bytes=bucket_bytes,
            timeout=settings.timeout,
        )
    elif settings.kind == "vllm":
        rank = os.environ.get("RANK", "0")  # one engine per training rank, each its own start
        start = export_checkpoint(trainer_policy, sync_dir / f"engine-start-{rank}", dtype=dtype)
        engine = VLLMPolicy(
            start,
            processor=trainer_policy.processor,
            colocate=True,
            engine_kwargs=settings.engine_kwargs,
            sampling_extra={"logit_bias": dict.fromkeys(banned, -100.0)} if banned else None,
            **common,
        )
        target = VLLMEngineTarget(
            engine, dtype=dtype, bucket_bytes=bucket_bytes, sleep_level=settings.sleep_level
        )
    else:
        raise ValueError(
            f"rollout backend {settings.kind!r} needs no engine: the trainer generates"
        )
    return RolloutPolicy(engine, trainer_policy), (target if settings.sync else None)
