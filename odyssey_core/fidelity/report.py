"""One fidelity report: the paper's claims, our measurements and a verdict on each, side by side.

A comparison returns a :class:`FidelityReport`; :func:`write_report` writes it as
``report.md`` and ``report.html`` (the same text, the plots embedded) plus ``report.json`` (every
number, for RESULTS.md and for tests) and ``figures/*.png``. :func:`check_report` reads a folder
back and says what is missing or malformed: the ``--quick`` smoke test asserts exactly that, never
a result.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odyssey_core.common.tables import html_table, markdown_table
from odyssey_core.fidelity.checkpoint_runs import CheckpointRun
from odyssey_core.fidelity.run import FidelityRun
from odyssey_core.fidelity.stats import Band, Verdict

REPORT_FILES = ("report.md", "report.html", "report.json")
CHECKPOINT_RUNS_TITLE = "What a real checkpoint on a GPU would decide"
#: A warm start this close to an end (a share of the range) sits at it: the comparison cannot
#: move that way, and a metric at its floor cannot show a gap between arms.
AT_END_TOLERANCE = 0.02
#: The rule of thumb for a warm start with room to move both ways (shares of the range).
ROOM_LOW, ROOM_HIGH = 0.1, 0.8
FLAG_REASONS = {
    "at": " (no room to move that way: at this end the arms cannot be told apart)",
    "near": f" (outside the {ROOM_LOW:.0%}-{ROOM_HIGH:.0%} rule of thumb)",
    "unknown": " (the warm start was not measured)",
}


@dataclass
class Finding:
    """One claim of the paper, what we measured for it, and the verdict."""

    claim: str
    source: str  # where the paper makes it, e.g. "Odysseus Fig. 4a"
    measurement: str
    verdict: Verdict
    note: str = ""


@dataclass
class Headroom:
    """Where a comparison's warm start (the model every arm trains from) sits on its primary
    metric, between the metric's floor and its ceiling; ``label`` names the part of the
    comparison (a game, a scenario) when it has several, ``note`` where the ends come from."""

    metric: str
    warm_start: float
    floor: float
    ceiling: float
    label: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not self.ceiling > self.floor:
            raise ValueError(
                f"headroom of {self.metric!r}: the ceiling ({self.ceiling}) must be above the "
                f"floor ({self.floor})"
            )

    @property
    def position(self) -> float:
        """The warm start as a share of the range: 0 at the floor, 1 at the ceiling."""
        return (self.warm_start - self.floor) / (self.ceiling - self.floor)

    @property
    def status(self) -> str:
        """``ok``, ``at floor`` / ``at ceiling`` (within AT_END_TOLERANCE of an end, or past
        it), ``near floor`` / ``near ceiling`` (outside ROOM_LOW-ROOM_HIGH: a softer warning),
        or ``unknown`` (no warm-start number)."""
        position = self.position
        if not math.isfinite(position):
            return "unknown"
        if position <= AT_END_TOLERANCE:
            return "at floor"
        if position >= 1 - AT_END_TOLERANCE:
            return "at ceiling"
        if position < ROOM_LOW:
            return "near floor"
        if position > ROOM_HIGH:
            return "near ceiling"
        return "ok"

    @property
    def flagged(self) -> bool:
        return self.status != "ok"

    def describe(self) -> str:
        """One line: the metric, the warm start between its ends, and the flag if any."""
        where = f" ({self.label})" if self.label else ""
        position = self.position
        share = f", {100 * position:.0f}% of the range" if math.isfinite(position) else ""
        line = (
            f"{self.metric}{where}: warm start {_cell(self.warm_start)} between floor "
            f"{_cell(self.floor)} and ceiling {_cell(self.ceiling)}{share}"
        )
        if self.flagged:
            line += f". **Flag: {self.status}**{FLAG_REASONS[self.status.split()[0]]}"
        return line + (f". {self.note}" if self.note else "")

    def to_json(self) -> dict[str, Any]:
        return {
            **{k: _jsonable(v) for k, v in dataclasses.asdict(self).items()},
            "position": _jsonable(self.position),
            "status": self.status,
            "flagged": self.flagged,
        }


@dataclass
class Series:
    """One line of a figure; ``band`` is the standard error around it (None: a plain line)."""

    label: str
    x: list[float]
    y: list[float]
    band: list[float] | None = None

    @classmethod
    def of(cls, label: str, band: Band) -> Series:
        return cls(label, list(band.x), list(band.mean), list(band.se))


@dataclass
class Figure:
    """A line plot (curves with bands) or a bar plot (one bar per label, error bars)."""

    name: str  # the PNG's file name, without extension
    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    kind: str = "line"  # "line" | "bar"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Any]]


@dataclass
class FidelityReport:
    name: str  # the comparison's registry name, e.g. "odysseus-estimators"
    title: str
    paper: str
    command: str
    setup: list[str]  # what was run: sizes, budgets, seeds, what stands in for what
    findings: list[Finding]
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)  # what this can and cannot show
    headroom: list[Headroom] = field(default_factory=list)  # each warm start between its ends
    # what a real checkpoint on a GPU would decide that this CPU comparison cannot
    checkpoint_runs: list[CheckpointRun] = field(default_factory=list)
    seeds: int = 0
    quick: bool = False
    elapsed_s: float = 0.0
    cached_results: int = 0  # of the results behind it, how many an earlier run computed
    computed_results: int = 0
    data: dict[str, Any] = field(default_factory=dict)  # raw per-seed numbers

    @property
    def verdicts(self) -> dict[str, str]:
        return {f.claim: f.verdict.value for f in self.findings}

    @property
    def headroom_flags(self) -> list[str]:
        """One line per flagged warm start (empty: every one has room both ways)."""
        return [h.describe() for h in self.headroom if h.flagged]


def report_for(run: FidelityRun, name: str, **parts: Any) -> FidelityReport:
    """A comparison's report with what every one takes from its run: the command line (the
    comparison's own when the run names none), the number of seeds and the size; ``parts`` are
    the report's other fields (title, paper, setup, findings, headroom, ...)."""
    return FidelityReport(
        name=name,
        command=run.command or f"odyssey bench fidelity --comparison {name}",
        seeds=run.seeds,
        quick=run.quick,
        **parts,
    )


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _cells(rows: Sequence[Sequence[Any]]) -> list[list[str]]:
    return [[_cell(c).replace("|", "\\|") for c in row] for row in rows]


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return markdown_table(headers, _cells(rows)).splitlines()


