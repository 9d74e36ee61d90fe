"""Validate the annotation table with a Great Expectations suite; quarantine the failing rows.

Checks that need Python (does the answer parse to 1-2 legal buttons that match the ``buttons``
column; does the image exist, decode and hash to its ``frame_hash``) are precomputed as
boolean columns, and the suite expects them true, so every check is a named expectation in
one result. Rows failing any expectation go to the quarantine with the names of what they
failed, except that a duplicated frame (``frame_hash`` not unique) quarantines only its extra
copies: the first occurrence, in row order, is kept unless it fails something else. The stage
raises :class:`ValidationFailed` when more than ``max_failed_share`` of the rows fail.

Written in any case: ``validation.json`` (the GX result plus a summary), ``data_docs/`` (GX's
own Data Docs site for the result: ``index.html``, the suite's page and the validation page)
and ``validation.html`` (a copy of that validation page, the one file the reports link). The
GX run is named ``curate-passed`` or ``curate-FAILED`` after the stage's decision (the share
of quarantined rows against ``max_failed_share``), and the counts behind it are the batch's
markers, so the Data Docs page says what the stage decided as well as what GX found.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from PIL import Image
from pydantic import Field

from odyssey_core.config import StrictModel
from odyssey_core.data.dataset import (
    ANNOTATION_SCHEMA,
    VALIDATION_HTML,
    VALIDATION_JSON,
    write_bytes_atomic,
    write_json,
    write_table,
)
from odyssey_core.protocol import GAMEBOY_SPACE, parse_response

__all__ = [
    "DATA_DOCS_DIR",
    "ValidationConfig",
    "ValidationFailed",
    "ValidationOutcome",
    "failed_expectations",
    "row_checks",
    "validate_annotations",
]

REQUIRED = tuple(ANNOTATION_SCHEMA.names)

#: the Data Docs site, next to validation.json / validation.html
DATA_DOCS_DIR = "data_docs"
SUITE_NAME = "odyssey_annotations"
_SITE_NAME = "odyssey_curation"
_BATCH_ID = "curation-annotations"
UNIQUE_HASH = "expect_column_values_to_be_unique:frame_hash"
SUITE_NOTES = (
    "Odyssey curation: every annotated frame is a row; answer_ok and image_ok are computed "
    "in Python (the answer parses to the row's 1-2 legal buttons; the image decodes and hashes "
    "to frame_hash). A row failing any expectation is quarantined, except that a duplicated "
    "frame_hash quarantines only its extra copies (the first occurrence is kept). The stage "
    "fails when the quarantined share exceeds max_failed_share (see the run name and the "
    "batch markers)."
)


class ValidationConfig(StrictModel):
    max_failed_share: float = Field(default=0.05, ge=0, le=1)
    perception_chars: tuple[int, int] = (20, 1500)
    reasoning_chars: tuple[int, int] = (10, 1500)
    levels: list[str] | None = Field(default=None, description="None: the game's known levels")


class ValidationFailed(RuntimeError):
    """Too many rows failed validation; the reports say which and why."""


@dataclass
class ValidationOutcome:
    passed: list[dict[str, Any]]
    quarantined: list[dict[str, Any]]
    summary: dict[str, Any]
    json_path: Path
    html_path: Path
    data_docs_path: Path | None = None


def _image_ok(path: Path, frame_hash: str) -> bool:
    try:
        data = path.read_bytes()
        with Image.open(path) as image:
            image.load()
    except (OSError, ValueError, SyntaxError):
        return False
    return hashlib.sha256(data).hexdigest() == frame_hash


def row_checks(row: dict[str, Any], frames_root: Path) -> dict[str, Any]:
    """The derived columns the suite checks: parsed texts, answer_ok and image_ok."""
    parsed = parse_response(row.get("response"))
    buttons = list(row.get("buttons") or [])
    answer_ok = (
        parsed.valid
        and 1 <= len(parsed.buttons) <= GAMEBOY_SPACE.max_buttons
        and list(parsed.buttons) == buttons
    )
    frame = row.get("frame")
    image_ok = bool(frame) and _image_ok(frames_root / str(frame), str(row.get("frame_hash")))
    return {
        "perception": parsed.perception,
        "reasoning": parsed.reasoning,
        "answer_ok": bool(answer_ok),
        "image_ok": bool(image_ok),
    }


def _suite(config: ValidationConfig, levels: Sequence[str]) -> list[Any]:
    import great_expectations.expectations as gxe

    expectations: list[Any] = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED]
    expectations += [
        gxe.ExpectColumnValuesToNotBeNull(column="perception"),
        gxe.ExpectColumnValuesToNotBeNull(column="reasoning"),
        gxe.ExpectColumnValuesToBeInSet(column="answer_ok", value_set=[True]),
        gxe.ExpectColumnValueLengthsToBeBetween(
            column="perception",
            min_value=config.perception_chars[0],
            max_value=config.perception_chars[1],
        ),
        gxe.ExpectColumnValueLengthsToBeBetween(
            column="reasoning",
            min_value=config.reasoning_chars[0],
            max_value=config.reasoning_chars[1],
        ),
        gxe.ExpectColumnValuesToBeUnique(column="frame_hash"),
        gxe.ExpectColumnValuesToBeInSet(column="level", value_set=list(levels)),
        gxe.ExpectColumnValuesToBeInSet(column="image_ok", value_set=[True]),
    ]
    return expectations


def _name(result: Any) -> str:
    config = result.expectation_config
    return f"{config.type}:{config.kwargs.get('column')}"


def _gx_context() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no telemetry from tests or jobs
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    # Per-metric progress bars are noise in logs; cosmetic, and the API differs by GX version.
    with contextlib.suppress(Exception):
        context.variables.progress_bars = {"globally": False}
    return context


def _run_gx(context: Any, df: Any, expectations: list[Any]) -> Any:
    import great_expectations as gx

    asset = context.data_sources.add_pandas("curation").add_dataframe_asset("annotations")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": df}
    )
    suite = gx.ExpectationSuite(name=SUITE_NAME, notes=SUITE_NOTES)
    for expectation in expectations:
        suite.add_expectation(expectation)
    suite = context.suites.add(suite)
    return batch.validate(suite, result_format={"result_format": "COMPLETE"})


def _build_data_docs(
    context: Any, result: Any, summary: dict[str, Any], site_dir: Path
) -> Path | None:
    """Build GX's Data Docs site for ``result`` in ``site_dir``; the validation page's path.

    The result is stored in the context's (in-memory) validation results store under a run
    named after the stage's decision, with the summary's counts as batch markers, and the
    site is built by GX's own SiteBuilder (the same as a Checkpoint's UpdateDataDocsAction).
    """
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    shutil.rmtree(site_dir, ignore_errors=True)  # a stale page of an earlier run would mislead
    context.add_data_docs_site(
        _SITE_NAME,
        {
            "class_name": "SiteBuilder",
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(Path(site_dir).resolve()),  # GX wants it absolute
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    decision = "passed" if summary["success"] else "FAILED"
    run_id = RunIdentifier(run_name=f"curate-{decision}", run_time=datetime.now(UTC))
    result.meta["run_id"] = run_id
    markers = result.meta.get("batch_markers")
    if markers is not None:
        markers.update(
            {
                f"odyssey_{key}": summary[key]
                for key in ("rows", "passed", "quarantined", "failed_share", "max_failed_share")
            }
        )
        markers["odyssey_decision"] = decision
    key = ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=SUITE_NAME),
        run_id=run_id,
        batch_identifier=_BATCH_ID,
    )
    context.validation_results_store.set(key, result)
    context.build_data_docs(site_names=[_SITE_NAME])
    pages = sorted((site_dir / "validations").rglob("*.html"))
    return pages[-1] if pages else None


def _fallback_page(summary: dict[str, Any]) -> str:
    """The page when there is nothing GX could validate (no rows)."""
    decision = "passed" if summary["success"] else "FAILED"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Odyssey curation validation"
        f"</title></head><body><h1>Annotation validation: {decision}</h1>"
        f"<p>{summary['rows']} rows: nothing to validate.</p></body></html>\n"
    )


def _extra_copies(df: Any, positions: Sequence[int]) -> list[int]:
    """Of the rows GX found with a non-unique ``frame_hash``, those after the first copy."""
    first: dict[Any, int] = {}
    for position in sorted(positions):
        first.setdefault(df["frame_hash"].iloc[position], position)
    return [p for p in positions if first[df["frame_hash"].iloc[p]] != p]


def _run_suite(
    rows: Sequence[dict[str, Any]], root: Path, config: ValidationConfig, game: str
) -> tuple[dict[int, list[str]], list[dict[str, Any]], Any, Any]:
    """The suite on ``rows``: {row position: failed expectation names}, the per-expectation
    summaries, and GX's context and result (None for no rows)."""
    import pandas as pd

    from odyssey_core.envs.pyboy.levels import MARIO_LEVELS, ODLAND_LEVELS

    levels = config.levels or list(ODLAND_LEVELS if game == "odland" else MARIO_LEVELS)
    enriched = [{**{c: row.get(c) for c in REQUIRED}, **row_checks(row, root)} for row in rows]
    failed: dict[int, list[str]] = {}
    checks: list[dict[str, Any]] = []
    if not enriched:
        return failed, checks, None, None
    df = pd.DataFrame(enriched)
    context = _gx_context()
    result = _run_gx(context, df, _suite(config, levels))
    for item in result.results:
        name = _name(item)
        indices = [int(i) for i in item.result.get("unexpected_index_list") or []]
        if name == UNIQUE_HASH:
            indices = _extra_copies(df, indices)  # the first copy of a frame is kept
        for position in indices:
            failed.setdefault(int(position), []).append(name)
        checks.append(
            {
                "name": name,
                "success": bool(item.success),
                "unexpected_count": int(item.result.get("unexpected_count") or 0),
            }
        )
    return failed, checks, context, result


