"""A policy backend on vLLM's in-process engine (``vllm.LLM``), for GPU rollouts.

vLLM is an optional extra (``pip install 'odyssey-core[vllm]'`` on a GPU machine) and is
imported only when a :class:`VLLMPolicy` is built. Prompts are built like HFPolicy's: the
game's system prompt, then the frame (resized with ``prepare_frame``) and the observation
text, rendered with the checkpoint's chat template and passed to vLLM with the frame as
multi-modal data.

Log-probs: each sampled token's log-prob is requested (``logprobs=0`` returns just the
sampled token's). Which distribution vLLM reports depends on its ``logprobs_mode`` engine
setting (vLLM >= 0.10.2; pass it through ``engine_kwargs``); the default is the raw model
distribution, without temperature. The convention of :mod:`odyssey_core.policy.base` is
``log_softmax(logits / T)`` (``logprobs_mode="processed_logprobs"`` is the closest setting,
though vLLM's processed values also include penalties and top-p), so trainers should
recompute log-probs with ``HFPolicy.score`` rather than trust rollout values.

Colocated with training (``colocate=True``, what ``rollout.backend: vllm`` builds): the engine
runs in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so tensors handed to
``collective_rpc`` are passed by reference, not serialised) with sleep mode on and
:class:`~odyssey_core.policy.weight_sync.VLLMWorkerExtension` mixed into its worker. Between
rollout and update it sleeps (:meth:`VLLMPolicy.sleep`), and after each update the trainer's
weights are loaded into it (:meth:`VLLMPolicy.load_weights`, vLLM's RLHF pattern), driven by
:class:`~odyssey_core.policy.weight_sync.VLLMEngineTarget`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from odyssey_core.envs.base import Observation
from odyssey_core.policy.base import (
    Generation,
    GenerationParams,
    PolicyBackend,
    TurnPrompt,
    turn_messages,
)

__all__ = [
    "VLLM_INSTALL_HINT",
    "VLLM_WORKER_EXTENSION",
    "VLLMPolicy",
    "colocated_engine_kwargs",
    "import_vllm",
    "sampling_kwargs",
]

#: the worker extension ``colocate=True`` mixes into vLLM's worker (imported by qualified name)
VLLM_WORKER_EXTENSION = "odyssey_core.policy.weight_sync.VLLMWorkerExtension"

VLLM_INSTALL_HINT = (
    "the 'vllm' backend needs vLLM, which is not installed. On a machine with a CUDA GPU run "
    "`pip install 'odyssey-core[vllm]'`; on CPU-only machines use the 'hf' backend instead."
)


def import_vllm() -> Any:
    """The ``vllm`` module, or an ImportError that says how to get it."""
    try:
        import vllm
    except ImportError as error:
        raise ImportError(VLLM_INSTALL_HINT) from error
    return vllm


def colocated_engine_kwargs(engine_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``vllm.LLM`` arguments for an engine sharing the GPU with training: sleep mode, the
    weight-loading worker extension and a modest memory share, under ``engine_kwargs``."""
    return {
        "enable_sleep_mode": True,
        "worker_extension_cls": VLLM_WORKER_EXTENSION,
        "gpu_memory_utilization": 0.3,
        **(engine_kwargs or {}),
    }


