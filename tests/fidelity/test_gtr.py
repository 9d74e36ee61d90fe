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
    (plan,) = data["checkpoint_runs"]  # Points24 with a real checkpoint, GTR vs RL4VLM
    assert plan["deployment"] == "train-gtr/points24" and len(plan["commands"]) == 6
    headroom = {h["label"]: h for h in data["headroom"]}
    assert set(headroom) == set(gtr.QUICK_SIZES.envs)
    sizes = gtr.QUICK_SIZES
    for entry in headroom.values():  # the warm-up's success, between random play and 1
        floor = gtr.random_play_success(entry["label"], sizes.env_kwargs(entry["label"]), 2)
        assert (entry["metric"], entry["floor"], entry["ceiling"]) == ("success rate", floor, 1.0)
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


def test_the_variants_keep_the_games_and_change_only_the_deal_or_the_drawing() -> None:
    from odyssey_core.envs import make_env

    ezpoints = make_env("cards-ezpoints", **gtr.DEFAULT_SIZES.env_kwargs("cards-ezpoints"))
    hands = set()
    for k in range(40):
        _, info = ezpoints.reset(seed=k)
        hands.add(tuple(sorted(info["card_values"])))
    assert hands == {(2, 10), (4, 8), (6, 6)}  # every deal solvable, from the five ranks only
    with pytest.raises(ValueError, match="ranks must be some of"):
        make_env("cards-ezpoints", ranks=["1"])

    plain = make_env("cards-numberline", max_steps=6)
    large = make_env("cards-numberline", **gtr.DEFAULT_SIZES.env_kwargs("cards-numberline"))
    plain_frame, _ = plain.reset(seed=3)
    large_frame, info = large.reset(seed=3)
    assert info["target"] == plain.target and large.current == plain.current  # the same deal
    lit = (large_frame.image > 200).all(axis=-1).sum()  # white text pixels
    assert lit > 5 * (plain_frame.image > 200).all(axis=-1).sum()


def test_random_play_succeeds_often_on_numberline_and_never_on_the_formula_games() -> None:
    kwargs = gtr.DEFAULT_SIZES.env_kwargs
    numberline = gtr.random_play_success("cards-numberline", kwargs("cards-numberline"), 8)
    assert 0.2 < numberline < 0.8  # a random walk hits a target 1-5 away in 6 steps often
    # 6 turns cannot hold the 4 numbers and 3 operators a Points24 formula needs
    assert gtr.random_play_success("cards-points24", kwargs("cards-points24"), 4) == 0.0
