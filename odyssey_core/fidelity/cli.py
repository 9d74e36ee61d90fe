"""``odyssey bench fidelity``: the papers' comparisons at CPU scale, one report each."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from odyssey_core.fidelity import COMPARISONS, PAPERS, FidelityRun, comparisons_of
from odyssey_core.fidelity.report import check_report, write_report
from odyssey_core.fidelity.run import one_torch_thread

BUDGET_UNITS = (
    "Its unit is the comparison's own: turn samples per run for the Odysseus comparisons, "
    "RL steps per run for GTR and ESPO."
)


@click.group("bench", context_settings={"help_option_names": ["-h", "--help"]})
def bench_group() -> None:
    """Benchmarks that answer a question with statistics (timings live under bench/)."""


@bench_group.command("fidelity")
@click.option(
    "--paper",
    type=click.Choice([*PAPERS, "all"]),
    default="all",
    show_default=True,
    help="Run every comparison of this paper (odysseus has two: the estimators and SB3).",
)
@click.option(
    "--comparison",
    type=click.Choice(COMPARISONS.names()),
    default=None,
    help="Run only this comparison (overrides --paper).",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Training seeds per method.",
)
@click.option(
    "--budget",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Training budget per run. " + BUDGET_UNITS,
)
@click.option(
    "--quick",
    is_flag=True,
    help="A smoke size (minutes): checks the report is produced, no reading.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/fidelity"),
    show_default=True,
    help="Reports go to OUT/<comparison>/.",
)
@click.option(
    "--work",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Checkpoints and cached per-seed results (default OUT/<comparison>/work). Rerunning "
    "with the same folder resumes: finished runs are read back, not repeated.",
)
def fidelity_command(
    paper: str,
    comparison: str | None,
    seeds: int,
    budget: float | None,
    quick: bool,
    out: Path,
    work: Path | None,
) -> None:
    """Run the papers' comparisons and write one report (Markdown, HTML, JSON) per comparison."""
    names = comparisons_of(paper, comparison)
    command = "odyssey " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    failed = []
    for name in names:
        started = time.perf_counter()
        run = FidelityRun(
            out_dir=out / name,
            work_dir=(work / name) if work else out / name / "work",
            seeds=seeds,
            budget=budget,
            quick=quick,
            command=command,
            log=lambda line: click.echo(line, err=True),
        )
        click.echo(f"[fidelity] {name}: {seeds} seed(s), {'quick' if quick else 'default'} size")
        with one_torch_thread():
            report = COMPARISONS.get(name)(run)
        report.elapsed_s = time.perf_counter() - started
        report.cached_results, report.computed_results = run.cache_hits, run.cache_misses
        path = write_report(report, run.out_dir)
        problems = check_report(run.out_dir)
        if problems:
            failed.append(name)
            click.echo(
                f"[fidelity] {name}: the report is malformed: {'; '.join(problems)}", err=True
            )
        click.echo(f"[fidelity] {name}: {path}")
        for finding in report.findings:
            click.echo(f"  {finding.verdict.value:26s} {finding.claim}: {finding.measurement}")
    if failed:
        raise click.ClickException(f"malformed reports: {', '.join(failed)}")
