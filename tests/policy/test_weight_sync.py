"""Weight sync for rollout engines, as far as a CPU reaches: checkpoint names (LoRA merged),
the checksum, buckets, weight folders, exact tokens from an engine, the settings, and the
vLLM paths against stand-ins that speak vLLM's documented calls (``collective_rpc``, the
worker's ``model_runner.model.load_weights``, dev-mode HTTP routes)."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import model_fixtures
import openai
import pytest
import torch
from fastapi import FastAPI, Request
from model_fixtures import make_observations
from pydantic import ValidationError
from safetensors import safe_open

from odyssey_core.models.loading import load_model, load_processor
from odyssey_core.models.lora import LoraSettings, apply_lora
from odyssey_core.policy import GenerationParams
from odyssey_core.policy.base import Generation, PolicyBackend
from odyssey_core.policy.openai_backend import OpenAIPolicy
from odyssey_core.policy.vllm_backend import VLLM_WORKER_EXTENSION, VLLMPolicy
from odyssey_core.policy.weight_sync import (
    ChecksumBuilder,
    RolloutBackendSettings,
    RolloutPolicy,
    SyncReport,
    TokenIdsMissing,
    VLLMEngineTarget,
    VLLMServerTarget,
    VLLMWorkerExtension,
    WeightSyncError,
    export_checkpoint,
    export_weights,
    iter_buckets,
    load_weights_into,
    read_weights,
    server_root,
    weights_checksum,
    write_weights,
)
from odyssey_core.rl.hooks import WeightSync, rollout_backend
from odyssey_core.serve.app import ServerThread

torch.set_num_threads(1)
tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy


def _perturbed(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=generator))
    return model


# -- names ------------------------------------------------------------------------------------


def test_export_names_are_the_saved_checkpoint_names(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir)
    with safe_open(str(tiny_model_dir / "model.safetensors"), framework="pt") as f:
        saved = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    exported = dict(export_weights(model))
    assert sorted(exported) == sorted(saved)
    assert all(torch.equal(exported[n], saved[n]) for n in saved)


def test_tied_weights_are_exported_once() -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("scale", torch.ones(2))
            self.register_buffer("cache", torch.zeros(2), persistent=False)

    assert sorted(name for name, _ in export_weights(Tied())) == ["embed.weight", "scale"]


def test_lora_is_merged_under_the_base_names_and_the_model_is_unchanged(
    tiny_model_dir: Path,
) -> None:
    peft_model = apply_lora(load_model(tiny_model_dir), LoraSettings(r=4, alpha=8))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(generator=torch.Generator().manual_seed(len(name)))
    before = {n: p.clone() for n, p in peft_model.state_dict().items()}
    exported = dict(export_weights(peft_model))
    assert all(torch.equal(before[n], p) for n, p in peft_model.state_dict().items())

    merged = dict(export_weights(peft_model.merge_and_unload()))
    base = dict(export_weights(load_model(tiny_model_dir)))
    assert sorted(exported) == sorted(base)
    assert all(torch.equal(exported[n], merged[n]) for n in base)
    changed = [n for n in base if not torch.equal(exported[n], base[n])]
    assert changed and all("language_model" in n and n.endswith("proj.weight") for n in changed)


# -- checksum ---------------------------------------------------------------------------------


def test_checksum_follows_its_documented_formula_in_any_order() -> None:
    named = [
        ("b", torch.tensor([1.0, -2.0], dtype=torch.float32)),
        ("a", torch.arange(6, dtype=torch.int64).reshape(2, 3)),
    ]
    lines = []
    for name, tensor in sorted(named):
        digest = hashlib.sha256(tensor.numpy().tobytes()).hexdigest()
        dtype = str(tensor.dtype).removeprefix("torch.")
        lines.append(f"{name}\t{dtype}\t{list(tensor.shape)}\t{digest}\n")
    expected = "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()

    checksum = weights_checksum(named)
    assert checksum.value == expected
    assert (checksum.tensors, checksum.bytes, checksum.dtype) == (2, 56, None)
    assert weights_checksum(reversed(named)).value == expected
    bumped = [("b", torch.tensor([1.0, -2.000001])), named[1]]
    assert weights_checksum(bumped).value != expected
    renamed = [("c", named[0][1]), named[1]]
    assert weights_checksum(renamed).value != expected


def test_checksum_casts_floating_tensors_only() -> None:
    named = [("w", torch.tensor([1.0, 1.0 + 2**-10])), ("i", torch.tensor([3]))]
    cast = weights_checksum(named, dtype="bfloat16")
    by_hand = weights_checksum([("w", named[0][1].to(torch.bfloat16)), named[1]])
    assert cast == by_hand and cast.bytes == 2 * 2 + 8
    assert weights_checksum(named).value != cast.value  # 1 + 2**-10 rounds to 1 in bfloat16


def test_builder_merges_entries_computed_elsewhere() -> None:
    named = [(f"t{i}", torch.full((i + 1,), float(i))) for i in range(5)]
    left, right = ChecksumBuilder(), ChecksumBuilder()
    for name, tensor in named[:2]:
        left.add(name, tensor)
    for name, tensor in named[2:]:
        right.add(name, tensor)
    left.update({n: list(e) for n, e in json.loads(json.dumps(right.entries)).items()})
    assert left.result() == weights_checksum(named)
    with pytest.raises(ValueError, match="twice"):
        left.add("t0", named[0][1])


# -- buckets and folders ------------------------------------------------------------------------


def test_buckets_keep_order_and_stay_under_the_limit() -> None:
    sizes = [4, 4, 4, 12, 1, 1, 30, 2]  # float32 elements: 16, 16, 16, 48, 4, 4, 120, 8 bytes
    named = [(f"t{i}", torch.zeros(n)) for i, n in enumerate(sizes)]
    buckets = [[name for name, _ in b] for b in iter_buckets(named, max_bytes=48)]
    assert buckets == [["t0", "t1", "t2"], ["t3"], ["t4", "t5"], ["t6"], ["t7"]]
    assert [n for b in buckets for n in b] == [n for n, _ in named]
    with pytest.raises(ValueError):
        next(iter_buckets(named, 0))


def test_written_folders_load_back_and_as_a_checkpoint(tiny_model_dir: Path, tmp_path) -> None:
    model = _perturbed(load_model(tiny_model_dir))
    expected = weights_checksum(export_weights(model))
    written = write_weights(export_weights(model), tmp_path / "w", shard_bytes=300_000)
    files = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert written == expected and len(files) > 3 and "model.safetensors.index.json" in files
    assert weights_checksum(read_weights(tmp_path / "w")) == expected

    policy = types.SimpleNamespace(model=model, processor=load_processor(tiny_model_dir))
    folder = export_checkpoint(policy, tmp_path / "ckpt")
    assert weights_checksum(export_weights(load_model(folder))) == expected
    load_processor(folder)


def test_load_checks_everything_before_copying(tiny_model_dir: Path, tmp_path) -> None:
    source = _perturbed(load_model(tiny_model_dir))
    target = load_model(tiny_model_dir)
    original = weights_checksum(export_weights(target))

    named = dict(export_weights(source))
    first = next(iter(named))
    partial = {n: t for n, t in named.items() if n != first}
    write_weights(partial.items(), tmp_path / "missing")
    wrong = {**named, first: torch.zeros(3)}
    write_weights(wrong.items(), tmp_path / "shape")
    for folder, message in (("missing", "missing"), ("shape", "another shape")):
        with pytest.raises(ValueError, match=message):
            load_weights_into(target, tmp_path / folder)
        assert weights_checksum(export_weights(target)) == original

    write_weights(named.items(), tmp_path / "good", dtype="bfloat16")
    assert load_weights_into(target, tmp_path / "good") == len(named)
    assert weights_checksum(export_weights(target), dtype="bfloat16") == weights_checksum(
        named.items(), dtype="bfloat16"
    )
    assert next(target.parameters()).dtype == torch.float32  # values cast into its dtype


# -- settings ---------------------------------------------------------------------------------


def test_backend_settings_accept_a_bare_name_and_need_a_url_for_openai() -> None:
    assert RolloutBackendSettings.model_validate("hf").kind == "hf"
    assert RolloutBackendSettings().kind == "hf"
    with pytest.raises(ValidationError, match="base_url"):
        RolloutBackendSettings.model_validate("openai")
    with pytest.raises(ValidationError):
        RolloutBackendSettings.model_validate({"kind": "sglang"})
    settings = RolloutBackendSettings.model_validate(
        {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "server": "vllm"}
    )
    assert settings.server == "vllm" and server_root(settings.base_url) == "http://127.0.0.1:9"


# -- exact tokens -------------------------------------------------------------------------------


class ScriptedEngine(PolicyBackend):
    """Answers with fixed ids; ``prompt_ids`` given back as the engine saw them."""

    def __init__(self, answers: list[Generation]) -> None:
        self.answers = answers

    def generate(self, observations, params=None) -> list[Generation]:
        return self.answers[: len(observations)]


def test_rollout_policy_builds_prompts_like_hf_and_keeps_engine_ids(tiny_policy) -> None:
    observations = make_observations(["Level 1-1. Go right.", "Level 1-2."], seed=3)
    params = GenerationParams(temperature=0, max_new_tokens=6)
    local = tiny_policy.generate(observations, params)
    answers = [
        Generation(
            "ignored", local[0].prompt_ids, local[0].response_ids, local[0].logprobs, "stop"
        ),
        Generation("ignored", [1, 2, 3], [7, 8], [-0.5, -0.25], "length"),
    ]
    rollout = RolloutPolicy(ScriptedEngine(answers), tiny_policy)
    assert rollout.tokenizer is tiny_policy.tokenizer
    gens = rollout.generate(observations, params)
    assert [g.prompt_ids for g in gens] == [g.prompt_ids for g in local]
    assert gens[0].text == local[0].text  # decoded from the ids, as HFPolicy does
    assert gens[1].response_ids == [7, 8] and gens[1].logprobs == [-0.5, -0.25]
    assert gens[1].text == tiny_policy.tokenizer.decode([7, 8], skip_special_tokens=True)
    assert gens[1].extra["engine_text"] == "ignored" and gens[1].finish_reason == "length"
    assert rollout.pop_metrics() == {
        "rollout/engine_prompt_mismatch_frac": 0.5,  # the second engine saw another prompt
        "rollout/engine_banned_token_frac": 0.0,
    }

    image_pad = tiny_policy.image_token_id
    banned = [Generation("x", [], [image_pad], [-1.0], "stop")]
    with_placeholder = RolloutPolicy(ScriptedEngine(banned), tiny_policy)
    with_placeholder.generate(observations[:1], params)
    assert with_placeholder.pop_metrics()["rollout/engine_banned_token_frac"] == 1.0
    missing = [Generation("some text", [], [], [], "stop")]
    with pytest.raises(TokenIdsMissing, match="token ids"):
        RolloutPolicy(ScriptedEngine(missing), tiny_policy).generate(observations[:1], params)
    short = [Generation("x", [], [5, 6], [-1.0], "stop")]
    with pytest.raises(TokenIdsMissing, match="1 log-probs for 2 tokens"):
        RolloutPolicy(ScriptedEngine(short), tiny_policy).generate(observations[:1], params)


class FakeCompletions:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body, self.calls = body, []

    def create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return openai.types.chat.ChatCompletion.model_validate(self.body)


def _completion(content: list[dict[str, Any]], **choice: Any) -> dict[str, Any]:
    return {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{
            "index": 0, "finish_reason": "stop", "logprobs": {"content": content},
            "message": {"role": "assistant", "content": "hi"}, **choice,
        }],
    }  # fmt: skip


def test_openai_policy_reads_vllm_token_ids_from_logprob_tokens() -> None:
    content = [
        {"token": f"token_id:{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
        for i, lp in ((0, -0.5), (42, -1.0))
    ]
    completions = FakeCompletions(_completion(content))
    client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=completions))
    policy = OpenAIPolicy(
        "m", client=client, logprobs=True, return_token_ids=True, tokens_as_ids=True
    )
    (gen,) = policy.generate(make_observations(["x"]), GenerationParams(max_new_tokens=3))
    assert gen.response_ids == [0, 42] and gen.logprobs == [-0.5, -1.0]
    extra = completions.calls[0]["extra_body"]
    assert extra == {"return_token_ids": True, "return_tokens_as_token_ids": True}

    # ``token_ids`` on the choice wins; plain token strings give no ids
    with_ids = FakeCompletions(_completion(content, token_ids=[5, 6]))
    policy.client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=with_ids))
    assert policy.generate(make_observations(["x"]))[0].response_ids == [5, 6]
    words = [{"token": "hi", "logprob": -0.5, "bytes": None, "top_logprobs": []}]
    plain = FakeCompletions(_completion(words))
    policy.client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=plain))
    assert policy.generate(make_observations(["x"]))[0].response_ids == []


# -- vLLM: the worker extension, the in-process engine, the server -----------------------------


class StandInWorker(VLLMWorkerExtension):
    """What vLLM's worker offers the extension: ``model_runner.model.load_weights``."""

    def __init__(self, model: torch.nn.Module) -> None:
        def load_weights(weights):
            loaded = []
            with torch.no_grad():
                params = dict(export_weights(model))
                for name, tensor in weights:
                    params[name].copy_(tensor)
                    loaded.append(name)
            return set(loaded)

        self.served_model = model
        self.model_runner = types.SimpleNamespace(
            model=types.SimpleNamespace(load_weights=load_weights)
        )


