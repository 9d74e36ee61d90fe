"""The dataset folder contract, and the whole pipeline (library and CLI) on a tiny run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from odyssey_core.data.cli import curate, curate_group, load_curate_config
from odyssey_core.data.dataset import DATASET_SCHEMA, load_dataset, split_of
from odyssey_core.protocol import parse_response

TINY = {
    "record": {
        "agent": "random",
        "agent_kwargs": {"seed": 1},
        "levels": ["1-1", "1-2"],
        "max_turns": 30,
    },
    "sampling": {"frames_per_level": 10},
    "validation": {"max_failed_share": 0.0},
    "val_share": 0.3,
    "show_progress": False,
}


def test_split_is_a_function_of_the_hash() -> None:
    hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(2000)]
    splits = [split_of(h, 0.1) for h in hashes]
    assert splits == [split_of(h, 0.1) for h in hashes]
    assert 0.07 < splits.count("val") / 2000 < 0.13
    assert all(split_of(h, 0.0) == "train" for h in hashes)


def test_presets_load() -> None:
    tiny = load_curate_config("tiny")
    assert tiny.teacher.name == "programmatic" and tiny.record.levels == ["1-1", "1-2", "1-3"]
    assert tiny.sampling.frames_per_level * len(tiny.record.levels) == 300
    paper = load_curate_config("paper")
    assert paper.sampling.total_frames == 5000 and paper.teacher.name == "openai"
    with pytest.raises(ValueError):
        load_curate_config("tiny", {"sampling": {"typo": 1}})


def test_curate_writes_the_contract(tmp_path: Path) -> None:
    config = load_curate_config("tiny", TINY)
    dataset_dir = curate(config, tmp_path)
    assert dataset_dir == tmp_path / "dataset"
    table = pq.read_table(dataset_dir / "data.parquet")
    assert table.schema.equals(DATASET_SCHEMA)
    data = load_dataset(dataset_dir)
    assert 6 <= len(data) <= 20
    for row in data.rows:
        assert (
            row["sample_id"] == row["frame_hash"]
            and row["frame"] == f"frames/{row['frame_hash']}.png"
        )
        assert hashlib.sha256(data.frame_path(row).read_bytes()).hexdigest() == row["frame_hash"]
        assert row["game"] == "odland" and row["level"] in ("1-1", "1-2")
        assert row["turn_text"].startswith(f"Level {row['level']}.")
        assert list(parse_response(row["response"]).buttons) == row["buttons"]
        assert row["split"] == split_of(row["frame_hash"], 0.3) and row["teacher"] == "programmatic"
        assert row["source"] == "record:random"
    manifest = data.manifest
    assert manifest["num_samples"] == len(data) and manifest["config"]["val_share"] == 0.3
    assert sum(sum(c.values()) for c in manifest["levels"].values()) == len(data)
    assert (
        manifest["files"]["data.parquet"] == hashlib.sha256(data.data_path.read_bytes()).hexdigest()
    )
    for name in ("validation.json", "validation.html", "manifest.json"):
        assert (dataset_dir / name).is_file()
    assert not (dataset_dir / "quarantine.parquet").exists()
    assert len(list((dataset_dir / "frames").glob("*.png"))) == len(data)
    # Tampering with the data is noticed.
    (dataset_dir / "data.parquet").write_bytes(b"x" + data.data_path.read_bytes())
    with pytest.raises(ValueError, match="manifest"):
        load_dataset(dataset_dir)


def test_cli_stages(tmp_path: Path) -> None:
    import yaml

    config_file = tmp_path / "c.yaml"
    base = load_curate_config("tiny", TINY).model_dump(mode="json")
    base["record"]["levels"] = ["1-1"]
    config_file.write_text(yaml.safe_dump(base))
    runner = CliRunner()
    out = tmp_path / "out"
    for stage in ("record", "sample", "annotate", "validate", "build"):
        result = runner.invoke(
            curate_group, [stage, "--config", str(config_file), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
    manifest = json.loads((out / "dataset" / "manifest.json").read_text())
    assert set(manifest["levels"]) == {"1-1"}
    metrics = json.loads((out / "annotations" / "teacher_metrics.json").read_text())
    assert metrics["annotated"] == manifest["num_samples"]
    # A missing earlier stage is a clear CLI error, not a traceback.
    result = runner.invoke(
        curate_group, ["sample", "--config", str(config_file), "--out", str(tmp_path / "empty")]
    )
    assert result.exit_code != 0 and "run record" in result.output
