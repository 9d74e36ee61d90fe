"""Build a tiny, randomly initialised Qwen3-VL checkpoint entirely offline.

The tiny model is a real ``Qwen3VLForConditionalGeneration`` with a real processor folder
(tokenizer, image processor, chat template), only very small. Tests and CI load it through
exactly the same functions as a production checkpoint, so everything downstream (prompting,
sampling, scoring, LoRA) is exercised without a download or a GPU.

The tokenizer is a byte-level BPE trained here, on the project's own prompt and answer text,
with the same pre-tokenizer as Qwen's and the Qwen-VL special tokens, so token ids are few
(the embedding table stays small) while chat prompts look like a real model's.

The folder is built beside its target under a temporary name and renamed into place when
complete, with :data:`BUILD_MARKER` written last: a folder without the marker (a build killed
part-way, by a signal or a full disk, or one written in place by an older version) is partial
and :func:`ensure_tiny_model` builds it again; ``config.json`` alone proves nothing.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
from pathlib import Path
from typing import Any

from odyssey_core.common.files import atomic_write, replace_folder
from odyssey_core.protocol import (
    GAMEBOY_SPACE,
    build_turn_text,
    format_response,
    get_system_prompt,
)

__all__ = [
    "BUILD_MARKER",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "ensure_tiny_model",
    "tiny_model_built",
    "training_corpus",
]

#: written last into a tiny model folder, with the build's arguments: the folder is complete
BUILD_MARKER = "odyssey_tiny_build.json"

# The Qwen-VL control tokens. Their ids come first in the tiny vocabulary (0..13); the model
# config and the processor look them up by name, so the exact ids do not matter.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Same splitting rule as the Qwen2/Qwen3 tokenizers, so text is cut into words the same way.
_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# A ChatML template in the Qwen-VL layout: an image becomes
# <|vision_start|><|image_pad|><|vision_end|>, which the processor expands to one pad token per
# merged patch. Message content may be a plain string or a list of {"type": ...} parts.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' or 'video' in part -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in part -%}"
    "{{- part['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# Small enough that a 160x144 Game Boy frame becomes 8x10 patches (20 merged tokens).
TINY_PATCH_SIZE = 16
TINY_MERGE_SIZE = 2
TINY_MIN_PIXELS = 32 * 32
TINY_MAX_PIXELS = 192 * 192

_SCENES = (
    "the hero stands on flat ground",
    "Mario is on a brick platform",
    "a gap opens just ahead",
    "an enemy walks toward me from the right",
    "a Goomba is close on the left",
    "a pipe blocks the way",
    "a tall wall rises ahead",
    "coins float above a block",
    "the screen has scrolled to a new area",
    "a moving platform drifts over a pit",
    "nothing dangerous is in sight",
    "the goal flag is visible at the far right",
    "a flying turtle swoops down from above",
    "spikes line the floor of a narrow valley",
    "a question block hangs over my head",
    "the ledge ends at a deep chasm",
    "stairs of stone blocks climb to the right",
    "two enemies patrol the bridge together",
    "the timer shows little time left",
    "a falling platform shakes under my feet",
    "water fills the bottom of the screen",
    "a cannon fires bullets from the wall",
)
_PLANS = (
    "I will jump forward to clear the gap",
    "walking right keeps me moving toward the goal",
    "I should wait for the enemy to pass",
    "running first lets me jump farther",
    "I will stomp the enemy by landing on it",
    "a longer jump should get over the pipe",
    "I have been stuck here, so I try something different",
    "crouching is not useful here, so I keep going right",
    "I go back left to get a running start",
    "holding jump for several turns reaches the higher platform",
    "timing matters, so I pause until the platform arrives",
    "hitting the block from below may release a power-up",
    "climbing the stairs one step at a time is safest",
    "dashing across quickly avoids the falling platform",
    "staying still lets the bullet fly past",
)


def training_corpus(seed: int = 0, n_responses: int = 600) -> list[str]:
    """The text the tiny tokenizer is trained on: prompts, turn texts and example answers."""
    rng = random.Random(seed)
    texts: list[str] = []
    for game in ("odland", "mario"):
        texts.append(get_system_prompt(game))
    for world in range(1, 5):
        for stage in range(1, 4):
            level = f"{world}-{stage}"
            texts.append(build_turn_text(level))
            texts.extend(build_turn_text(level, turn) for turn in rng.sample(range(400), 8))
    actions = GAMEBOY_SPACE.legal_actions()
    for action in actions:  # every legal button combination, at least once
        texts.append(format_response(rng.choice(_SCENES), rng.choice(_PLANS), action))
    for _ in range(n_responses):
        perception = ". ".join(rng.sample(_SCENES, k=rng.randint(1, 3))).capitalize() + "."
        reasoning = rng.choice(_PLANS).capitalize() + "."
        texts.append(format_response(perception, reasoning, rng.choice(actions)))
    return texts


def build_tiny_tokenizer(vocab_size: int = 1024, seed: int = 0) -> Any:
    """A byte-level BPE ``Qwen2Tokenizer`` trained on :func:`training_corpus`."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(training_corpus(seed), trainer=trainer)

    # Re-create it through the same class a real Qwen checkpoint uses, so loading, special
    # token handling and decoding follow the production code path.
    state = json.loads(bpe.to_str())
    merges = [
        tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["model"]["merges"]
    ]
    tokenizer = Qwen2Tokenizer(
        vocab=state["model"]["vocab"],
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=[
            t for t in SPECIAL_TOKENS if t not in ("<|im_end|>", "<|endoftext|>")
        ],
        model_max_length=32768,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_config(tokenizer: Any) -> Any:
    """A ~0.9M-parameter Qwen3-VL config whose special-token ids match ``tokenizer``."""
    from transformers import Qwen3VLConfig

    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    text_config = {
        "vocab_size": len(tokenizer),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        # The three M-RoPE sections (time, height, width) split head_dim / 2 frequencies.
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [4, 6, 6],
            "mrope_interleaved": True,
        },
        "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": None,
        "eos_token_id": ids["<|im_end|>"],
    }
    vision_config = {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "patch_size": TINY_PATCH_SIZE,
        "spatial_merge_size": TINY_MERGE_SIZE,
        "temporal_patch_size": 2,
        "out_hidden_size": 128,  # must equal the text hidden size
        "num_position_embeddings": 64,  # an 8x8 learned grid, interpolated per image
        "deepstack_visual_indexes": [0],  # feeds the first text layer, as in the real model
    }
    return Qwen3VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
        pad_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
    )


