"""The tiny Qwen3-VL, checkpoint loading, the torchvision-free processor, and LoRA."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import model_fixtures
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from model_fixtures import make_observations
from safetensors.torch import load_file

from odyssey_core.envs import make_env
from odyssey_core.models.loading import CheckpointError, load_model, load_processor
from odyssey_core.models.processor import OdysseyVLProcessor, prepare_frame
from odyssey_core.models.tiny import SPECIAL_TOKENS, build_tiny_model
from odyssey_core.protocol import format_response, get_system_prompt

# Shared session fixtures (see tests/model_fixtures.py), bound here so pytest finds them.
tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy
tiny_qwen25_dir = model_fixtures.tiny_qwen25_dir


# ----------------------------------------------------------------------------- tiny model


def test_tiny_build_is_deterministic(tiny_model_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    first, second = (
        load_file(tiny_model_dir / "model.safetensors"),
        load_file(again / "model.safetensors"),
    )
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "processor_config.json"):
        assert (tiny_model_dir / name).read_bytes() == (again / name).read_bytes(), name

    other = build_tiny_model(tmp_path / "other", seed=1)
    weights = load_file(other / "model.safetensors")
    assert any(not torch.equal(first[n], weights[n]) for n in first)


def _frame_spread(model_dir: Path, frames: list[np.ndarray]) -> float:
    """How much the vision tower's output varies across ``frames``, relative to its norm."""
    model, processor = load_model(model_dir), load_processor(model_dir)
    inputs = processor.image_processor(images=frames, return_tensors="pt")
    with torch.no_grad():
        out = model.model.visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
    features = out.pooler_output.reshape(len(frames), -1, out.pooler_output.shape[-1])
    return float(features.std(dim=0).mean() / features.norm(dim=-1).mean())


def test_zero_mean_patches_let_the_random_tower_tell_frames_apart(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    centred = build_tiny_model(tmp_path / "centred", seed=0, zero_mean_patches=True)
    default, zero_mean = (
        load_file(tiny_model_dir / "model.safetensors"),
        load_file(centred / "model.safetensors"),
    )
    name = "model.visual.patch_embed.proj.weight"
    assert zero_mean[name].sum(dim=(1, 2, 3, 4)).abs().max() < 1e-5
    assert not torch.equal(default[name], zero_mean[name])
    assert all(torch.equal(default[n], zero_mean[n]) for n in default if n != name)
    # Frames of the real emulator: a mostly flat sky and ground, a few sprites and tiles.
    env = make_env("odland-1-1")
    obs, _ = env.reset(seed=0)
    frames = []
    for i in range(8):
        for _ in range(4):
            obs, _, terminated, truncated, _ = env.step(("a", "right") if i % 2 else ("right",))
            if terminated or truncated:
                obs, _ = env.reset(seed=i)
        frames.append(obs.image)
    env.close()
    spread, default_spread = _frame_spread(centred, frames), _frame_spread(tiny_model_dir, frames)
    assert spread > 1.5 * default_spread  # measured: 2.1x on these frames


def test_tiny_model_is_small_and_consistent(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir)
    processor = load_processor(tiny_model_dir)
    tokenizer = processor.tokenizer
    n_params = sum(p.numel() for p in model.parameters())
    assert 200_000 < n_params < 2_000_000
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert model.config.text_config.vocab_size == len(tokenizer)
    assert 900 <= len(tokenizer) <= 2000
    for attr, token in [
        ("image_token_id", "<|image_pad|>"),
        ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"),
        ("vision_end_token_id", "<|vision_end|>"),
    ]:
        assert getattr(model.config, attr) == tokenizer.convert_tokens_to_ids(token)
    assert tokenizer.eos_token == "<|im_end|>"
    for token in SPECIAL_TOKENS:  # each control token is one id and survives decoding
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tokenizer.decode(ids) == token


def test_tiny_tokenizer_round_trips_project_text(tiny_model_dir: Path) -> None:
    tokenizer = load_processor(tiny_model_dir).tokenizer
    samples = [
        get_system_prompt("mario"),
        format_response("A pit lies ahead.", "Jump now.", ("a", "right")),
        "Level 9-9, turn 123. Unseen words: zebra ünïcödé 🎮",
    ]
    for text in samples:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    # Trained on the protocol text, so a typical answer is compact.
    answer = format_response("The hero stands on flat ground.", "I will jump.", ("a", "right"))
    assert len(tokenizer(answer)["input_ids"]) < len(answer) / 2.5


def test_chat_template_and_image_tokens(tiny_model_dir: Path) -> None:
    processor = load_processor(tiny_model_dir)
    messages = [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "TASK"}]},
        {"role": "assistant", "content": "ANSWER"},
    ]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nSYSTEM<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>TASK<|im_end|>\n"
        "<|im_start|>assistant\nANSWER<|im_end|>\n<|im_start|>assistant\n"
    )
    frame = np.zeros((144, 160, 3), dtype=np.uint8)
    batch = processor(text=[text], images=[frame], return_tensors="pt")
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    # 144x160 snaps to 128x160 = 8x10 patches of 16 -> 20 tokens after the 2x2 merge.
    assert batch["image_grid_thw"].tolist() == [[1, 8, 10]]
    assert int((batch["input_ids"] == image_id).sum()) == 20
    assert int(batch["mm_token_type_ids"].sum()) == 20


