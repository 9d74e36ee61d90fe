"""The evaluation report: Table 2 style tables (Markdown, HTML, terminal), bar plots with
error bars, annotated episode videos, the raw episodes as JSON and a flat metrics dict.

:func:`write_report` writes, under ``out_dir``::

    report.md / report.html      one table per section: rows = agents (+ the maximum
                                 achievable progress), columns = levels + average, cells =
                                 mean ± standard error; curated sections add the progress
                                 gained since the start state; an outcomes table counts
                                 errors (crashed envs) apart from the statistics
    <section>.png                per-level bars with standard-error whiskers
    videos/*.mp4                 a few episodes, the model's perception, reasoning and
                                 answer printed beside each frame
    episodes.jsonl, metrics.json the raw episode outcomes and the flat metrics

and returns the metrics (for MLflow or any logger) with the paths.
"""

from __future__ import annotations

import html
import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from odyssey_core.common.tables import html_table, markdown_table, terminal_table
from odyssey_core.eval.collapse import collapse_from_turns
from odyssey_core.eval.runner import EpisodeRecord, EvalResults
from odyssey_core.eval.stats import LevelStats, TableStats

__all__ = [
    "ReportFiles",
    "format_cell",
    "markdown_table",
    "plot_table",
    "terminal_table",
    "video_panel_lines",
    "write_episode_video",
    "write_report",
]


def format_cell(mean: float, se: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.2f} ± {se:.2f}" if not math.isnan(se) else f"{mean:.2f}"


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 100:+.1f}%"


def table_rows(table: TableStats, *, gained: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a table (absolute progress, or gained since the start state)."""
    header = ["Agent", *table.levels, "Average"]
    with_base = table.base_agent is not None and len(table.rows) > 1
    if with_base:
        header.append(f"vs {table.base_agent}")
    rows: list[list[str]] = []
    for agent, cells in table.rows.items():
        row = [agent]
        if gained:
            got = [cells.get(lv) for lv in table.levels]
            row += [format_cell(c.gained_mean, c.gained_se) if c else "-" for c in got]
            usable = [c for c in got if c is not None and c.n]
            mean = math.fsum(c.gained_mean for c in usable) / len(usable) if usable else math.nan
            se = (
                math.sqrt(math.fsum(c.gained_se**2 for c in usable)) / len(usable)
                if usable
                else math.nan
            )
        else:
            row += [
                format_cell(cells[lv].mean, cells[lv].se) if lv in cells else "-"
                for lv in table.levels
            ]
            mean, se = table.average(agent)
        row.append(format_cell(mean, se))
        if with_base:
            row.append(
                "-" if agent == table.base_agent or gained else _pct(table.improvement(agent))
            )
        rows.append(row)
    if not gained:
        maxima = [table.max_progress.get(lv) for lv in table.levels]
        row = ["Maximum", *[f"{m:g}" if m else "-" for m in maxima]]
        average = table.max_average()
        row.append("-" if math.isnan(average) else f"{average:.1f}")
        if with_base:
            row.append("")
        rows.append(row)
    return header, rows


def outcome_rows(results: EvalResults, section_index: int) -> tuple[list[str], list[list[str]]]:
    """Per agent: episodes, errors (kept out of the statistics), goals, deaths, turn limits."""
    section = results.sections[section_index]
    header = ["Agent", "episodes", "errors", "goal", "death", "turn limit", "invalid answers"]
    rows = []
    for agent, records in section.records.items():
        done = [r for r in records if r.finished]
        turns = sum(r.turns for r in done)
        invalid = sum(r.invalid_actions for r in done)
        rows.append(
            [
                agent,
                str(len(records)),
                str(len(records) - len(done)),
                str(sum(r.success for r in done)),
                str(sum(r.life_lost for r in done)),
                str(sum(r.truncated for r in done)),
                f"{invalid}/{turns}",
            ]
        )
    return header, rows


# -- plots -------------------------------------------------------------------------------------


def plot_table(table: TableStats, path: str | Path) -> Path:
    """Grouped bars per level (+ average), one bar per agent, standard-error whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    groups = [*table.levels, "Average"]
    agents = list(table.rows)
    width = 0.8 / max(1, len(agents))
    x = np.arange(len(groups))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups) + 2), 4.0), dpi=100)
    for k, agent in enumerate(agents):
        cells: list[LevelStats | None] = [table.rows[agent].get(lv) for lv in table.levels]
        means = [c.mean if c else math.nan for c in cells]
        ses = [c.se if c else math.nan for c in cells]
        avg, avg_se = table.average(agent)
        means.append(avg)
        ses.append(avg_se)
        heights = np.nan_to_num(np.array(means, dtype=float))
        errors = np.nan_to_num(np.array(ses, dtype=float))
        ax.bar(
            x + (k - (len(agents) - 1) / 2) * width,
            heights,
            width,
            yerr=errors,
            capsize=3,
            label=agent,
        )
    maxima = [table.max_progress.get(lv) for lv in table.levels]
    for i, m in enumerate(maxima):
        if m:
            ax.hlines(m, i - 0.45, i + 0.45, colors="grey", linestyles="dotted")
    ax.set_xticks(x, groups, rotation=30, ha="right")
    ax.set_ylabel("level progress (mean ± SE)")
    ax.set_title(table.title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# -- videos ------------------------------------------------------------------------------------


def _wrap(label: str, text: str | None, width: int) -> list[str]:
    body = " ".join((text or "-").split())
    return textwrap.wrap(f"{label}: {body}", width=width, subsequent_indent="  ") or [label]


def video_panel_lines(
    record: EpisodeRecord, turn_index: int, *, width: int = 56, max_lines: int = 26
) -> list[str]:
    """The text beside frame ``turn_index``: the turn, then the model's perception,
    reasoning and answer wrapped to ``width`` characters, cut to ``max_lines``."""
    lines = [f"{record.env_id} ({record.agent}) from {record.start}"]
    if turn_index < len(record.turn_log):
        turn = record.turn_log[turn_index]
        lines.append(f"turn {turn.turn}  progress {turn.progress:g}")
        lines.append(f"pressed: {', '.join(turn.buttons) or '-'}")
        if turn.text is not None:
            lines += _wrap("perception", turn.perception, width)
            lines += _wrap("reasoning", turn.reasoning, width)
            lines += _wrap("answer", turn.answer, width)
            if not turn.valid:
                lines.append("(invalid answer: env fell back)")
    else:
        outcome = (
            "goal"
            if record.goal_reached
            else "lost a life"
            if record.life_lost
            else "turn limit"
            if record.truncated
            else "error"
            if record.error
            else "ended"
        )
        lines.append(f"end: {outcome}, progress {record.progress:g}")
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], "..."]
    return lines