def plot_figure(figure: Figure, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    if figure.kind == "bar":
        labels = [s.label for s in figure.series]
        values = [s.y[0] if s.y else math.nan for s in figure.series]
        errors = [s.band[0] if s.band else 0.0 for s in figure.series]
        ax.bar(range(len(labels)), values, yerr=errors, capsize=3)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    else:
        for s in figure.series:
            (line,) = ax.plot(s.x, s.y, label=s.label)
            if s.band:
                low = [m - e for m, e in zip(s.y, s.band, strict=True)]
                high = [m + e for m, e in zip(s.y, s.band, strict=True)]
                ax.fill_between(s.x, low, high, color=line.get_color(), alpha=0.2)
        if figure.series:
            ax.legend(fontsize=7)
    ax.set_title(figure.title, fontsize=10)
    ax.set_xlabel(figure.xlabel)
    ax.set_ylabel(figure.ylabel)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _provenance(report: FidelityReport) -> str:
    """How long this writing took, and how much of the work an earlier run did."""
    line = f"Wall clock: {report.elapsed_s / 60:.1f} min"
    if report.cached_results:
        total = report.cached_results + report.computed_results
        line += f" ({report.cached_results} of {total} results read from an earlier run's cache)"
    return line + "."


def to_markdown(report: FidelityReport, figure_paths: dict[str, str]) -> str:
    size = "quick (a smoke size: no reading)" if report.quick else "default"
    lines = [
        f"# {report.title}",
        "",
        f"Paper: {report.paper}. Seeds: {report.seeds}. Size: {size}. {_provenance(report)}",
        "",
        f"Command: `{report.command}`",
        "",
        "## Claims, measurements, verdicts",
        "",
        *_md_table(
            ["claim", "where", "measured (mean ± s.e. over seeds)", "verdict"],
            [[f.claim, f.source, f.measurement, f"**{f.verdict.value}**"] for f in report.findings],
        ),
        "",
    ]
    notes = [f for f in report.findings if f.note]
    lines += [f"- *{f.claim}*: {f.note}" for f in notes] + ([""] if notes else [])
    lines += ["## Headroom of the warm start", "", *(f"- {h.describe()}" for h in report.headroom)]
    if report.headroom_flags:
        lines.append(
            f"- **{len(report.headroom_flags)} of {len(report.headroom)} warm starts flagged**: "
            "a flagged comparison speaks about the warm start more than about the methods."
        )
    lines.append("")
    lines += ["## Setup", "", *(f"- {s}" for s in report.setup), ""]
    for table in report.tables:
        lines += [f"## {table.title}", "", *_md_table(table.headers, table.rows), ""]
    if report.figures:
        lines += ["## Figures", ""]
        lines += [f"![{f.title}]({figure_paths[f.name]})" for f in report.figures] + [""]
    if report.caveats:
        lines += ["## What this can and cannot show", "", *(f"- {c}" for c in report.caveats), ""]
    if report.checkpoint_runs:
        lines += [f"## {CHECKPOINT_RUNS_TITLE}", ""]
        for plan in report.checkpoint_runs:
            lines += [
                f"- Decides: {'; '.join(plan.decides)}.",
                f"- Needs: {plan.needs}",
                f"- Read: {plan.reads}",
                f"- Runs: {len(plan.runs)} of `{plan.deployment}` (arm x seed):",
                "",
                "```bash",
                *plan.commands,
                "```",
                "",
            ]
    return "\n".join(lines)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return html_table(headers, [[_cell(c) for c in row] for row in rows])


def to_html(report: FidelityReport, pngs: dict[str, Path]) -> str:
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(report.title)}</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:.25em .5em;font-size:90%}.holds{color:#070}.does-not-hold{color:#a00}"
        ".cannot-tell-at-this-power{color:#666}.flagged{color:#a60;font-weight:bold}</style></head><body>",
        f"<h1>{esc(report.title)}</h1>",
        f"<p>Paper: {esc(report.paper)}. Seeds: {report.seeds}. "
        f"{'Quick size (a smoke size: no reading). ' if report.quick else ''}"
        f"{esc(_provenance(report))}</p>",
        f"<p>Command: <code>{esc(report.command)}</code></p>",
        "<h2>Claims, measurements, verdicts</h2><table><thead><tr><th>claim</th><th>where</th>"
        "<th>measured (mean ± s.e. over seeds)</th><th>verdict</th></tr></thead><tbody>",
    ]
    for f in report.findings:
        css = f.verdict.value.replace(" ", "-")
        parts.append(
            f"<tr><td>{esc(f.claim)}</td><td>{esc(f.source)}</td><td>{esc(f.measurement)}</td>"
            f"<td class='{css}'><b>{esc(f.verdict.value)}</b></td></tr>"
        )
    parts.append("</tbody></table>")
    parts += [f"<p><i>{esc(f.claim)}</i>: {esc(f.note)}</p>" for f in report.findings if f.note]
    parts.append("<h2>Headroom of the warm start</h2><ul>")
    parts += [
        f"<li class='{'flagged' if h.flagged else 'room'}'>"
        f"{esc(h.describe()).replace('**', '')}</li>"
        for h in report.headroom
    ]
    parts.append("</ul>")
    parts.append("<h2>Setup</h2><ul>" + "".join(f"<li>{esc(s)}</li>" for s in report.setup))
    parts.append("</ul>")
    for table in report.tables:
        parts += [f"<h2>{esc(table.title)}</h2>", _html_table(table.headers, table.rows)]
    for figure in report.figures:
        data = base64.b64encode(pngs[figure.name].read_bytes()).decode("ascii")
        parts.append(
            f"<h3>{esc(figure.title)}</h3><img alt='{esc(figure.title)}' "
            f"src='data:image/png;base64,{data}'>"
        )
    if report.caveats:
        parts.append("<h2>What this can and cannot show</h2><ul>")
        parts += [f"<li>{esc(c)}</li>" for c in report.caveats]
        parts.append("</ul>")
    if report.checkpoint_runs:
        parts.append(f"<h2>{esc(CHECKPOINT_RUNS_TITLE)}</h2>")
    for plan in report.checkpoint_runs:
        parts.append(
            f"<ul><li>Decides: {esc('; '.join(plan.decides))}.</li><li>Needs: {esc(plan.needs)}"
            f"</li><li>Read: {esc(plan.reads)}</li><li>Runs: {len(plan.runs)} of "
            f"<code>{esc(plan.deployment)}</code> (arm x seed):</li></ul>"
        )
        parts.append("<pre>" + esc("\n".join(plan.commands)) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Verdict):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _jsonable(value.item())
    return value


