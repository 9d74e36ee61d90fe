"""The GTR fidelity comparison at its quick size: the report is well formed, and a rerun reads
every result back from the cache. No test reads a verdict or a number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odyssey_core.fidelity import COMPARISONS, FidelityRun, check_report, gtr, write_report


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[FidelityRun, Path]:
    out = tmp_path_factory.mktemp("gtr-fidelity")
    run = FidelityRun(out_dir=out, work_dir=out / "work", seeds=2, quick=True)
    report = COMPARISONS.get("gtr")(run)
    write_report(report, out)
    return run, out


def test_quick_report_is_well_formed(quick_run: tuple[FidelityRun, Path]) -> None:
    _, out = quick_run
    assert check_report(out) == []
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    claims = [f["claim"] for f in data["findings"]]
    for env in gtr.QUICK_SIZES.envs:
        assert f"{env}: GTR > RL4VLM (success rate)" in claims
        assert f"{env}: GTR > SFT-only (success rate)" in claims
        assert any(c.startswith(f"{env}: RL4VLM's thoughts collapse") for c in claims)
        short = env.removeprefix("cards-")
        assert {f"gtr_success_{short}", f"gtr_collapse_{short}"} <= set(data["figure_files"])
    setup = " ".join(data["setup"])
    assert "noisy_programmatic" in setup and "not an oracle" in setup
    assert "openai" in setup  # trained or skipped, and said which
    assert data["seeds"] == 2 and data["quick"] is True
    headroom = {h["label"]: h for h in data["headroom"]}
    assert set(headroom) == set(gtr.QUICK_SIZES.envs)
    for entry in headroom.values():  # the warm-up's success on the deals, between 0 and 1
        assert (entry["metric"], entry["floor"], entry["ceiling"]) == ("success rate", 0.0, 1.0)
        warm = data["data"]["warm"][entry["label"]]
        rates = [sum(w["successes"]) / len(w["successes"]) for w in warm.values()]
        assert entry["warm_start"] == pytest.approx(sum(rates) / len(rates))


def test_rerun_reads_every_result_from_the_cache(
    quick_run: tuple[FidelityRun, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run, out = quick_run
    before = json.loads((out / "report.json").read_text(encoding="utf-8"))

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached result was computed again")

    monkeypatch.setattr(gtr, "train_and_evaluate", fail)
    monkeypatch.setattr(gtr, "build_corrector", fail)
    write_report(gtr.run_gtr(run), tmp_path)
    after = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert after["data"]["results"] == before["data"]["results"]
