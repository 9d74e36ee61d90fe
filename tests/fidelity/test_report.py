"""A fidelity report written to disk and read back: its files, and what makes one malformed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odyssey_core.fidelity.report import (
    FidelityReport,
    Figure,
    Finding,
    Headroom,
    Series,
    Table,
    check_report,
    report_for,
    write_report,
)
from odyssey_core.fidelity.run import FidelityRun
from odyssey_core.fidelity.stats import Verdict, seed_band


def sample_report() -> FidelityReport:
    band = seed_band([([0, 1, 2], [0.0, 1.0, 2.0]), ([0, 1, 2], [0.5, 1.0, 1.5])], points=3)
    return FidelityReport(
        name="sample",
        title="A sample comparison",
        paper="A paper",
        command="odyssey bench fidelity --comparison sample",
        setup=["two seeds", "three steps"],
        findings=[
            Finding("A > B", "Fig. 1", "1 ± 0.1 vs 0 ± 0.1", Verdict.HOLDS, note="by a margin"),
            Finding("B > C", "Fig. 2", "0 ± 0.1 vs 0 ± 0.1", Verdict.CANNOT_TELL),
        ],
        tables=[Table("Numbers", ["method", "score"], [["A", 1.0], ["B", float("nan")]])],
        figures=[
            Figure("curve", "Score over steps", "step", "score", [Series.of("A", band)]),
            Figure("bars", "Final", "method", "score", [Series("A", [0], [1.0], [0.1])], "bar"),
        ],
        caveats=["small model"],
        headroom=[Headroom("score", 0.4, 0.0, 1.0, label="game A")],
        seeds=2,
        data={"A": [1.0, float("nan")]},
    )


def test_a_written_report_is_well_formed(tmp_path: Path) -> None:
    md = write_report(sample_report(), tmp_path)
    assert check_report(tmp_path) == []
    text = md.read_text()
    assert "| A > B | Fig. 1 | 1 ± 0.1 vs 0 ± 0.1 | **holds** |" in text
    assert "![Score over steps](figures/curve.png)" in text
    assert "from an earlier run's cache" not in text
    assert "| B | n/a |" in text
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "cannot tell at this power" in page
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["verdicts"] == {"A > B": "holds", "B > C": "cannot tell at this power"}
    assert data["data"]["A"] == [1.0, None]  # JSON has no NaN


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda d: (d / "report.html").unlink(), "report.html is missing"),
        (lambda d: (d / "figures" / "bars.png").write_bytes(b"no"), "bars"),
        (
            lambda d: (d / "report.md").write_text("# nothing"),
            "report.md does not state the claim 'A > B'",
        ),
    ],
)
def test_check_report_names_what_is_wrong(tmp_path: Path, damage, problem: str) -> None:
    write_report(sample_report(), tmp_path)
    damage(tmp_path)
    assert any(problem in p for p in check_report(tmp_path))


def test_check_report_rejects_an_unknown_verdict_and_no_findings(tmp_path: Path) -> None:
    write_report(sample_report(), tmp_path)
    path = tmp_path / "report.json"
    data = json.loads(path.read_text())
    data["findings"][0]["verdict"] = "probably"
    path.write_text(json.dumps(data))
    assert any("verdict 'probably'" in p for p in check_report(tmp_path))
    data["findings"] = []
    path.write_text(json.dumps(data))
    assert "the report has no findings" in check_report(tmp_path)


def test_cached_results_are_computed_once_and_written_whole(tmp_path: Path) -> None:
    run = FidelityRun(out_dir=tmp_path, work_dir=tmp_path / "work", log=lambda _: None)
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"score": 1.5}

    assert run.cached("m/seed 0", compute) == {"score": 1.5}
    assert run.cached("m/seed 0", compute) == {"score": 1.5}
    assert len(calls) == 1
    assert (run.cache_hits, run.cache_misses) == (1, 1)
    assert [p.name for p in (tmp_path / "work" / "results").iterdir()] == ["m_seed_0.json"]


def test_a_failed_computation_leaves_no_cached_result(tmp_path: Path) -> None:
    run = FidelityRun(out_dir=tmp_path, work_dir=tmp_path / "work", log=lambda _: None)

    def killed() -> dict:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run.cached("m", killed)
    assert not run.cache_path("m").exists()


def test_run_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--seeds must be at least 1"):
        FidelityRun(out_dir=tmp_path, work_dir=tmp_path, seeds=0)
    with pytest.raises(ValueError, match="--budget must be positive"):
        FidelityRun(out_dir=tmp_path, work_dir=tmp_path, budget=-1)
    run = FidelityRun(out_dir=tmp_path, work_dir=tmp_path, quick=True)
    assert run.budget_or(100, 2) == 2
    assert FidelityRun(out_dir=tmp_path, work_dir=tmp_path, budget=7).budget_or(100, 2) == 7


def test_one_torch_thread_restores_the_thread_count() -> None:
    import torch

    from odyssey_core.fidelity.run import one_torch_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_report_says_how_much_came_from_the_cache(tmp_path: Path) -> None:
    report = sample_report()
    report.elapsed_s, report.cached_results, report.computed_results = 90.0, 3, 1
    text = write_report(report, tmp_path).read_text()
    assert "Wall clock: 1.5 min (3 of 4 results read from an earlier run's cache)." in text


@pytest.mark.parametrize(
    ("warm_start", "status"),
    [
        (0.0, "at floor"),
        (0.01, "at floor"),
        (-0.5, "at floor"),
        (0.05, "near floor"),
        (0.4, "ok"),
        (0.9, "near ceiling"),
        (1.0, "at ceiling"),
        (float("nan"), "unknown"),
    ],
)
def test_headroom_status_places_the_warm_start_in_its_range(warm_start, status) -> None:
    headroom = Headroom("success", warm_start, 0.0, 1.0)
    assert headroom.status == status
    assert headroom.flagged == (status != "ok")


def test_headroom_of_a_scaled_range_reads_shares_of_it() -> None:
    assert Headroom("progress", 1232, 1156, 1448).status == "ok"  # 26% of the range
    assert Headroom("progress", 1160, 1156, 1448).status == "at floor"
    with pytest.raises(ValueError, match=r"ceiling .* must be above the floor"):
        Headroom("progress", 1.0, 2.0, 2.0)


def test_a_warm_start_at_the_floor_is_flagged_in_the_json_and_the_markdown(
    tmp_path: Path,
) -> None:
    report = sample_report()
    report.headroom.append(Headroom("success", 0.0, 0.0, 1.0, label="game B"))
    md = write_report(report, tmp_path).read_text()
    assert check_report(tmp_path) == []
    data = json.loads((tmp_path / "report.json").read_text())
    by_label = {h["label"]: h for h in data["headroom"]}
    assert set(by_label) == {"game A", "game B"}
    assert by_label["game A"] | {"position": 0.4} == {
        "metric": "score",
        "warm_start": 0.4,
        "floor": 0.0,
        "ceiling": 1.0,
        "label": "game A",
        "note": "",
        "position": 0.4,
        "status": "ok",
        "flagged": False,
    }
    assert by_label["game B"]["status"] == "at floor" and by_label["game B"]["flagged"]
    assert len(data["headroom_flags"]) == 1 and "game B" in data["headroom_flags"][0]
    assert "score (game A): warm start 0.4 between floor 0 and ceiling 1, 40% of the range" in md
    assert (
        "success (game B): warm start 0 between floor 0 and ceiling 1, 0% of the range. "
        "**Flag: at floor**" in md
    )
    assert "1 of 2 warm starts flagged" in md
    assert "Flag: at floor" in (tmp_path / "report.html").read_text()


def test_check_report_wants_the_headroom(tmp_path: Path) -> None:
    write_report(sample_report(), tmp_path)
    path = tmp_path / "report.json"
    data = json.loads(path.read_text())
    data["headroom"] = [{"metric": "score", "warm_start": 0.4}]
    path.write_text(json.dumps(data))
    assert any("headroom entry has no floor, ceiling" in p for p in check_report(tmp_path))
    data.pop("headroom")
    path.write_text(json.dumps(data))
    assert "report.json has no 'headroom'" in check_report(tmp_path)


def test_report_for_takes_the_command_seeds_and_size_from_the_run(tmp_path: Path) -> None:
    run = FidelityRun(out_dir=tmp_path, work_dir=tmp_path, seeds=4, quick=True)
    report = report_for(run, "sample", title="t", paper="p", setup=[], findings=[])
    assert (report.command, report.seeds, report.quick) == (
        "odyssey bench fidelity --comparison sample",
        4,
        True,
    )