def write_episode_video(record: EpisodeRecord, path: str | Path, fps: float = 4.0) -> Path | None:
    """An MP4 of a recorded episode; each frame shows the answer given *to* it."""
    from odyssey_core.eval.video import EpisodeVideoWriter

    if not record.frames:
        return None
    path = Path(path)
    with EpisodeVideoWriter(path, fps=fps, panel_width=460, font_size=12) as video:
        for k, frame in enumerate(record.frames):
            video.add(frame, video_panel_lines(record, k))
    record.video = str(path)
    return path


# -- the whole report --------------------------------------------------------------------------


@dataclass
class ReportFiles:
    markdown: Path
    html: Path
    plots: list[Path] = field(default_factory=list)
    videos: list[Path] = field(default_factory=list)
    episodes: Path | None = None
    metrics_path: Path | None = None
    metrics: dict[str, float] = field(default_factory=dict)


_CSS = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}td:first-child,"
    "th:first-child{text-align:left}.note{color:#a33}"
)


DEFAULT_CURVE_KEYS = (
    "all/progress_mean",
    "all/invalid_rate",
    "critic/explained_variance",
    "collapse/distinct_1",
)


def plot_training_curves(
    tracking_uri: str, run_id: str, path: str | Path, keys: Sequence[str] = DEFAULT_CURVE_KEYS
) -> Path | None:
    """One panel per metric of an MLflow run, against the training step; None when the run
    logged none of ``keys``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    histories = {key: client.get_metric_history(run_id, key) for key in keys}
    histories = {key: sorted(h, key=lambda m: m.step) for key, h in histories.items() if h}
    if not histories:
        return None
    fig, axes = plt.subplots(1, len(histories), figsize=(4.0 * len(histories), 3.2), dpi=100)
    for ax, (key, history) in zip(np.atleast_1d(axes), histories.items(), strict=True):
        ax.plot([m.step for m in history], [m.value for m in history], marker=".")
        ax.set_title(key)
        ax.set_xlabel("training step")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(
    results: EvalResults,
    out_dir: str | Path,
    *,
    videos: bool = True,
    plots: bool = True,
    training_run: tuple[str, str] | None = None,
    summary: Sequence[str] = (),
) -> ReportFiles:
    """Write every report file under ``out_dir`` and return their paths and the metrics.
    ``summary`` is Markdown lines the caller puts first, under "Summary" (in the HTML page as
    preformatted text)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    suite = results.suite
    md = [f"# Evaluation: {suite.name}", ""]
    md.append(
        f"Seed {suite.seed}; progress is the player's x position in the level (from its start); "
        "cells are mean ± standard error (sample std / sqrt(n)); Average is the mean of the "
        "level means with SE sqrt(sum SE_k^2) / K; errors (crashed envs) are excluded from n "
        "and counted under Outcomes. A run cut by the turn limit is never a success."
    )
    body = [f"<h1>Evaluation: {html.escape(suite.name)}</h1>", f"<p>{html.escape(md[-1])}</p>"]
    if summary:
        md += ["", "## Summary", "", *summary]
        body += ["<h2>Summary</h2>", f"<pre>{html.escape(chr(10).join(summary))}</pre>"]
    files = ReportFiles(markdown=out / "report.md", html=out / "report.html")
    metrics = results.metrics()
    for k, section in enumerate(results.sections):
        title = f"{section.section.name}: {section.section.kind}, {section.game}, "
        title += section.section.split
        md += ["", f"## {title}", ""]
        body.append(f"<h2>{html.escape(title)}</h2>")
        if section.skipped:
            md.append(f"*{section.skipped}*")
            body.append(f"<p class='note'>{html.escape(section.skipped)}</p>")
            continue
        table = section.table()
        header, rows = table_rows(table)
        md += ["Final progress (from the level start):", "", markdown_table(header, rows)]
        body += ["<p>Final progress (from the level start)</p>", html_table(header, rows)]
        if section.section.kind == "curated":
            g_header, g_rows = table_rows(table, gained=True)
            md += [
                "",
                "Progress gained since the start state:",
                "",
                markdown_table(g_header, g_rows),
            ]
            body += ["<p>Progress gained since the start state</p>", html_table(g_header, g_rows)]
        o_header, o_rows = outcome_rows(results, k)
        md += ["", "Outcomes:", "", markdown_table(o_header, o_rows)]
        body += ["<p>Outcomes</p>", html_table(o_header, o_rows)]
        errors = [r for rs in section.records.values() for r in rs if r.error]
        if errors:
            md += ["", "Errors:", ""] + [
                f"- {r.agent} {r.env_id} run {r.run}: {r.error}" for r in errors[:20]
            ]
            body.append(
                "<ul>"
                + "".join(
                    f"<li>{html.escape(f'{r.agent} {r.env_id} run {r.run}: {r.error}')}</li>"
                    for r in errors[:20]
                )
                + "</ul>"
            )
        for agent, records in section.records.items():
            report = collapse_from_turns([t for r in records for t in r.turn_log])
            if report.metrics["turns"] == 0:
                continue
            for key, value in report.metrics.items():
                metrics[f"collapse/{section.section.name}/{agent}/{key}"] = value
            warnings = report.warnings()
            line = f"Thought collapse monitor, {agent}: " + ", ".join(
                f"{key} {value:.3g}" for key, value in report.metrics.items()
            )
            md += ["", line] + [f"- warning: {w}" for w in warnings]
            body.append(f"<p>{html.escape(line)}</p>")
            body += [f"<p class='note'>warning: {html.escape(w)}</p>" for w in warnings]
        if plots:
            png = plot_table(table, out / f"{section.section.name}.png")
            files.plots.append(png)
            md += ["", f"![{section.section.name}]({png.name})"]
            body.append(f"<img src='{html.escape(png.name)}' alt='{html.escape(png.name)}'>")
        if videos:
            for record in [r for rs in section.records.values() for r in rs if r.frames]:
                name = f"{section.section.name}-{record.agent}-{record.env_id}-{record.start}"
                safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
                try:
                    path = write_episode_video(record, out / "videos" / f"{safe}.mp4")
                except Exception as exc:  # a missing encoder must not lose the tables
                    md.append(f"- video {safe} not written: {exc}")
                    continue
                if path:
                    files.videos.append(path)
                    rel = path.relative_to(out)
                    md.append(f"- video: [{rel}]({rel})")
                    body.append(
                        f"<p><a href='{html.escape(str(rel))}'>{html.escape(str(rel))}</a></p>"
                    )
    if training_run is not None:  # (tracking URI, run id) of the RL run that made the model
        curves = plot_training_curves(*training_run, out / "training_curves.png")
        md += ["", "## Training curves", ""]
        body.append("<h2>Training curves</h2>")
        if curves is None:
            md.append(f"*run {training_run[1]} logged none of {', '.join(DEFAULT_CURVE_KEYS)}*")
        else:
            files.plots.append(curves)
            md.append(f"![training curves]({curves.name})")
            body.append(f"<img src='{curves.name}' alt='training curves'>")
    files.markdown.write_text("\n".join(md) + "\n")
    files.html.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(suite.name)}"
        f"</title><style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
    files.episodes = out / "episodes.jsonl"
    with files.episodes.open("w") as handle:
        for record in results.records():
            handle.write(json.dumps(record.as_dict(), default=_json_default) + "\n")
    files.metrics = {k: v for k, v in metrics.items() if not math.isnan(v)}
    files.metrics_path = out / "metrics.json"
    files.metrics_path.write_text(json.dumps(files.metrics, indent=1, sort_keys=True))
    return files


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | set):
        return list(value)
    return str(value)


def terminal_report(results: EvalResults) -> str:
    """All tables as plain text (what ``odyssey eval`` prints)."""
    parts = []
    for k, section in enumerate(results.sections):
        parts.append(f"== {section.section.name} ({section.section.kind}, {section.game})")
        if section.skipped:
            parts.append(section.skipped)
            continue
        parts.append(terminal_table(*table_rows(section.table())))
        if section.section.kind == "curated":
            parts.append("gained since the start state:")
            parts.append(terminal_table(*table_rows(section.table(), gained=True)))
        parts.append(terminal_table(*outcome_rows(results, k)))
    return "\n".join(parts)