def test_the_worker_extension_adds_only_prefixed_names() -> None:
    own = [n for n in vars(VLLMWorkerExtension) if not n.startswith("__")]
    assert own and all(n.startswith(("odyssey_", "_odyssey_")) for n in own)
    qualified = f"{VLLMWorkerExtension.__module__}.{VLLMWorkerExtension.__name__}"
    assert qualified == VLLM_WORKER_EXTENSION  # what vLLM imports


class StandInLLM:
    """``vllm.LLM`` as the colocated engine uses it; ``collective_rpc`` calls the worker."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.worker = StandInWorker(load_model(model))
        self.calls: list[Any] = []

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up", tags))

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")

    def collective_rpc(self, method: str, args: tuple = ()) -> list[Any]:
        self.calls.append((method, [len(args[0])]))
        return [getattr(self.worker, method)(*args)]

    def generate(self, prompts: list, sampling: list, use_tqdm: bool) -> list:
        self.calls.append(("generate", prompts, sampling))
        step = {7: types.SimpleNamespace(logprob=-0.5)}, {9: types.SimpleNamespace(logprob=-1.5)}
        completion = types.SimpleNamespace(
            text="x", token_ids=[7, 9], logprobs=list(step), finish_reason="stop"
        )
        return [types.SimpleNamespace(outputs=[completion], prompt_token_ids=[]) for _ in prompts]


def test_in_process_engine_sleeps_wakes_and_loads_buckets(
    tiny_model_dir: Path, monkeypatch
) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")  # unset now, restored afterwards
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=StandInLLM))
    engine = VLLMPolicy(tiny_model_dir, colocate=True, engine_kwargs={"max_model_len": 512})
    llm = engine.llm
    assert engine.in_process and llm.kwargs["worker_extension_cls"] == VLLM_WORKER_EXTENSION
    assert llm.kwargs["enable_sleep_mode"] and llm.kwargs["max_model_len"] == 512

    trainer = _perturbed(load_model(tiny_model_dir))
    target = VLLMEngineTarget(engine, bucket_bytes=400_000, sleep_level=2)
    target.sleep()
    report = target.push(trainer, verify=True)
    expected = weights_checksum(export_weights(trainer))
    assert report.sent == expected and report.served == expected
    assert weights_checksum(export_weights(llm.worker.served_model)) == expected

    loads = [c for c in llm.calls if isinstance(c, tuple) and c[0] == "odyssey_load_weights"]
    assert llm.calls[:2] == [("sleep", 2), ("wake_up", ["weights"])]
    assert llm.calls[-2:] == ["reset_prefix_cache", ("wake_up", ["kv_cache"])]
    assert len(loads) == len(list(iter_buckets(export_weights(trainer), 400_000))) > 2
    assert sum(c[1][0] for c in loads) == expected.tensors

    llm.calls.clear()
    target.sleep()
    engine.sleep(1)  # already asleep: not sent twice
    with pytest.raises(RuntimeError, match="wake the weights"):
        engine.load_weights([])
    engine.wake_up()
    assert llm.calls == [("sleep", 2), ("wake_up", ["kv_cache", "weights"])]


def test_vllm_backend_settings_build_a_colocated_rollout(
    tiny_policy, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    fake = types.SimpleNamespace(LLM=StandInLLM, SamplingParams=lambda **kwargs: kwargs)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    settings = RolloutBackendSettings.model_validate(
        {"kind": "vllm", "engine_kwargs": {"dtype": "bfloat16"}, "sleep_level": 2}
    )
    rollout, hooks = rollout_backend(settings, tiny_policy, tmp_path)
    (hook,) = hooks
    engine = rollout.engine
    assert isinstance(rollout, RolloutPolicy) and isinstance(engine, VLLMPolicy)
    assert isinstance(hook.target, VLLMEngineTarget) and hook.target.sleep_level == 2
    # the engine starts from the trainer's current weights, exported beside the run
    start = tmp_path / "rollout-weights" / "engine-start-0"
    assert weights_checksum(export_weights(engine.llm.worker.served_model)) == weights_checksum(
        export_weights(tiny_policy.model)
    )
    assert (start / "config.json").is_file() and engine.llm.kwargs["dtype"] == "bfloat16"

    observations = make_observations(["Level 1-1."], seed=4)
    (gen,) = rollout.generate(observations, GenerationParams(seed=3, max_new_tokens=4))
    _, prompts, sampling = engine.llm.calls[-1]
    assert prompts[0]["prompt"] == tiny_policy.prompt_text(observations[0])
    assert sampling[0]["seed"] == 3 and sampling[0]["max_tokens"] == 4
    assert set(sampling[0]["logit_bias"]) == set(tiny_policy.banned_ids)
    assert (
        gen.prompt_ids
        == tiny_policy.generate(observations, GenerationParams(max_new_tokens=1))[0].prompt_ids
    )
    assert gen.response_ids == [7, 9] and gen.logprobs == [-0.5, -1.5]

    assert rollout_backend(RolloutBackendSettings(), tiny_policy, tmp_path) == (tiny_policy, [])
    unsynced = settings.model_copy(update={"sync": False})
    assert rollout_backend(unsynced, tiny_policy, tmp_path)[1] == []


def vllm_dev_server(worker: StandInWorker) -> tuple[FastAPI, list[Any]]:
    """vLLM's dev-mode routes as the weight sync calls them (``/collective_rpc``: a method
    name and string args, answered ``{"results": [one per worker]}``)."""
    app, calls = FastAPI(), []

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> dict[str, Any]:
        body = await request.json()
        calls.append(body)
        assert all(isinstance(a, str) for a in body.get("args", []))
        return {"results": [getattr(worker, body["method"])(*body["args"])]}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> None:
        calls.append("reset_prefix_cache")

    return app, calls


def test_vllm_server_target_reloads_from_a_folder(tiny_model_dir: Path, tmp_path) -> None:
    worker = StandInWorker(load_model(tiny_model_dir))
    app, calls = vllm_dev_server(worker)
    trainer = _perturbed(load_model(tiny_model_dir))
    with ServerThread(app) as server:
        target = VLLMServerTarget(server.url + "/v1", tmp_path / "sync", dtype="bfloat16")
        report = target.push(trainer, verify=True)
        second = target.push(trainer, verify=False)
    expected = weights_checksum(export_weights(trainer), dtype="bfloat16")
    assert report.sent == expected and report.served == expected and second.served is None
    assert calls[0] == {
        "method": "odyssey_reload_from_path",
        "args": [str((tmp_path / "sync" / "weights-000001").resolve()), "1"],
    }
    assert calls[1] == "reset_prefix_cache" and calls[2]["args"][1] == "0"
    assert [p.name for p in (tmp_path / "sync").iterdir()] == ["weights-000002"]


# -- the hook ---------------------------------------------------------------------------------


class LyingTarget:
    shared = False

    def __init__(self, served_value: str) -> None:
        self.served_value, self.slept = served_value, 0

    def sleep(self) -> None:
        self.slept += 1

    def push(self, model, *, verify: bool) -> SyncReport:
        sent = weights_checksum(export_weights(model))
        served = type(sent)(self.served_value, sent.tensors, sent.bytes, sent.dtype)
        return SyncReport(sent, served if verify else None, 0.0, 1)


def test_weight_sync_stops_on_a_checksum_mismatch_and_verifies_every_n() -> None:
    model = torch.nn.Linear(2, 2)
    trainer = types.SimpleNamespace(policy=types.SimpleNamespace(model=model))
    good = weights_checksum(export_weights(model)).value
    hook = WeightSync(LyingTarget(good), verify_every=2)
    assert hook.episode_starts(trainer) is None and hook.synced  # pushed before the rollout
    assert hook.episode_starts(trainer) is None and hook.pushes == 1  # only once
    assert "weight_sync/verified" not in hook.on_step_end(trainer, None)  # push 2 of every 2
    assert hook.on_step_end(trainer, None)["weight_sync/verified"] == 1.0
    hook.on_batch(trainer, None)
    assert hook.target.slept == 1
    with pytest.raises(WeightSyncError, match="other weights than the trainer's"):
        WeightSync(LyingTarget("sha256:0"), verify_every=1).on_step_end(trainer, None)