def write_report(report: FidelityReport, out_dir: str | Path) -> Path:
    """Write the report into ``out_dir`` (created); returns the Markdown file's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pngs = {f.name: plot_figure(f, out / "figures" / f"{f.name}.png") for f in report.figures}
    relative = {name: path.relative_to(out).as_posix() for name, path in pngs.items()}
    (out / "report.md").write_text(to_markdown(report, relative), encoding="utf-8")
    (out / "report.html").write_text(to_html(report, pngs), encoding="utf-8")
    payload = _jsonable(report)
    payload["verdicts"] = report.verdicts
    payload["headroom"] = [h.to_json() for h in report.headroom]
    payload["headroom_flags"] = report.headroom_flags
    payload["checkpoint_runs"] = [plan.to_json() for plan in report.checkpoint_runs]
    payload["figure_files"] = relative
    (out / "report.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return out / "report.md"


def check_report(folder: str | Path) -> list[str]:
    """What is wrong with a written report folder (an empty list: well formed).

    Checks the files exist, the JSON has its fields and at least one finding, every verdict is
    one of the three, every figure's PNG exists and is embedded in the HTML, and the Markdown
    carries every claim. It never looks at what the numbers say."""
    folder = Path(folder)
    problems = [f"{name} is missing" for name in REPORT_FILES if not (folder / name).is_file()]
    if problems:
        return problems
    try:
        data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        return [f"report.json is not JSON: {err}"]
    for key in ("name", "title", "paper", "command", "setup", "findings", "seeds", "headroom"):
        if key not in data:
            problems.append(f"report.json has no {key!r}")
    findings = data.get("findings") or []
    if not findings:
        problems.append("the report has no findings")
    allowed = {v.value for v in Verdict}
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    page = (folder / "report.html").read_text(encoding="utf-8")
    for f in findings:
        if f.get("verdict") not in allowed:
            problems.append(f"finding {f.get('claim')!r} has verdict {f.get('verdict')!r}")
        if not f.get("measurement"):
            problems.append(f"finding {f.get('claim')!r} has no measurement")
        if str(f.get("claim")) not in markdown:
            problems.append(f"report.md does not state the claim {f.get('claim')!r}")
    headroom = data.get("headroom") or []
    if "headroom" in data and not headroom:
        problems.append("the report states no headroom (its warm start's floor and ceiling)")
    for entry in headroom:
        missing = [k for k in ("metric", "warm_start", "floor", "ceiling") if k not in entry]
        if missing:
            problems.append(f"a headroom entry has no {', '.join(missing)}: {entry}")
    if headroom and "## Headroom of the warm start" not in markdown:
        problems.append("report.md does not state the headroom")
    for plan in data.get("checkpoint_runs") or []:
        missing = [k for k in ("decides", "needs", "reads", "commands") if not plan.get(k)]
        if missing:
            problems.append(
                f"a checkpoint run has no {', '.join(missing)}: {plan.get('deployment')}"
            )
        for command in plan.get("commands") or []:
            if command not in markdown:
                problems.append(f"report.md does not give the command {command!r}")
    for name, rel in (data.get("figure_files") or {}).items():
        png = folder / rel
        if not png.is_file() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
            problems.append(f"figure {name} ({rel}) is not a PNG")
    if page.count("data:image/png;base64,") != len(data.get("figure_files") or {}):
        problems.append("report.html does not embed every figure")
    return problems
