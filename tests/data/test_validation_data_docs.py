"""The validation report is Great Expectations' own Data Docs; duplicates keep their first copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odyssey_core.data.validation import (
    DATA_DOCS_DIR,
    ValidationConfig,
    ValidationFailed,
    validate_annotations,
)
from tests.data.test_validation import _rows

UNIQUE = "expect_column_values_to_be_unique:frame_hash"


def _copy(row: dict, frame_index: int) -> dict:
    return {**row, "frame_index": frame_index}


def test_a_duplicated_frame_quarantines_only_its_extra_copies(tmp_path: Path) -> None:
    rows = _rows(tmp_path, 6)
    rows += [_copy(rows[1], 100), _copy(rows[4], 101), _copy(rows[1], 102)]
    outcome = validate_annotations(
        rows, tmp_path, tmp_path / "v", ValidationConfig(max_failed_share=0.5)
    )
    reasons = {q["frame_index"]: q["failed_expectations"] for q in outcome.quarantined}
    assert reasons == {100: [UNIQUE], 101: [UNIQUE], 102: [UNIQUE]}
    kept = [r["frame_index"] for r in outcome.passed]
    assert kept == [0, 1, 2, 3, 4, 5]  # every frame once, as its first occurrence
    assert len({r["frame_hash"] for r in outcome.passed}) == len(outcome.passed)
    # GX still reports every copy as non-unique; the quarantine is what keeps the first.
    check = next(c for c in outcome.summary["expectations"] if c["name"] == UNIQUE)
    assert check == {"name": UNIQUE, "success": False, "unexpected_count": 5}
    assert outcome.summary["quarantined"] == 3 and outcome.summary["passed"] == 6


def test_the_report_is_gx_data_docs(tmp_path: Path) -> None:
    rows = _rows(tmp_path, 6)
    rows.append(_copy(rows[0], 100))
    out = tmp_path / "v"
    outcome = validate_annotations(rows, tmp_path, out, ValidationConfig(max_failed_share=0.5))
    site = out / DATA_DOCS_DIR
    assert outcome.data_docs_path == site / "index.html" and outcome.data_docs_path.is_file()
    pages = list((site / "validations").rglob("*.html"))
    assert len(pages) == 1
    # the run is named after the stage's decision: <suite>/<run name>/<run time>/<batch>.html
    assert pages[0].relative_to(site / "validations").parts[:2] == (
        "odyssey_annotations",
        "curate-passed",
    )
    assert (site / "expectations" / "odyssey_annotations.html").is_file()
    assert (site / "static" / "styles" / "data_docs_default_styles.css").is_file()
    # validation.html is the Data Docs validation page itself, rendered by GX
    page = outcome.html_path.read_text()
    assert outcome.html_path.read_bytes() == pages[0].read_bytes()
    assert "Data documentation compiled by Great Expectations" in page
    for text in ("curate-passed", "odyssey_quarantined", "frame_hash", "values must be unique"):
        assert text in page
    index = outcome.data_docs_path.read_text()
    assert "curate-passed" in index and "odyssey_annotations" in index
    suite_page = (site / "expectations" / "odyssey_annotations.html").read_text()
    assert "first occurrence is kept" in suite_page
    meta = json.loads(outcome.json_path.read_text())["great_expectations"]["meta"]
    assert meta["run_id"]["run_name"] == "curate-passed"
    assert meta["batch_markers"]["odyssey_quarantined"] == 1
    assert meta["batch_markers"]["odyssey_decision"] == "passed"


def test_a_failed_stage_writes_its_data_docs_and_no_stale_page_survives(tmp_path: Path) -> None:
    rows = _rows(tmp_path, 6)
    out = tmp_path / "v"
    validate_annotations(rows, tmp_path, out)
    rows[0]["level"] = "9-9"
    with pytest.raises(ValidationFailed, match="failed validation"):
        validate_annotations(rows, tmp_path, out)
    pages = list((out / DATA_DOCS_DIR / "validations").rglob("*.html"))
    assert [p.relative_to(out / DATA_DOCS_DIR / "validations").parts[1] for p in pages] == [
        "curate-FAILED"
    ]
    page = (out / "validation.html").read_text()
    assert "curate-FAILED" in page and "9-9" in page


def test_data_docs_are_built_from_a_relative_folder(tmp_path: Path, monkeypatch) -> None:
    """Runs name their folders relative to the working directory (``out/pipeline/...``)."""
    rows = _rows(tmp_path, 3)
    monkeypatch.chdir(tmp_path)
    outcome = validate_annotations(
        rows, tmp_path, Path("run") / "v", ValidationConfig(max_failed_share=0.5)
    )
    assert (tmp_path / "run" / "v" / DATA_DOCS_DIR / "index.html").is_file()
    assert outcome.html_path.is_file()
