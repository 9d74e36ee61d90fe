"""Shared fixtures for the model and policy tests: tiny checkpoints built once per session.

Imported by ``test_models.py`` and ``test_policy_hf.py``. The builds are cached at module
level, so a fixture imported into several test modules still builds each checkpoint once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from odyssey_core.envs.base import Observation

# These models are far too small to gain from intra-op threads, and on a busy 2-core machine
# OpenMP threads waiting on each other make each tiny matmul hundreds of times slower.
torch.set_num_threads(1)

_CACHE: dict[str, object] = {}


def build_tiny_qwen25(out_dir: Path, seed: int = 0) -> Path:
    """A tiny random Qwen2.5-VL folder (same tokenizer, patch-14 image processor)."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from odyssey_core.models.processor import OdysseyVLProcessor, make_image_processor
    from odyssey_core.models.tiny import CHAT_TEMPLATE, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(seed=seed)
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
            },
            "eos_token_id": ids("<|im_end|>"),
            "bos_token_id": None,
            "pad_token_id": ids("<|endoftext|>"),
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
            "out_hidden_size": 64,
        },
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
    model.save_pretrained(out_dir)
    image_processor = make_image_processor(
        patch_size=14, merge_size=2, min_pixels=28 * 28, max_pixels=168 * 168
    )
    OdysseyVLProcessor(image_processor, tokenizer, chat_template=CHAT_TEMPLATE).save_pretrained(
        out_dir
    )
    return out_dir


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-VL checkpoint (seed 0); treat it as read-only."""
    if "qwen3" not in _CACHE:
        from odyssey_core.models.tiny import build_tiny_model

        _CACHE["qwen3"] = build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3-vl"), seed=0)
    return _CACHE["qwen3"]  # type: ignore[return-value]


@pytest.fixture(scope="session")
def tiny_qwen25_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if "qwen25" not in _CACHE:
        _CACHE["qwen25"] = build_tiny_qwen25(tmp_path_factory.mktemp("tiny-qwen2.5-vl"))
    return _CACHE["qwen25"]  # type: ignore[return-value]


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_dir: Path):
    """An ``HFPolicy`` on the tiny checkpoint, loaded once; do not modify its weights."""
    if "policy" not in _CACHE:
        from odyssey_core.policy.hf import HFPolicy

        _CACHE["policy"] = HFPolicy(tiny_model_dir, game="odland")
    return _CACHE["policy"]


def make_observations(texts: list[str], seed: int = 0, shape=(144, 160)) -> list[Observation]:
    """Random Game Boy sized frames with the given task texts."""
    rng = np.random.default_rng(seed)
    return [
        Observation(image=rng.integers(0, 256, (*shape, 3), dtype=np.uint8), text=text)
        for text in texts
    ]
