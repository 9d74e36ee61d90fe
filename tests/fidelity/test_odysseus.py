"""The Odysseus fidelity comparisons at quick size: the reports are well formed, results are
cached and read back, and the pure readings of the curves are right. No verdict is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odyssey_core.fidelity import FidelityRun, check_report, odysseus, write_report

ESTIMATOR_CLAIMS = {
    "PPO + critic + pos. filter >= PPO + critic",
    "PPO + critic > GRPO (outcome)",
    "PPO + critic > GRPO (outcome) + pos. filter",
    "PPO + critic > GRPO (process)",
    "PPO + critic > GRPO (process) + pos. filter",
    "PPO + critic > Reinforce++ (turn level)",
    "GRPO (outcome) improves on the warm start",
    "the other critic-free methods do not improve on the warm start",
}
SB3_CLAIMS = {
    "VLM RL > SB3 PPO (engineered actions)",
    "VLM RL > SB3 PPO (original actions)",
    "SB3 PPO: engineered actions > original actions",
}


def quick_run(folder: Path) -> FidelityRun:
    return FidelityRun(out_dir=folder, work_dir=folder / "work", seeds=2, quick=True)


def _fail(*_args, **_kwargs):
    raise AssertionError("computed again instead of read from the cache")


@pytest.fixture(scope="module")
def estimators_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The estimators comparison run once at quick size, in OUT/odysseus-estimators."""
    out = tmp_path_factory.mktemp("fidelity") / "odysseus-estimators"
    report = odysseus.run_estimators(quick_run(out))
    write_report(report, out)
    return out


def test_estimators_quick_report(estimators_out: Path) -> None:
    assert check_report(estimators_out) == []
    data = json.loads((estimators_out / "report.json").read_text())
    assert {f["claim"] for f in data["findings"]} == ESTIMATOR_CLAIMS
    assert set(data["figure_files"]) == {"estimators_vs_turns", "estimators_vs_wall"}
    assert set(data["data"]["results"]) == set(odysseus.ESTIMATOR_LABELS)
    assert data["seeds"] == 2 and data["quick"] is True
    (headroom,) = data["headroom"]  # the warm start between standing still and the goal
    floor, ceiling = odysseus.scenario_ends()
    assert (headroom["floor"], headroom["ceiling"]) == (floor, ceiling) and floor < ceiling
    warm = [w["mean"] for w in data["data"]["warm"].values()]
    assert headroom["warm_start"] == pytest.approx(sum(warm) / len(warm))


def test_estimators_rerun_reads_the_cache(estimators_out: Path, monkeypatch) -> None:
    results = estimators_out / "work" / "results"
    for estimator in odysseus.ESTIMATOR_LABELS:
        for seed in (0, 1):
            assert (results / f"estimator-{estimator}-seed{seed}-budget16-quick.json").is_file()
    monkeypatch.setattr(odysseus, "_train_estimator", _fail)
    monkeypatch.setattr(odysseus, "_warm_eval", _fail)
    monkeypatch.setattr(odysseus, "warm_checkpoint", _fail)
    report = odysseus.run_estimators(quick_run(estimators_out))
    assert {f.claim for f in report.findings} == ESTIMATOR_CLAIMS


def test_sb3_quick_report(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    out = tmp_path / "odysseus-sb3"
    report = odysseus.run_sb3(quick_run(out))
    write_report(report, out)
    assert check_report(out) == []
    data = json.loads((out / "report.json").read_text())
    assert {f["claim"] for f in data["findings"]} == SB3_CLAIMS
    assert set(data["figure_files"]) == {"sb3_vs_turns"}
    assert (out / "work" / "results" / "sb3-original-seed1-budget16-quick.json").is_file()

    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as patch:
        patch.setattr(odysseus, "_train_sb3", _fail)
        patch.setattr(odysseus, "_train_estimator", _fail)
        again = odysseus.run_sb3(quick_run(out))
    assert {f.claim for f in again.findings} == SB3_CLAIMS


def test_sb3_reuses_the_estimators_vlm_runs(estimators_out: Path, monkeypatch) -> None:
    """Beside OUT/odysseus-estimators, the SB3 comparison reads its ppo_critic_pos runs."""
    pytest.importorskip("stable_baselines3")
    out = estimators_out.parent / "odysseus-sb3"
    run = quick_run(out)
    monkeypatch.setattr(odysseus, "_train_estimator", _fail)
    monkeypatch.setattr(odysseus, "_train_sb3", lambda *a: _sb3_stub())
    report = odysseus.run_sb3(run)
    assert {f.claim for f in report.findings} == SB3_CLAIMS
    assert not (
        out / "work" / "results" / "estimator-ppo_critic_pos-seed0-budget16-quick.json"
    ).exists()


def _sb3_stub() -> dict:
    curve = {"turn_samples": [8.0, 16.0], "wall_s": [0.1, 0.2], "progress": [1.0, 2.0]}
    return {"curve": curve, "wall_s": 0.2, "final": {"best_mean": 1.0, "best_se": 0.0}}


def test_equal_wall_values_reads_every_curve_at_the_shortest_run() -> None:
    at, values = odysseus.equal_wall_values(
        {"a": [([1.0, 2.0, 3.0], [0.0, 10.0, 10.0])], "b": [([1.0, 2.0], [4.0, 4.0])]}
    )
    assert at == 2.0
    # a's EMA 0.85: 0, 0.15 * 10 = 1.5, ...; read at t = 2
    assert values["a"] == pytest.approx([1.5])
    assert values["b"] == pytest.approx([4.0])


def test_equal_wall_values_without_curves() -> None:
    at, values = odysseus.equal_wall_values({"a": []})
    assert at != at and values == {"a": []}


def test_bucket_episodes_groups_like_rl_steps() -> None:
    curve = odysseus.bucket_episodes([3, 3, 5, 2], [1.0, 3.0, 5.0, 7.0], [0.1, 0.2, 0.3, 0.4], 6)
    # turns 3, 6 (window 1 closes: episodes 1, 3), 11, 13 (window 2 closes past 12: 5, 7)
    assert curve["turn_samples"] == [6.0, 13.0]
    assert curve["progress"] == [2.0, 6.0]
    assert curve["wall_s"] == [0.2, 0.4]


def test_bucket_episodes_keeps_a_partial_last_window() -> None:
    curve = odysseus.bucket_episodes([4, 1], [2.0, 4.0], [1.0, 2.0], 10)
    assert curve == {"turn_samples": [5.0], "wall_s": [2.0], "progress": [3.0]}


def test_budget_and_size_follow_the_run(tmp_path: Path) -> None:
    quick = FidelityRun(out_dir=tmp_path, work_dir=tmp_path, quick=True)
    full = FidelityRun(out_dir=tmp_path, work_dir=tmp_path, budget=640)
    assert odysseus.size_of(quick) is odysseus.QUICK
    assert odysseus.budget_of(quick) == odysseus.QUICK.turn_samples
    assert odysseus.size_of(full) is odysseus.DEFAULT and odysseus.budget_of(full) == 640
