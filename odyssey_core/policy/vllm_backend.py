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
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from odyssey_core.envs.base import Observation
from odyssey_core.policy.base import Generation, GenerationParams, PolicyBackend, turn_messages
from odyssey_core.protocol import get_system_prompt

__all__ = ["VLLM_INSTALL_HINT", "VLLMPolicy", "import_vllm", "sampling_kwargs"]

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


def sampling_kwargs(params: GenerationParams, seed: int | None, logprobs: bool) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments for one batch item."""
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
    return kwargs


class VLLMPolicy(PolicyBackend):
    """Runs a local checkpoint on vLLM's offline engine.

    ``model`` is a checkpoint folder (or an already built ``vllm.LLM``, e.g. shared with a
    weight-sync loop). ``engine_kwargs`` go to ``vllm.LLM`` (``gpu_memory_utilization``,
    ``max_model_len``, ``tensor_parallel_size``, ``logprobs_mode``, ...).
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
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        if isinstance(model, str | Path):
            settings = {"limit_mm_per_prompt": {"image": 1}, **(engine_kwargs or {})}
            self.llm = vllm.LLM(model=str(model), dtype=dtype, **settings)
        else:
            self.llm = model
        self.system_prompt = system_prompt if system_prompt is not None else get_system_prompt(game)
        self.image_scale = image_scale
        self.image_size = image_size
        self.logprobs = logprobs

    @property
    def tokenizer(self) -> Any:
        return self.llm.get_tokenizer()

    def messages(self, observation: Observation) -> list[dict[str, Any]]:
        """The chat for one turn, as HFPolicy builds it."""
        return turn_messages(self.system_prompt, observation.text)

    def prompt_text(self, observation: Observation) -> str:
        return self.tokenizer.apply_chat_template(
            self.messages(observation), tokenize=False, add_generation_prompt=True
        )

    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        """One batched engine call; item ``i`` samples with ``seed + i``."""
        from odyssey_core.models.processor import prepare_frame

        params = params or GenerationParams()
        observations = list(observations)
        if not observations:
            return []
        texts = [self.prompt_text(obs) for obs in observations]
        prompts = [
            {
                "prompt": text,
                "multi_modal_data": {
                    "image": prepare_frame(obs.image, self.image_scale, self.image_size)
                },
            }
            for text, obs in zip(texts, observations, strict=True)
        ]
        sampling = [
            self._vllm.SamplingParams(
                **sampling_kwargs(
                    params, None if params.seed is None else params.seed + i, self.logprobs
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
