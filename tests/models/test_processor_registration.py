"""Processor folders in the stock layout, and which class reads them back.

The tiny model (and every processor Odyssey saves) names ``Qwen3VLProcessor`` with a video
processor config, which transformers and vLLM build where torchvision is installed. Here
torchvision is missing: ``load_processor`` gives the image-only class, and after
``import odyssey_core.models`` so does ``AutoProcessor`` (checked in fresh processes, since
this one has long imported everything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import model_fixtures
import pytest

from odyssey_core.models.loading import load_processor
from odyssey_core.models.processor import (
    OdysseyVLProcessor,
    has_torchvision,
    names_stock_processor,
)

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_qwen25_dir = model_fixtures.tiny_qwen25_dir

ROOT = Path(__file__).resolve().parents[2]
no_torchvision = pytest.mark.skipif(has_torchvision(), reason="this machine has torchvision")

PROCESS_AN_IMAGE = """
import json, sys
import numpy as np
from transformers import AutoProcessor
processor = AutoProcessor.from_pretrained(sys.argv[1], local_files_only=True)
text = "<|im_start|>user\\n<|vision_start|><|image_pad|><|vision_end|>Level 1-1.<|im_end|>\\n"
batch = processor(text=[text], images=[np.zeros((144, 160, 3), np.uint8)], return_tensors="pt")
image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
print(json.dumps({
    "class": type(processor).__name__,
    "grid": batch["image_grid_thw"].tolist(),
    "image_tokens": int((batch["input_ids"] == image_pad).sum()),
}))
"""


def _python(code: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_saved_folders_name_the_stock_classes(tiny_model_dir: Path, tiny_qwen25_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "processor_config.json").read_text())
    assert config["processor_class"] == "Qwen3VLProcessor"
    image, video = config["image_processor"], config["video_processor"]
    assert video["video_processor_type"] == "Qwen3VLVideoProcessor"
    for key in ("patch_size", "merge_size", "temporal_patch_size", "image_mean", "image_std"):
        assert video[key] == image[key], key
    tokenizer = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert tokenizer["processor_class"] == "Qwen3VLProcessor"
    assert names_stock_processor(tiny_model_dir)

    config = json.loads((tiny_qwen25_dir / "processor_config.json").read_text())
    assert config["processor_class"] == "Qwen2_5_VLProcessor"
    assert config["video_processor"]["video_processor_type"] == "Qwen2VLVideoProcessor"
    assert config["video_processor"]["patch_size"] == 14


def test_a_processor_saved_again_keeps_the_stock_layout(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    load_processor(tiny_model_dir).save_pretrained(tmp_path / "again")
    again = json.loads((tmp_path / "again" / "processor_config.json").read_text())
    assert again == json.loads((tiny_model_dir / "processor_config.json").read_text())
    tokenizer = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
    assert tokenizer["processor_class"] == "Qwen3VLProcessor"
    assert names_stock_processor(tmp_path / "again")
    legacy = json.loads((tmp_path / "again" / "processor_config.json").read_text())
    legacy["processor_class"] = "OdysseyVLProcessor"
    (tmp_path / "again" / "processor_config.json").write_text(json.dumps(legacy))
    assert not names_stock_processor(tmp_path / "again")


@no_torchvision
def test_load_processor_gives_the_image_only_class_without_torchvision(
    tiny_model_dir: Path,
) -> None:
    processor = load_processor(tiny_model_dir)
    assert type(processor) is OdysseyVLProcessor
    assert not hasattr(processor, "video_processor")
    assert type(processor.image_processor).__name__ == "Qwen2VLImageProcessorPil"


@no_torchvision
@pytest.mark.parametrize("first", ["odyssey_core.models", "transformers"])
def test_autoprocessor_after_the_documented_import_processes_an_image(
    tiny_model_dir: Path, first: str
) -> None:
    imports = (
        "import odyssey_core.models\n"
        "assert 'transformers' not in sys.modules  # the package stays light to import\n"
        if first == "odyssey_core.models"
        else "from transformers import AutoProcessor\nimport odyssey_core.models\n"
    )
    result = _python("import sys\n" + imports + PROCESS_AN_IMAGE, tiny_model_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # 144x160 snaps to 128x160 = 8x10 patches of 16 -> 20 tokens after the 2x2 merge
    assert report == {"class": "OdysseyVLProcessor", "grid": [[1, 8, 10]], "image_tokens": 20}


@no_torchvision
def test_without_the_import_the_stock_class_needs_torchvision(tiny_model_dir: Path) -> None:
    """What the registration is for: stock transformers cannot build the stock class here."""
    result = _python(PROCESS_AN_IMAGE, tiny_model_dir)
    assert result.returncode != 0
    assert "Torchvision" in result.stderr or "torchvision" in result.stderr