def sampling_kwargs(
    params: GenerationParams,
    seed: int | None,
    logprobs: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments for one batch item (``extra`` on top, e.g.
    a ``logit_bias`` that keeps vision placeholders from being sampled)."""
    kwargs: dict[str, Any] = {
        "n": 1,
        "temperature": params.temperature,  # vLLM reads 0 as greedy, as we do
        "top_p": params.top_p,
        "max_tokens": params.max_new_tokens,
        "repetition_penalty": params.repetition_penalty,
        "stop": list(params.stop),
        "stop_token_ids": list(params.stop_token_ids),
        # GenerationParams keeps a matched stop string in the text; so must we.
        "include_stop_str_in_output": True,
        "skip_special_tokens": True,
        "seed": seed,
    }
    if logprobs:
        kwargs["logprobs"] = 0  # only the sampled token's log-prob
    return {**kwargs, **(extra or {})}


class VLLMPolicy(PolicyBackend, TurnPrompt):
    """Runs a local checkpoint on vLLM's offline engine.

    ``model`` is a checkpoint folder (or an already built ``vllm.LLM``). ``engine_kwargs`` go
    to ``vllm.LLM`` (``gpu_memory_utilization``, ``max_model_len``, ``tensor_parallel_size``,
    ``logprobs_mode``, ...). ``processor`` (the trainer's) renders the chat template, so the
    prompt text is the one HFPolicy builds; without it the engine's tokenizer does.
    ``colocate`` builds the engine for weight sync next to training (see the module doc).
    ``sampling_extra`` is added to every ``SamplingParams``.
    """

    def __init__(
        self,
        model: str | Path | Any,
        *,
        game: str = "odland",
        system_prompt: str | None = None,
        image_scale: int | None = None,
        image_size: tuple[int, int] | None = None,
        dtype: str = "auto",
        logprobs: bool = True,
        engine_kwargs: dict[str, Any] | None = None,
        processor: Any = None,
        colocate: bool = False,
        sampling_extra: dict[str, Any] | None = None,
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        if colocate:
            # The engine core in this process: collective_rpc then hands tensors over as they
            # are (a separate engine process would need them serialised).
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        if isinstance(model, str | Path):
            extra = colocated_engine_kwargs(engine_kwargs) if colocate else engine_kwargs or {}
            settings = {"limit_mm_per_prompt": {"image": 1}, **extra}
            dtype = settings.pop("dtype", dtype)  # engine_kwargs may name it too
            self.llm = vllm.LLM(model=str(model), dtype=dtype, **settings)
        else:
            self.llm = model
        self.set_turn_prompt(game, system_prompt, image_scale, image_size)
        self.logprobs = logprobs
        self.processor = processor
        self.sampling_extra = dict(sampling_extra or {})
        self.asleep: set[str] = set()  # the parts sleep released: "weights", "kv_cache"

    @property
    def tokenizer(self) -> Any:
        return self.llm.get_tokenizer()

    def messages(self, observation: Observation) -> list[dict[str, Any]]:
        """The chat for one turn, as HFPolicy builds it."""
        return turn_messages(self.system_prompt, observation.text)

    def prompt_text(self, observation: Observation) -> str:
        template = self.processor if self.processor is not None else self.tokenizer
        return template.apply_chat_template(
            self.messages(observation), tokenize=False, add_generation_prompt=True
        )

    # ----------------------------------------------------------------------------- weight sync
    def sleep(self, level: int = 1) -> None:
        """Free the GPU for training: level 1 moves the weights to CPU memory and drops the KV
        cache; level 2 drops both (the next :meth:`load_weights` refills the weights)."""
        if not self.asleep:
            self.llm.sleep(level=level)
            self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Take back the GPU memory of ``tags`` (``"weights"``, ``"kv_cache"``; None: all)."""
        wanted = set(tags) if tags is not None else set(self.asleep)
        waking = sorted(wanted & self.asleep)
        if waking:
            self.llm.wake_up(tags=waking)
            self.asleep -= set(waking)

    def load_weights(
        self, weights: Sequence[tuple[str, torch.Tensor]], *, checksum: bool = False
    ) -> list[dict[str, list[Any]]]:
        """Load named tensors (checkpoint names) into every worker through ``collective_rpc``
        and the model's ``load_weights``; returns each worker's digests of what it loaded
        (empty without ``checksum``). The engine's weights must be awake."""
        if "weights" in self.asleep:
            raise RuntimeError("wake the weights up (wake_up(['weights'])) before loading")
        bucket = list(weights) if self.in_process else [(n, t.cpu()) for n, t in weights]
        return list(self.llm.collective_rpc("odyssey_load_weights", args=(bucket, checksum)))

    def reset_prefix_cache(self) -> None:
        """Forget cached KV blocks: they were computed with the old weights."""
        self.llm.reset_prefix_cache()

    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        """One batched engine call; item ``i`` samples with ``seed + i``."""
        params = params or GenerationParams()
        observations = list(observations)
        if not observations:
            return []
        self.wake_up()  # a sleeping engine cannot generate
        texts = [self.prompt_text(obs) for obs in observations]
        prompts = [
            {
                "prompt": text,
                "multi_modal_data": {"image": self.prepare_image(obs.image)},
            }
            for text, obs in zip(texts, observations, strict=True)
        ]
        sampling = [
            self._vllm.SamplingParams(
                **sampling_kwargs(
                    params,
                    None if params.seed is None else params.seed + i,
                    self.logprobs,
                    self.sampling_extra,
                )
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        return [self._to_generation(out, text) for out, text in zip(outputs, texts, strict=True)]

    @staticmethod
    def _to_generation(output: Any, prompt_text: str) -> Generation:
        completion = output.outputs[0]
        token_ids = list(completion.token_ids)
        logprobs: list[float] = []
        if completion.logprobs:
            # One {token_id: Logprob} dict per position; the sampled token is always in it.
            logprobs = [
                float(step[token].logprob)
                for step, token in zip(completion.logprobs, token_ids, strict=True)
            ]
        return Generation(
            text=completion.text,
            prompt_ids=list(output.prompt_token_ids or []),
            response_ids=token_ids,
            logprobs=logprobs,
            finish_reason="length" if completion.finish_reason == "length" else "stop",
            prompt_text=prompt_text,
            extra={"finish_reason": completion.finish_reason},
        )
