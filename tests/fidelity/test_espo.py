"""The ESPO fidelity comparison end to end at its quick size: the report is well formed and
carries every claim and figure, and a rerun reads every (variant, seed) result from the cache.
No test looks at what the numbers or verdicts say."""

from __future__ import annotations

from pathlib import Path

import pytest

from odyssey_core.fidelity import espo
from odyssey_core.fidelity.report import check_report, write_report
from odyssey_core.fidelity.run import FidelityRun
from odyssey_core.recipes.espo.settings import load_espo_settings

EXPECTED_CLAIMS = (
    "ESPO beats vanilla GRPO from the same cold start (Step SR)",
    "RL with ESPO beats the SFT cold start alone (Step SR)",
    "removing the COUT reward (w = 0) makes ESPO worse (Step SR)",
    "removing intent confidence phi from COUT makes ESPO worse (Step SR)",
    "removing intent contribution psi from COUT makes ESPO worse (Step SR)",
    "more SFT epochs improve GUI grounding over the cold start (EleAcc)",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[FidelityRun, Path]:
    """One quick run with two seeds, its report written."""
    tmp = tmp_path_factory.mktemp("espo-fidelity")
    run = FidelityRun(out_dir=tmp / "out", work_dir=tmp / "work", seeds=2, quick=True)
    report = espo.run_espo(run)
    write_report(report, run.out_dir)
    return run, run.out_dir


def test_quick_report_is_well_formed_with_every_claim_and_figure(
    quick_run: tuple[FidelityRun, Path],
) -> None:
    import json

    _, out = quick_run
    assert check_report(out) == []
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    claims = {f["claim"] for f in data["findings"]}
    assert set(EXPECTED_CLAIMS) <= claims
    assert {f"eval_{k}" for k in espo.METRIC_KEYS} | {"training_reward"} <= set(
        data["figure_files"]
    )
    results = data["data"]["results"]
    assert set(results) == set(espo.VARIANTS)
    (headroom,) = data["headroom"]  # the cold start's Step SR, in percent
    assert headroom["metric"] == "Step SR (%)" and headroom["ceiling"] == 100.0
    assert 0.0 <= headroom["floor"] < 100.0
    cold = [r["metrics"]["step_sr"]["value"] for r in results["sft_only"]]
    assert headroom["warm_start"] == pytest.approx(100 * sum(cold) / len(cold))
    assert any(line.startswith("Best achievable RecAcc: ") for line in data["setup"])
    (plan,) = data["checkpoint_runs"]  # the run with a real backbone that would decide them
    assert plan["deployment"] == "train-espo/travel" and set(plan["decides"]) <= claims
    assert all(len(per_seed) == 2 for per_seed in results.values())
    for variant in espo.RL_VARIANTS:  # equal RL steps, a curve point per step
        assert all(r["rl_steps"] == espo.QUICK_SIZES.rl_steps for r in results[variant])
        assert all(len(r["curve"]) == r["rl_steps"] for r in results[variant])


def test_rerun_reads_every_result_from_the_cache(
    quick_run: tuple[FidelityRun, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, _ = quick_run

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached (variant, seed) result was computed again")

    monkeypatch.setattr(espo, "train_and_evaluate", fail)
    monkeypatch.setattr(espo, "cold_start", fail)
    again = FidelityRun(out_dir=run.out_dir / "again", work_dir=run.work_dir, seeds=2, quick=True)
    report = espo.run_espo(again)
    assert {f.claim for f in report.findings} >= set(EXPECTED_CLAIMS)


def test_intent_never_scored_reads_the_cout_variants_training_curves() -> None:
    def runs(*intent: float) -> list[dict]:
        return [{"curve": [{"intent_acc": v} for v in intent]}]

    zero = {v: runs(0.0, 0.0) for v in ("espo", "no_cout", "no_phi", "no_psi")}
    assert espo.intent_never_scored(zero)
    assert not espo.intent_never_scored({**zero, "no_phi": runs(0.0, 0.25)})
    assert not espo.intent_never_scored({v: [{"curve": []}] for v in zero})  # no steps: no claim
    # vanilla GRPO has no COUT term; its intent accuracy does not count
    assert espo.intent_never_scored({**zero, "vanilla_grpo": runs(0.5)})


def test_default_answers_fit_every_demonstrated_answer() -> None:
    """Evaluation and rollouts allow as many new tokens as the longest demonstrated answer
    (the pool step's summary): a shorter limit cuts every pool and recommend answer before
    </answer>, and Intent_acc, R_COUT and RecAcc can only be 0."""
    from odyssey_core.envs.persona.dataset import generate_episodes
    from odyssey_core.models.tiny import build_tiny_tokenizer
    from odyssey_core.protocol.gui import format_gui_answer
    from odyssey_core.recipes.espo.sft_data import template_thought

    tokenizer = build_tiny_tokenizer()
    longest = {}
    for episode in generate_episodes("tiny", espo.TRAIN_DATA_SEED):
        for step in episode.steps:
            answer = format_gui_answer(step.gold, template_thought(step, episode))
            n = len(tokenizer(answer)["input_ids"]) + 1  # the end-of-turn token
            longest[step.stage] = max(longest.get(step.stage, 0), n)
    assert set(longest) == {"search", "pool", "recommend"}
    assert max(longest.values()) <= espo.DEFAULT_SIZES.max_new_tokens, longest
    tiny = load_espo_settings("tiny").rollout.generation.max_new_tokens
    assert max(longest.values()) <= tiny, longest  # the tiny preset's rollouts and evaluation


def test_more_demonstrations_draw_more_episodes_of_every_channel(tmp_path: Path) -> None:
    from odyssey_core.envs.persona.dataset import read_dataset

    preset = espo.tiny_dataset(tmp_path / "preset", 0)
    more = espo.tiny_dataset(tmp_path / "more", 0, episodes_per_channel=3)
    n_preset = sum(len(read_dataset(preset, split=s)) for s in ("train", "val", "test"))
    n_more = sum(len(read_dataset(more, split=s)) for s in ("train", "val", "test"))
    assert n_more == n_preset // 2 * 3  # the preset draws two a channel


def test_all_sft_trains_the_cold_starts_run_on(quick_run: tuple[FidelityRun, Path]) -> None:
    """All SFT is the cold start's SFT run trained longer: it resumes at the cold start's last
    step (its weights, optimiser and schedule), not from the base model at step 1."""
    import json

    run, _ = quick_run
    sizes = espo.QUICK_SIZES
    assert sizes.sft_epochs is not None and sizes.sft_max_steps is not None
    assert sizes.all_sft_max_steps is not None
    seed_dir = run.work_dir / "quick" / "seed-0"
    cold = seed_dir / f"sft-{espo.sft_tag(sizes.sft_epochs, sizes.sft_max_steps)}"
    total = sizes.sft_max_steps + sizes.all_sft_max_steps
    longer = seed_dir / f"all_sft-{espo.sft_tag(sizes.sft_epochs + sizes.all_sft_epochs, total)}"
    longer = longer.with_name(longer.name + "-resumed")

    def steps(folder: Path) -> list[int]:
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        return [r["step"] for r in map(json.loads, lines) if "loss" in r]

    assert steps(cold) == list(range(1, sizes.sft_max_steps + 1))
    assert steps(longer) == list(range(sizes.sft_max_steps + 1, total + 1))