def failed_expectations(
    rows: Sequence[dict[str, Any]],
    frames_root: str | Path,
    config: ValidationConfig | None = None,
    *,
    game: str = "odland",
) -> dict[int, list[str]]:
    """The rows :func:`validate_annotations` would quarantine, by position, with the names of
    what each failed; writes nothing. A row's verdict depends on that row alone (a duplicated
    frame: on the rows before it), so it holds for any prefix of ``rows`` as well."""
    failed, _, _, _ = _run_suite(rows, Path(frames_root), config or ValidationConfig(), game)
    return failed


def validate_annotations(
    rows: Sequence[dict[str, Any]],
    frames_root: str | Path,
    out_dir: str | Path,
    config: ValidationConfig | None = None,
    *,
    game: str = "odland",
) -> ValidationOutcome:
    """Validate annotation rows; writes validation.json/html (and quarantine.parquet)."""
    config = config or ValidationConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    failed, checks, context, result = _run_suite(rows, Path(frames_root), config, game)
    passed, quarantined = [], []
    for position, row in enumerate(rows):
        if position in failed:
            quarantined.append(
                {**{c: row.get(c) for c in REQUIRED}, "failed_expectations": failed[position]}
            )
        else:
            passed.append(dict(row))
    share = len(quarantined) / len(rows) if rows else 0.0
    summary = {
        "success": share <= config.max_failed_share and bool(rows),
        "rows": len(rows),
        "passed": len(passed),
        "quarantined": len(quarantined),
        "failed_share": round(share, 6),
        "max_failed_share": config.max_failed_share,
        "validated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "expectations": checks,
    }
    data_docs: Path | None = None
    page: Path | None = None
    if result is not None:
        page = _build_data_docs(context, result, summary, out / DATA_DOCS_DIR)
        data_docs = out / DATA_DOCS_DIR / "index.html"
    else:
        shutil.rmtree(out / DATA_DOCS_DIR, ignore_errors=True)
    gx_json = result.to_json_dict() if result is not None else {}
    json_path = write_json(
        out / VALIDATION_JSON, {"summary": summary, "great_expectations": gx_json}
    )
    html = page.read_bytes() if page is not None else _fallback_page(summary).encode()
    html_path = write_bytes_atomic(out / VALIDATION_HTML, html)
    quarantine_path = out / "quarantine.parquet"
    if quarantined:
        write_table(quarantine_path, quarantined)
    else:
        quarantine_path.unlink(missing_ok=True)
    if not rows:
        raise ValidationFailed("no annotated rows to validate")
    if share > config.max_failed_share:
        worst = sorted(checks, key=lambda c: -c["unexpected_count"])[:3]
        raise ValidationFailed(
            f"{len(quarantined)} of {len(rows)} rows ({share:.1%}) failed validation, more than "
            f"the allowed {config.max_failed_share:.1%}; top failures: "
            + ", ".join(f"{c['name']} ({c['unexpected_count']})" for c in worst)
            + f". See {html_path} and {quarantine_path}."
        )
    return ValidationOutcome(passed, quarantined, summary, json_path, html_path, data_docs)
