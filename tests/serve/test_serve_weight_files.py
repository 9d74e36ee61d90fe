"""The server's own safetensors reader and weights root: the same tensors as safetensors reads,
malformed files refused by name inside the root, nothing outside it, no blocking open."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from odyssey_core.serve.weights import (
    WeightFolderError,
    WeightsOutsideRoot,
    WeightsRoot,
    check_weights,
    open_safetensors,
)


def _raw_file(path: Path, header: dict, data: bytes, pad: int = 0) -> None:
    encoded = json.dumps(header).encode() + b" " * pad
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def test_tensors_match_what_safetensors_reads(tmp_path: Path) -> None:
    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.arange(7, dtype=torch.int64),
        "c": torch.randn(2, 2).to(torch.bfloat16),
        "empty": torch.zeros(0, 4),
        "flag": torch.tensor([True, False]),
    }
    save_file(tensors, str(tmp_path / "w.safetensors"))
    opened = open_safetensors(tmp_path / "w.safetensors", "w.safetensors")
    try:
        expected = load_file(str(tmp_path / "w.safetensors"))
        assert set(opened.tensors) == set(expected)
        for name, tensor in expected.items():
            assert opened.tensors[name].dtype == tensor.dtype
            assert torch.equal(opened.tensors[name], tensor), name
    finally:
        opened.close()


def test_an_unaligned_tensor_is_read_correctly(tmp_path: Path) -> None:
    values = torch.tensor([1.5, -2.25, 3.0], dtype=torch.float32)
    header = {
        "x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "y": {"dtype": "F32", "shape": [3], "data_offsets": [1, 13]},  # starts at an odd byte
    }
    _raw_file(tmp_path / "odd.safetensors", header, b"\x07" + values.numpy().tobytes())
    opened = open_safetensors(tmp_path / "odd.safetensors", "odd.safetensors")
    assert torch.equal(opened.tensors["y"], values) and int(opened.tensors["x"][0]) == 7
    opened.close()


@pytest.mark.parametrize(
    ("header", "data", "problem"),
    [
        ({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "offsets"),
        ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}}, b"\0" * 12, "offsets"),
        ({"x": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "unsupported"),
        ({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "negative"),
        ({"x": "not an entry"}, b"", "malformed"),
    ],
)
def test_malformed_headers_are_refused(tmp_path: Path, header, data, problem) -> None:
    _raw_file(tmp_path / "bad.safetensors", header, data)
    with pytest.raises(WeightFolderError, match=problem) as info:
        open_safetensors(tmp_path / "bad.safetensors", "sub/bad.safetensors")
    assert "sub/bad.safetensors" in str(info.value) and str(tmp_path) not in str(info.value)


def test_a_header_that_lies_about_its_length_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lie.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(WeightFolderError, match="longer than the file"):
        open_safetensors(tmp_path / "lie.safetensors", "lie.safetensors")
    (tmp_path / "json.safetensors").write_bytes(struct.pack("<Q", 4) + b"{{{{")
    with pytest.raises(WeightFolderError, match="not JSON"):
        open_safetensors(tmp_path / "json.safetensors", "json.safetensors")


def test_special_files_are_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.safetensors")  # opening it for reading would block for ever
    with pytest.raises(WeightFolderError, match="not a regular file"):
        open_safetensors(tmp_path / "pipe.safetensors", "pipe.safetensors")
    (tmp_path / "link.safetensors").symlink_to(tmp_path / "pipe.safetensors")
    with pytest.raises(WeightFolderError, match="cannot be opened"):  # O_NOFOLLOW
        open_safetensors(tmp_path / "link.safetensors", "link.safetensors")


def test_the_root_resolves_inside_and_refuses_outside(tmp_path: Path) -> None:
    root_path, outside = tmp_path / "root", tmp_path / "outside"
    (root_path / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (root_path / "in-link").symlink_to(root_path / "a", target_is_directory=True)
    (root_path / "out-link").symlink_to(outside, target_is_directory=True)
    (root_path / "loop").symlink_to(root_path / "loop")
    root = WeightsRoot(root_path)
    assert root.folder("a/b") == (root_path / "a" / "b").resolve()
    assert root.folder("a/b/../b") == (root_path / "a" / "b").resolve()
    assert root.folder("in-link") == (root_path / "a").resolve()  # a symlink inside is fine
    assert root.folder(str(root_path / "a")) == (root_path / "a").resolve()
    for path in ("..", "../outside", "out-link", str(outside), "/", "a/../../outside", "loop"):
        with pytest.raises(WeightsOutsideRoot):
            root.folder(path)
    with pytest.raises(WeightFolderError, match="NUL"):
        root.folder("a\x00b")
    with pytest.raises(WeightFolderError, match="no folder 'a/missing'"):
        root.folder("a/missing")
    with pytest.raises(ValueError, match="does not exist"):
        WeightsRoot(tmp_path / "nowhere")


def test_a_folder_swapped_for_a_link_after_the_check_cannot_lead_outside(
    tmp_path: Path,
) -> None:
    root_path, outside = tmp_path / "root", tmp_path / "outside"
    (root_path / "run" / "step").mkdir(parents=True)
    (outside / "step").mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(root_path / "run" / "step" / "model.safetensors"))
    save_file({"w": torch.ones(2)}, str(outside / "step" / "model.safetensors"))
    root = WeightsRoot(root_path)
    folder = root.folder("run/step")
    (path,) = root.weight_files(folder)
    inside = open_safetensors(path, "run/step/model.safetensors", root)
    assert torch.equal(inside.tensors["w"], torch.zeros(2))
    inside.close()

    # between the check and the open, a writer inside the root swaps `run` for a link out
    (root_path / "run").rename(root_path / "run-checked")
    (root_path / "run").symlink_to(outside, target_is_directory=True)
    followed = open_safetensors(path, "run/step/model.safetensors")  # the last name only
    assert torch.equal(followed.tensors["w"], torch.ones(2))  # the race a plain open loses
    followed.close()
    with pytest.raises(WeightFolderError, match=r"'run/step/model\.safetensors' cannot be opened"):
        open_safetensors(path, "run/step/model.safetensors", root)


def test_check_weights_compares_names_shapes_and_values(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2).half()  # served in float16
    root = WeightsRoot(tmp_path)
    good = {"weight": torch.randn(2, 3), "bias": torch.randn(2)}
    (tmp_path / "good").mkdir()
    save_file(good, str(tmp_path / "good" / "model.safetensors"))
    checked = check_weights(root, "good", model)
    assert checked.copy_into(model) == 2
    checked.close()
    assert torch.equal(model.weight, good["weight"].half())

    cases = {
        "names": ({"weight": good["weight"]}, "missing"),
        "shape": ({**good, "bias": torch.randn(3)}, "another shape"),
        "overflow": ({**good, "bias": torch.tensor([1e6, 0.0])}, "as float16"),  # inf in fp16
    }
    for folder, (tensors, problem) in cases.items():
        (tmp_path / folder).mkdir()
        save_file(tensors, str(tmp_path / folder / "model.safetensors"))
        with pytest.raises(WeightFolderError, match=problem):
            check_weights(root, folder, model)
    assert torch.equal(model.weight, good["weight"].half())  # nothing was copied