def build_tiny_model(
    out_dir: str | Path, seed: int = 0, *, zero_mean_patches: bool = False
) -> Path:
    """Write a tiny random Qwen3-VL checkpoint (weights, config, processor) to ``out_dir``.

    Built beside ``out_dir`` under a temporary name, :data:`BUILD_MARKER` written last, then
    swapped in for whatever ``out_dir`` held (nothing, an empty folder, a partial or complete
    tiny model; any other non-empty folder is refused), so ``out_dir`` is never seen partial.

    Deterministic: the same ``seed`` gives byte-identical tokenizer files and identical
    weights. Returns the folder, which :func:`odyssey_core.models.load_model` and
    :func:`odyssey_core.models.load_processor` accept like any real checkpoint. Its processor
    files name the stock ``Qwen3VLProcessor`` with a video processor config (see
    :mod:`odyssey_core.models.processor`), so transformers and vLLM load the folder where
    torchvision is installed, wherever it was built.

    ``zero_mean_patches`` makes every patch-embedding filter sum to zero. A random filter
    otherwise mostly measures a patch's mean brightness, and on game frames (a flat
    background almost everywhere) that constant swamps the sprites: the default tower's
    output varies across odland frames by ~2% of its norm, the zero-mean one's by ~4%, which
    is what lets a frozen random tower tell frames apart (see bench/RESULTS.md, SFT).
    """
    out = Path(out_dir).absolute()
    if _holds_other_files(out):
        raise FileExistsError(
            f"{out} exists and holds files that are not a tiny model; building would replace "
            "them: pass a new or empty folder"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_partials(out)
    staging = out.parent / f".{out.name}.partial-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        _write_tiny_model(staging, seed, zero_mean_patches)
        build = _build_record(seed, zero_mean_patches)
        atomic_write(staging / BUILD_MARKER, json.dumps(build, indent=1, sort_keys=True))
        if not tiny_model_built(out, seed, zero_mean_patches=zero_mean_patches):
            replace_folder(staging, out)  # another process may have just built the same one
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Path(out_dir)


def tiny_model_built(
    folder: str | Path, seed: int | None = None, *, zero_mean_patches: bool | None = None
) -> bool:
    """Whether ``folder`` holds a complete tiny model (its :data:`BUILD_MARKER`), built with
    ``seed`` and ``zero_mean_patches`` where they are given."""
    marker = Path(folder) / BUILD_MARKER
    try:
        build = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(build, dict):
        return False
    return (seed is None or build.get("seed") == seed) and (
        zero_mean_patches is None or build.get("zero_mean_patches") == zero_mean_patches
    )


def ensure_tiny_model(
    out_dir: str | Path, seed: int = 0, *, zero_mean_patches: bool = False
) -> Path:
    """``out_dir`` holding the tiny model of ``seed``: kept when it is complete and built with
    these arguments, built (again) otherwise, e.g. after a build was killed part-way."""
    out = Path(out_dir)
    if tiny_model_built(out, seed, zero_mean_patches=zero_mean_patches):
        return out
    return build_tiny_model(out, seed, zero_mean_patches=zero_mean_patches)


def _build_record(seed: int, zero_mean_patches: bool) -> dict[str, Any]:
    return {"builder": __name__, "seed": seed, "zero_mean_patches": zero_mean_patches}


def _holds_other_files(out: Path) -> bool:
    """A non-empty folder that is no tiny model, complete or partial (a partial one written
    in place has ``config.json``): a folder a build must not replace."""
    if not out.is_dir():
        return out.exists()
    if not any(out.iterdir()):
        return False
    return not ((out / BUILD_MARKER).is_file() or (out / "config.json").is_file())


def _remove_dead_partials(out: Path) -> None:
    """Remove the temporary folders of builds of ``out`` killed on this host."""
    pattern = re.compile(
        rf"^\.{re.escape(out.name)}\.partial-{re.escape(socket.gethostname())}-(\d+)"
    )
    for leftover in out.parent.glob(f".{out.name}.partial-*"):
        match = pattern.match(leftover.name)
        if match is not None and not _alive(int(match.group(1))):
            shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _write_tiny_model(folder: Path, seed: int, zero_mean_patches: bool) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

    from odyssey_core.models.processor import OdysseyVLProcessor, make_image_processor

    tokenizer = build_tiny_tokenizer(seed=seed)
    config = tiny_config(tokenizer)

    # Initialise under a private generator state so building never disturbs the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    if zero_mean_patches:
        with torch.no_grad():
            weight = model.model.visual.patch_embed.proj.weight  # (out, c, t, h, w)
            weight -= weight.mean(dim=(1, 2, 3, 4), keepdim=True)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
    )
    model.save_pretrained(folder, safe_serialization=True)

    image_processor = make_image_processor(
        patch_size=TINY_PATCH_SIZE,
        merge_size=TINY_MERGE_SIZE,
        min_pixels=TINY_MIN_PIXELS,
        max_pixels=TINY_MAX_PIXELS,
    )
    processor = OdysseyVLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    processor.save_pretrained(folder)
