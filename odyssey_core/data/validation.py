"""Validate the annotation table with a Great Expectations suite; quarantine the failing rows.

Checks that need Python (does the answer parse to 1-2 legal buttons that match the ``buttons``
column; does the image exist, decode and hash to its ``frame_hash``) are precomputed as
boolean columns, and the suite expects them true, so every check is a named expectation in
one result. Rows failing any expectation go to the quarantine with the names of what they
failed; the stage raises :class:`ValidationFailed` when more than ``max_failed_share`` of the
rows fail. ``validation.json`` (the GX result plus a summary) and ``validation.html`` are
written in any case.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import os
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
    "ValidationConfig",
    "ValidationFailed",
    "ValidationOutcome",
    "row_checks",
    "validate_annotations",
]

REQUIRED = tuple(ANNOTATION_SCHEMA.names)


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


def _run_gx(df: Any, expectations: list[Any]) -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no telemetry from tests or jobs
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    # Per-metric progress bars are noise in logs; cosmetic, and the API differs by GX version.
    with contextlib.suppress(Exception):
        context.variables.progress_bars = {"globally": False}
    asset = context.data_sources.add_pandas("curation").add_dataframe_asset("annotations")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": df}
    )
    suite = gx.ExpectationSuite(name="odyssey_annotations")
    for expectation in expectations:
        suite.add_expectation(expectation)
    suite = context.suites.add(suite)
    return batch.validate(suite, result_format={"result_format": "COMPLETE"})


def _html(summary: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    rows = "\n".join(
        f"<tr class='{'ok' if c['success'] else 'bad'}'><td>{html.escape(c['name'])}</td>"
        f"<td>{'pass' if c['success'] else 'FAIL'}</td><td>{c['unexpected_count']}</td></tr>"
        for c in checks
    )
    facts = "".join(
        f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>"
        for k, v in summary.items()
        if k != "expectations"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Odyssey curation validation"
        "</title><style>body{font-family:sans-serif}td,th{padding:2px 8px}"
        ".bad{background:#fdd}.ok{background:#dfd}</style></head><body>"
        f"<h1>Annotation validation: {'passed' if summary['success'] else 'FAILED'}</h1>"
        f"<ul>{facts}</ul><table><tr><th>expectation</th><th>result</th>"
        f"<th>failing rows</th></tr>{rows}</table></body></html>\n"
    )


def validate_annotations(
    rows: Sequence[dict[str, Any]],
    frames_root: str | Path,
    out_dir: str | Path,
    config: ValidationConfig | None = None,
    *,
    game: str = "odland",
) -> ValidationOutcome:
    """Validate annotation rows; writes validation.json/html (and quarantine.parquet)."""
    import pandas as pd

    from odyssey_core.envs.pyboy.levels import MARIO_LEVELS, ODLAND_LEVELS

    config = config or ValidationConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(frames_root)
    levels = config.levels or list(ODLAND_LEVELS if game == "odland" else MARIO_LEVELS)
    enriched = [{**{c: row.get(c) for c in REQUIRED}, **row_checks(row, root)} for row in rows]
    failed: dict[int, list[str]] = {}
    checks: list[dict[str, Any]] = []
    gx_json: dict[str, Any] = {}
    if enriched:
        df = pd.DataFrame(enriched)
        result = _run_gx(df, _suite(config, levels))
        gx_json = result.to_json_dict()
        for item in result.results:
            name = _name(item)
            indices = item.result.get("unexpected_index_list") or []
            for position in indices:
                failed.setdefault(int(position), []).append(name)
            checks.append(
                {
                    "name": name,
                    "success": bool(item.success),
                    "unexpected_count": int(item.result.get("unexpected_count") or 0),
                }
            )
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
    json_path = write_json(
        out / VALIDATION_JSON, {"summary": summary, "great_expectations": gx_json}
    )
    html_path = write_bytes_atomic(out / VALIDATION_HTML, _html(summary, checks).encode())
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
    return ValidationOutcome(passed, quarantined, summary, json_path, html_path)
