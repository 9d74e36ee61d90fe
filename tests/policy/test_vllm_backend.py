"""The vLLM backend: a clear error without vLLM, the parameter mapping, and (only where
vLLM and a GPU exist) a real generation."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from model_fixtures import make_observations

from odyssey_core.policy import BACKENDS, GenerationParams
from odyssey_core.policy.vllm_backend import VLLMPolicy, sampling_kwargs
from odyssey_core.protocol import parse_response


def test_missing_vllm_error_is_clear(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    assert BACKENDS.get("vllm") is VLLMPolicy  # registering needs no vLLM
    with pytest.raises(ImportError, match=r"pip install 'odyssey-core\[vllm\]'") as info:
        VLLMPolicy("some/checkpoint")
    assert "GPU" in str(info.value)


def test_sampling_kwargs() -> None:
    params = GenerationParams(
        temperature=0.7, top_p=0.9, max_new_tokens=5, repetition_penalty=1.1, stop=("</a>",)
    )
    kwargs = sampling_kwargs(params, seed=4, logprobs=True)
    assert kwargs["temperature"] == 0.7 and kwargs["top_p"] == 0.9 and kwargs["max_tokens"] == 5
    assert kwargs["repetition_penalty"] == 1.1 and kwargs["stop"] == ["</a>"]
    assert kwargs["seed"] == 4 and kwargs["logprobs"] == 0
    assert kwargs["include_stop_str_in_output"] is True
    assert "logprobs" not in sampling_kwargs(params, seed=None, logprobs=False)


def test_generate_with_a_stand_in_engine(monkeypatch) -> None:
    """The request/response plumbing, with a fake ``vllm`` module recording the call."""
    calls: dict[str, Any] = {}

    class Logprob:
        def __init__(self, value: float) -> None:
            self.logprob = value

    class FakeLLM:
        def __init__(self, model: str, **kwargs: Any) -> None:
            calls["init"] = (model, kwargs)

        def get_tokenizer(self) -> Any:
            return types.SimpleNamespace(apply_chat_template=lambda messages, **_: repr(messages))

        def generate(self, prompts: list, sampling: list, use_tqdm: bool) -> list:
            calls["prompts"], calls["sampling"] = prompts, sampling
            completion = types.SimpleNamespace(
                text="<answer>['a']</answer>",
                token_ids=[5, 6],
                logprobs=[{5: Logprob(-0.1), 9: Logprob(-3)}, {6: Logprob(-0.2)}],
                finish_reason="stop",
            )
            return [
                types.SimpleNamespace(outputs=[completion], prompt_token_ids=[1, 2, 3])
                for _ in prompts
            ]

    fake = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=lambda **kw: kw)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    policy = VLLMPolicy("ckpt", game="mario", image_scale=2)
    gens = policy.generate(make_observations(["x", "y"], shape=(10, 12)), GenerationParams(seed=1))
    assert calls["init"][0] == "ckpt"
    assert [s["seed"] for s in calls["sampling"]] == [1, 2]
    assert calls["prompts"][0]["multi_modal_data"]["image"].size == (24, 20)
    assert gens[0].logprobs == [-0.1, -0.2] and gens[0].prompt_ids == [1, 2, 3]
    assert parse_response(gens[1].text).buttons == ("a",) and gens[1].finish_reason == "stop"
    assert all(not hasattr(g, "parsed") for g in gens)  # backends do not parse


def test_real_vllm_generates(tmp_path: Path) -> None:
    pytest.importorskip("vllm", reason="vLLM is a GPU-only optional extra (odyssey-core[vllm])")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    from odyssey_core.models.tiny import build_tiny_model

    checkpoint = build_tiny_model(tmp_path / "tiny", seed=0)
    policy = VLLMPolicy(checkpoint, engine_kwargs={"gpu_memory_utilization": 0.2})
    params = GenerationParams(temperature=1.0, max_new_tokens=8, seed=0)
    gens = policy.generate(make_observations(["Go.", "Level 1-1."]), params)
    assert len(gens) == 2
    for gen in gens:
        assert 1 <= len(gen.response_ids) <= 8 and len(gen.logprobs) == len(gen.response_ids)
        assert all(lp <= 0 for lp in gen.logprobs) and gen.prompt_ids
