"""``odyssey bench fidelity``: which comparisons it runs, with what, and where reports go."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from odyssey_core.cli import main
from odyssey_core.fidelity import COMPARISONS, PAPERS, FidelityRun, comparisons_of
from odyssey_core.fidelity.report import FidelityReport, Finding, Headroom
from odyssey_core.fidelity.stats import Verdict

LAZY = {
    name: f"odyssey_core.fidelity.{module}"
    for name, module in (
        ("odysseus-estimators", "odysseus:run_estimators"),
        ("odysseus-sb3", "odysseus:run_sb3"),
        ("gtr", "gtr:run_gtr"),
        ("espo", "espo:run_espo"),
    )
}


@pytest.fixture
def recorded() -> Iterator[list[FidelityRun]]:
    """Every comparison replaced by one that records its FidelityRun and reports one finding."""
    runs: list[FidelityRun] = []

    def fake(name: str):
        def run(fidelity: FidelityRun) -> FidelityReport:
            runs.append(fidelity)
            finding = Finding(f"{name} claim", "Fig. 1", "1 vs 0", Verdict.CANNOT_TELL)
            report = FidelityReport(name, name, "paper", fidelity.command, ["setup"], [finding])
            report.headroom = [Headroom("score", 0.5, 0.0, 1.0)]
            return report

        return run

    for name in COMPARISONS.names():
        COMPARISONS.register(name, fake(name), overwrite=True)
    yield runs
    for name in COMPARISONS.names():
        COMPARISONS.register(name, LAZY[name], overwrite=True)


def test_the_registry_and_the_papers_agree() -> None:
    assert sorted(n for names in PAPERS.values() for n in names) == COMPARISONS.names()
    assert sorted(LAZY) == COMPARISONS.names()
    assert comparisons_of("odysseus") == ["odysseus-estimators", "odysseus-sb3"]
    assert comparisons_of("all") == [n for names in PAPERS.values() for n in names]
    assert comparisons_of("odysseus", "espo") == ["espo"]
    with pytest.raises(ValueError, match="unknown paper 'mario'"):
        comparisons_of("mario")
    with pytest.raises(ValueError, match="unknown comparison 'fig9'; known: espo, gtr"):
        comparisons_of(None, "fig9")


def test_a_paper_runs_each_of_its_comparisons_into_its_own_folder(
    tmp_path: Path, recorded: list[FidelityRun]
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "fidelity",
            "--paper",
            "odysseus",
            "--seeds",
            "4",
            "--budget",
            "512",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert [r.out_dir for r in recorded] == [
        tmp_path / "odysseus-estimators",
        tmp_path / "odysseus-sb3",
    ]
    assert [r.work_dir for r in recorded] == [d / "work" for d in (r.out_dir for r in recorded)]
    assert {(r.seeds, r.budget, r.quick) for r in recorded} == {(4, 512.0, False)}
    for name in ("odysseus-estimators", "odysseus-sb3"):
        assert (tmp_path / name / "report.md").is_file()
        assert f"cannot tell at this power  {name} claim: 1 vs 0" in result.output


def test_one_comparison_quick_with_its_own_work_folder(
    tmp_path: Path, recorded: list[FidelityRun]
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "fidelity",
            "--comparison",
            "gtr",
            "--quick",
            "--out",
            str(tmp_path / "o"),
            "--work",
            str(tmp_path / "w"),
        ],
    )
    assert result.exit_code == 0, result.output
    (run,) = recorded
    assert (run.quick, run.seeds, run.work_dir) == (True, 3, tmp_path / "w" / "gtr")


def test_bad_arguments_fail_with_a_clear_message(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["bench", "fidelity", "--paper", "mario"])
    assert result.exit_code == 2 and "'mario' is not one of" in result.output
    result = runner.invoke(
        main, ["bench", "fidelity", "--comparison", "gtr", "--seeds", "0", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2 and "Invalid value for '--seeds'" in result.output
    result = runner.invoke(main, ["bench", "fidelity", "--budget", "0", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "Invalid value for '--budget'" in result.output
