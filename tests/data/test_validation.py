"""Great Expectations validation of annotation rows, with quarantine and a failure threshold."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from odyssey_core.data.validation import ValidationConfig, ValidationFailed, validate_annotations
from odyssey_core.protocol import build_turn_text, format_response


def _rows(root: Path, n: int) -> list[dict]:
    rows = []
    (root / "frames").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / f"frames/{i}.png"
        Image.fromarray(np.full((144, 160, 3), i * 7 % 256, np.uint8)).save(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        final = root / f"frames/{digest}.png"
        path.rename(final)
        rows.append(
            {
                "sample_id": digest,
                "frame": f"frames/{digest}.png",
                "frame_hash": digest,
                "game": "odland",
                "level": "1-1",
                "turn_text": build_turn_text("1-1"),
                "response": format_response(
                    "The hero stands on the ground near a gap.", "Jump to clear it.", ("a", "right")
                ),
                "buttons": ["a", "right"],
                "source": "record:expert",
                "frame_index": i,
                "timestamp_s": i / 8,
                "teacher": "programmatic",
            }
        )
    return rows


def test_clean_rows_pass(tmp_path: Path) -> None:
    rows = _rows(tmp_path, 6)
    outcome = validate_annotations(rows, tmp_path, tmp_path / "v")
    assert len(outcome.passed) == 6 and not outcome.quarantined and outcome.summary["success"]
    report = json.loads(outcome.json_path.read_text())
    assert report["great_expectations"]["success"] is True
    assert "passed" in outcome.html_path.read_text()
    assert not (tmp_path / "v" / "quarantine.parquet").exists()


def test_bad_rows_are_quarantined_with_reasons(tmp_path: Path) -> None:
    rows = _rows(tmp_path, 12)
    rows[0]["response"] = "<answer>['jump']</answer>"  # illegal button
    rows[1]["frame"] = "frames/missing.png"
    rows[2]["level"] = "9-9"
    rows[3]["frame_hash"] = rows[4]["frame_hash"]  # duplicate (and no longer its image's hash)
    rows[5]["response"] = format_response("Hm.", "Go right now.", ("right",))  # short perception
    rows[5]["buttons"] = ["right"]
    rows[6]["teacher"] = None
    config = ValidationConfig(max_failed_share=0.7)
    outcome = validate_annotations(rows, tmp_path, tmp_path / "v", config)
    reasons = {q["frame_index"]: q["failed_expectations"] for q in outcome.quarantined}
    assert set(reasons) == {0, 1, 2, 3, 4, 5, 6}
    assert "expect_column_values_to_be_in_set:answer_ok" in reasons[0]
    assert "expect_column_values_to_be_in_set:image_ok" in reasons[1]
    assert "expect_column_values_to_be_in_set:level" in reasons[2]
    assert "expect_column_values_to_be_unique:frame_hash" in reasons[4]
    # row 3 is the hash's first occurrence: quarantined for its image, not as a duplicate
    assert "expect_column_values_to_be_unique:frame_hash" not in reasons[3]
    assert "expect_column_values_to_be_in_set:image_ok" in reasons[3]
    assert "expect_column_value_lengths_to_be_between:perception" in reasons[5]
    assert "expect_column_values_to_not_be_null:teacher" in reasons[6]
    assert len(outcome.passed) == 5
    table = pq.read_table(tmp_path / "v" / "quarantine.parquet").to_pylist()
    assert len(table) == 7 and all(r["failed_expectations"] for r in table)
    # The same rows under the default 5% threshold fail the stage, reports still written.
    with pytest.raises(ValidationFailed, match="failed validation"):
        validate_annotations(rows, tmp_path, tmp_path / "v2")
    summary = json.loads((tmp_path / "v2" / "validation.json").read_text())["summary"]
    assert summary["success"] is False and summary["quarantined"] == 7
    assert "FAILED" in (tmp_path / "v2" / "validation.html").read_text()