def test_autoprocessor_returns_our_processor(tiny_model_dir: Path) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model_dir, local_files_only=True)
    assert isinstance(processor, OdysseyVLProcessor)
    assert type(processor.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    assert not hasattr(processor, "video_processor")


def test_load_processor_reads_a_real_style_folder(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Real Qwen3-VL folders name Qwen3VLProcessor and a (torchvision) fast image processor."""
    folder = tmp_path / "real-style"
    shutil.copytree(tiny_model_dir, folder)
    image_config = json.loads((folder / "processor_config.json").read_text())["image_processor"]
    image_config.update(
        image_processor_type="Qwen2VLImageProcessorFast", processor_class="Qwen3VLProcessor"
    )
    (folder / "processor_config.json").unlink()
    (folder / "preprocessor_config.json").write_text(json.dumps(image_config))
    (folder / "video_preprocessor_config.json").write_text(
        json.dumps({"video_processor_type": "Qwen3VLVideoProcessor", "patch_size": 16})
    )
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["processor_class"] = "Qwen3VLProcessor"
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))

    processor = load_processor(folder)
    assert isinstance(processor, OdysseyVLProcessor)
    batch = processor(
        text=["<|vision_start|><|image_pad|><|vision_end|>hi"],
        images=[np.zeros((144, 160, 3), dtype=np.uint8)],
        return_tensors="pt",
    )
    assert batch["image_grid_thw"].tolist() == [[1, 8, 10]]


@pytest.mark.parametrize(
    ("remove", "named"),
    [
        ("config.json", "config.json"),
        ("model.safetensors", "safetensors"),
        ("tokenizer.json", "tokenizer"),
        ("processor_config.json", "preprocessor config"),
    ],
)
def test_incomplete_checkpoint_names_the_missing_file(
    tiny_model_dir: Path, tmp_path: Path, remove: str, named: str
) -> None:
    folder = tmp_path / "partial"
    shutil.copytree(tiny_model_dir, folder)
    (folder / remove).unlink()
    loader = load_processor if remove in ("tokenizer.json", "processor_config.json") else load_model
    with pytest.raises(CheckpointError, match=named):
        loader(folder)


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    for loader in (load_model, load_processor):
        with pytest.raises(CheckpointError, match="does not exist"):
            loader(tmp_path / "nope")


def test_qwen25_folder_loads_through_the_same_functions(tiny_qwen25_dir: Path) -> None:
    from odyssey_core.policy import GenerationParams
    from odyssey_core.policy.hf import HFPolicy

    model = load_model(tiny_qwen25_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    policy = HFPolicy(model, load_processor(tiny_qwen25_dir))
    obs = make_observations(["Level 1-1.", "Level 1-2, turn 3. Look at the screen."])
    gens = policy.generate(obs, GenerationParams(max_new_tokens=6, seed=0))
    scores = policy.score(
        [g.prompt_ids for g in gens], [g.response_ids for g in gens], [o.image for o in obs]
    )
    for gen, score in zip(gens, scores, strict=True):
        torch.testing.assert_close(score.detach(), torch.tensor(gen.logprobs), atol=1e-4, rtol=0)


def test_load_model_dtype(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        load_model(tiny_model_dir, dtype="float8")


def test_prepare_frame() -> None:
    frame = np.arange(144 * 160 * 3, dtype=np.uint8).reshape(144, 160, 3)
    assert prepare_frame(frame).size == (160, 144)
    big = prepare_frame(frame, image_scale=8)
    assert big.size == (1280, 1152)
    # Nearest-neighbour: every source pixel becomes an 8x8 block.
    assert np.array_equal(np.asarray(big)[::8, ::8], frame)
    assert prepare_frame(frame, image_size=(320, 288)).size == (320, 288)
    with pytest.raises(ValueError):
        prepare_frame(frame, image_scale=2, image_size=(10, 10))
    with pytest.raises(ValueError):
        prepare_frame(frame, image_scale=0)


def test_cli_init_tiny(tmp_path: Path) -> None:
    from odyssey_core.models.cli import model_group

    result = CliRunner().invoke(model_group, ["init-tiny", str(tmp_path / "cli"), "--seed", "3"])
    assert result.exit_code == 0, result.output
    for name in ("config.json", "model.safetensors", "tokenizer.json", "processor_config.json"):
        assert (tmp_path / "cli" / name).is_file()
    result = CliRunner().invoke(
        model_group, ["init-tiny", str(tmp_path / "zm"), "--seed", "3", "--zero-mean-patches"]
    )
    assert result.exit_code == 0, result.output
    weights = load_file(tmp_path / "zm" / "model.safetensors")
    filters = weights["model.visual.patch_embed.proj.weight"]
    assert filters.sum(dim=(1, 2, 3, 4)).abs().max() < 1e-5


# ----------------------------------------------------------------------------- LoRA


def _logits(policy, model, observations) -> torch.Tensor:
    """Full forward logits with images, through the policy's own input pipeline."""
    inputs, _ = policy.encode(observations)
    inputs["mm_token_type_ids"] = policy._mm_token_type_ids(inputs["input_ids"])
    with torch.no_grad():
        return model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            position_ids=policy._positions(inputs),
            pixel_values=inputs["pixel_values"],
            image_grid_thw=inputs["image_grid_thw"],
            mm_token_type_ids=inputs["mm_token_type_ids"],
        ).logits


def _randomise_lora(model) -> None:
    # Fresh adapters are the identity (B = 0); make them change the outputs.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)


@pytest.mark.parametrize("include_vision", [False, True])
def test_lora_trains_only_adapters(tiny_model_dir: Path, include_vision: bool) -> None:
    from odyssey_core.models.lora import LoraSettings, apply_lora, trainable_parameters

    model = apply_lora(load_model(tiny_model_dir), LoraSettings(r=4, include_vision=include_vision))
    trainable = trainable_parameters(model)
    assert trainable and all("lora_" in name for name in trainable)
    assert any("language_model" in name for name in trainable)
    assert any(".visual." in name for name in trainable) == include_vision
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert any("lm_head" in n for n in frozen) and any("embed_tokens" in n for n in frozen)


def test_lora_adapter_round_trip_and_merge(
    tiny_model_dir: Path, tmp_path: Path, tiny_policy
) -> None:
    from odyssey_core.models.lora import (
        LoraSettings,
        apply_lora,
        load_adapter,
        merge_and_save,
        save_adapter,
    )

    model = apply_lora(load_model(tiny_model_dir), LoraSettings(r=4, alpha=8, include_vision=True))
    _randomise_lora(model)
    model.eval()
    observations = make_observations(["Level 1-1.", "Level 2-3, turn 7."])
    adapted = _logits(tiny_policy, model, observations)
    base = _logits(tiny_policy, tiny_policy.model, observations)
    assert (adapted - base).abs().max() > 1e-3  # the adapter does something

    save_adapter(model, tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    reloaded = load_adapter(tiny_model_dir, tmp_path / "adapter")
    assert torch.equal(_logits(tiny_policy, reloaded, observations), adapted)

    merge_and_save(model, tmp_path / "merged", processor=tiny_policy.processor)
    merged = load_model(tmp_path / "merged")
    assert not any("lora" in name for name, _ in merged.named_parameters())
    torch.testing.assert_close(
        _logits(tiny_policy, merged, observations), adapted, atol=1e-5, rtol=0
    )
    # merge_and_save worked on a copy: the adapted model is unchanged
    assert torch.equal(_logits(tiny_policy, model, observations), adapted)
    assert isinstance(load_processor(tmp_path / "merged"), OdysseyVLProcessor)


def test_policy_runs_a_lora_model(tiny_model_dir: Path, tiny_policy) -> None:
    """The trainer's setup: sample with the adapted model, then score with gradients."""
    from odyssey_core.models.lora import LoraSettings, apply_lora
    from odyssey_core.policy import GenerationParams
    from odyssey_core.policy.hf import HFPolicy

    model = apply_lora(load_model(tiny_model_dir), LoraSettings(r=4, dropout=0.1))
    _randomise_lora(model)
    model.train()
    policy = HFPolicy(model, tiny_policy.processor)
    observations = make_observations(["Level 1-1.", "Level 4-2, turn 99. Look."])
    gens = policy.generate(observations, GenerationParams(max_new_tokens=5, seed=3))
    assert model.training  # generate switches dropout off only while it runs
    model.eval()
    with torch.enable_grad():
        scores = policy.score(
            [g.prompt_ids for g in gens],
            [g.response_ids for g in gens],
            [o.image for o in observations],
        )
        torch.stack([s.sum() for s in scores]).sum().backward()
    for gen, score in zip(gens, scores, strict=True):
        torch.testing.assert_close(score.detach(), torch.tensor(gen.logprobs), atol=1e-4, rtol=0)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)
