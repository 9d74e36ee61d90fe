"""ESPO's COUT reward and episode-wise advantage against values worked by hand.

The golden group (one demonstrated episode, G = 3 samples of each of its 5 steps):

    step          0 search  1 search  2 pool      3 recommend  4 recommend
    sample 0: a   1         1         0.5 (I)     1            0
    sample 1: a   1         0         1.0 (I)     1            1
    sample 2: a   0         0         0.0 (I)     0            1
    format f: all 1, except sample 2's steps 1 and 2 (0)

Step rewards r = 0.8 a + 0.2 f:
    sample 0: 1.0  1.0  0.6  1.0  0.2
    sample 1: 1.0  0.2  1.0  1.0  1.0
    sample 2: 0.2  0.0  0.0  0.2  1.0

Signed sums S = sum(2a - 1):  S_gui = 2, 0, -2;  S_rec = 0, 2, 0.
Gates: phi = sigma(2), sigma(0), sigma(-2) = 0.880797, 0.5, 0.119203;
       psi = 0.5, sigma(2), 0.5.
R_COUT = (phi + psi) * I:  R0 = (0.880797 + 0.5) * 0.5 = 0.690399,
                           R1 = (0.5 + 0.880797) * 1.0 = 1.380797 = 2 R0,   R2 = 0.
"""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch

from odyssey_core.recipes.espo.advantages import (
    EspoAdvantageSettings,
    cout_reward,
    episode_cout_rewards,
    espo,
    gate,
    group_relative,
    grpo_step,
    stage_sum,
)
from odyssey_core.rl.advantages import ESTIMATORS, AdvantageSettings, compute_advantages
from tests.helpers_batches import facts_batch

STAGES = ["search", "search", "pool", "recommend", "recommend"]
ACCURACY = [[1, 1, 0.5, 1, 0], [1, 0, 1.0, 1, 1], [0, 0, 0.0, 0, 1]]  # pool column: Intent_acc
FORMAT = [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 0, 0, 1, 1]]
SIGMA2 = 1 / (1 + math.exp(-2))  # 0.8807970779778823
R0 = (SIGMA2 + 0.5) * 0.5
ROOT3 = math.sqrt(3)

# A_step per step, (r - mean) / sample std over the 3 samples (eps = 1e-6 moves them < 1e-5):
#   step 0 [1, 1, 0.2]: mean 0.7333, deviations [0.2667, 0.2667, -0.5333]; with deviations
#          [d, d, -2d] the sample std is sqrt(6 d^2 / 2) = sqrt(3) d:  [1, 1, -2] / sqrt(3)
#   step 1 [1, 0.2, 0]: mean 0.4, deviations [0.6, -0.2, -0.4], sample var 0.56 / 2 = 0.28
#   step 2 [0.6, 1, 0]: mean 1.6/3, deviations [0.2, 1.4, -1.6] / 3, sample var 4.56 / 18,
#          so A = [0.2, 1.4, -1.6] / sqrt(2.28)
#   step 3 = step 0;  step 4 [0.2, 1, 1]: [-2, 1, 1] / sqrt(3)
A_STEP = [
    [1 / ROOT3, 0.6 / math.sqrt(0.28), 0.2 / math.sqrt(2.28), 1 / ROOT3, -2 / ROOT3],
    [1 / ROOT3, -0.2 / math.sqrt(0.28), 1.4 / math.sqrt(2.28), 1 / ROOT3, 1 / ROOT3],
    [-2 / ROOT3, -0.4 / math.sqrt(0.28), -1.6 / math.sqrt(2.28), -2 / ROOT3, 1 / ROOT3],
]
# A_COUT: R = [R0, 2 R0, 0], mean R0, deviations [0, R0, -R0], sample std
# sqrt(2 R0^2 / 2) = R0, so A_COUT = [0, 1, -1].
A_COUT = [0.0, 1.0, -1.0]


def espo_batch(groups, formats=None, *, stages=None, group_ids=None):
    """Rows group by group, sample by sample, step by step; ``groups[k][g][t]`` is the
    accuracy (Intent_acc on the pool step) of step t in sample g of group k."""
    episode_ids, turn_index, rewards, group_id, sample_index, stage, extras = ([] for _ in range(7))
    episode = 0
    for k, group in enumerate(groups):
        for g, sample in enumerate(group):
            steps = stages[k][g] if stages is not None else STAGES[: len(sample)]
            for t, (accuracy, kind) in enumerate(zip(sample, steps, strict=True)):
                f = formats[k][g][t] if formats is not None else 1
                episode_ids.append(episode)
                turn_index.append(t)
                rewards.append(0.8 * accuracy + 0.2 * f)
                group_id.append(group_ids[k] if group_ids is not None else k)
                sample_index.append(g)
                stage.append(kind)
                key = "intent_acc" if kind == "pool" else "accuracy"
                extras.append({key: accuracy})
            episode += 1
    n = len(episode_ids)
    last = [i == n - 1 or episode_ids[i + 1] != episode_ids[i] for i in range(n)]
    batch = facts_batch(
        episode_ids,
        turn_index,
        ["persona"] * n,
        extras,
        torch.tensor(rewards),
        torch.tensor(last),
    )
    return batch.with_fields(
        group_id=torch.tensor(group_id), sample_index=torch.tensor(sample_index), stage=stage
    )


GOLDEN = espo_batch([ACCURACY], [FORMAT])


def as_rows(values: torch.Tensor, samples: int = 3) -> list[list[float]]:
    return values.reshape(samples, -1).tolist()


def assert_rows(actual: torch.Tensor, expected: list[list[float]], abs: float = 1e-5) -> None:
    for got, want in zip(as_rows(actual, len(expected)), expected, strict=True):
        assert got == pytest.approx(want, abs=abs)


def norm(values: list[float]) -> list[float]:
    """An independent (x - mean) / sample std, by the statistics module."""
    mean, std = statistics.fmean(values), statistics.stdev(values)
    return [(v - mean) / (std + 1e-6) for v in values]


def test_both_estimators_are_registered_as_grouped() -> None:
    for name in ("espo", "grpo_step"):
        entry = ESTIMATORS.get(name)
        assert entry.grouped and not entry.needs_values and not entry.bootstraps
    assert ESTIMATORS.get("espo").fn is espo and ESTIMATORS.get("grpo_step").fn is grpo_step
    assert ESTIMATORS.get("espo").settings is EspoAdvantageSettings


def test_golden_step_rewards() -> None:
    expected = [[1.0, 1.0, 0.6, 1.0, 0.2], [1.0, 0.2, 1.0, 1.0, 1.0], [0.2, 0.0, 0.0, 0.2, 1.0]]
    assert_rows(GOLDEN.rewards, expected, abs=1e-7)


# -- the COUT reward -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accumulation", "expected"),
    [
        ("signed", 2.0),  # (2*1 - 1) + (2*1 - 1) + (2*0.5 - 1) = 1 + 1 + 0
        ("centred_mean", 1 / 3),  # 2.5 / 3 - 0.5
        ("sum", 2.5),
        ("mean", 2.5 / 3),
    ],
)
def test_stage_sum_modes(accumulation, expected) -> None:
    assert stage_sum([1, 1, 0.5], accumulation) == pytest.approx(expected, abs=1e-12)
    assert stage_sum(torch.tensor([1.0, 1.0, 0.5]), accumulation) == pytest.approx(expected)
    assert stage_sum([], accumulation) == 0.0  # no steps: no evidence, gate 0.5
    assert gate([], 1.0, accumulation) == 0.5


def test_only_the_signed_gate_closes_at_k_1() -> None:
    wrong, right = [0.0] * 5, [1.0] * 5
    # signed: S = -5 / +5
    assert gate(wrong, 1.0, "signed") == pytest.approx(1 / (1 + math.exp(5)))  # 0.0067
    assert gate(right, 1.0, "signed") == pytest.approx(1 / (1 + math.exp(-5)))  # 0.9933
    # sum / mean: S = 0 when all wrong, so the gate is stuck at one half or above
    assert gate(wrong, 1.0, "sum") == gate(wrong, 1.0, "mean") == 0.5
    assert gate(right, 1.0, "mean") == pytest.approx(1 / (1 + math.exp(-1)))  # 0.731
    # centred mean: S in [-0.5, 0.5], the gate in [0.378, 0.622]
    assert gate(wrong, 1.0, "centred_mean") == pytest.approx(1 / (1 + math.exp(0.5)))
    assert gate(right, 1.0, "centred_mean") == pytest.approx(1 / (1 + math.exp(-0.5)))


def test_gates_are_monotone_in_k() -> None:
    ks = [0.25, 0.5, 1.0, 2.0, 4.0]
    up = [gate([1, 1], k, "signed") for k in ks]  # S = 2 > 0
    down = [gate([0, 0], k, "signed") for k in ks]  # S = -2 < 0
    flat = [gate([1, 0], k, "signed") for k in ks]  # S = 0
    assert all(a < b for a, b in itertools.pairwise(up))
    assert all(a > b for a, b in itertools.pairwise(down))
    assert flat == [0.5] * len(ks)
    assert up[2] == pytest.approx(SIGMA2) and down[2] == pytest.approx(1 - SIGMA2)


def test_cout_reward_of_the_golden_samples() -> None:
    full = EspoAdvantageSettings()
    no_phi = EspoAdvantageSettings(use_phi=False)
    no_psi = EspoAdvantageSettings(use_psi=False)
    neither = EspoAdvantageSettings(use_phi=False, use_psi=False)
    expected = {
        # (phi + psi) * I, psi * I, phi * I (see the module docstring's gates)
        full: [R0, 2 * R0, 0.0],
        no_phi: [0.5 * 0.5, SIGMA2 * 1.0, 0.5 * 0.0],
        no_psi: [SIGMA2 * 0.5, 0.5 * 1.0, (1 - SIGMA2) * 0.0],
        neither: [0.0, 0.0, 0.0],
    }
    for settings, want in expected.items():
        got = [cout_reward(a[:2], a[3:], a[2], settings) for a in ACCURACY]
        assert got == pytest.approx(want, abs=1e-12)
    per_turn = episode_cout_rewards(GOLDEN, full)
    assert_rows(per_turn, [[R0] * 5, [2 * R0] * 5, [0.0] * 5], abs=1e-7)
    assert pytest.approx(0.6903985389889411, abs=1e-12) == R0


def sigma(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@pytest.mark.parametrize(
    ("accumulation", "gates_0", "gates_1"),
    [
        # sample 0: search [1, 1], recommend [1, 0]; sample 1: search [1, 0], recommend [1, 1]
        ("signed", (2, 0), (0, 2)),
        ("sum", (2, 1), (1, 2)),
        ("mean", (1, 0.5), (0.5, 1)),
        ("centred_mean", (0.5, 0), (0, 0.5)),
    ],
)
def test_cout_reward_under_each_accumulation(accumulation, gates_0, gates_1) -> None:
    settings = EspoAdvantageSettings(accumulation=accumulation)
    # R = (sigma(S_gui) + sigma(S_rec)) * I with I = 0.5, 1.0, 0.0
    want = [
        (sigma(gates_0[0]) + sigma(gates_0[1])) * 0.5,
        (sigma(gates_1[0]) + sigma(gates_1[1])) * 1.0,
        0.0,
    ]
    assert_rows(episode_cout_rewards(GOLDEN, settings), [[r] * 5 for r in want], abs=1e-7)


# -- the advantages ------------------------------------------------------------------------------


def test_golden_broadcast_advantage() -> None:
    advantages, returns = espo(GOLDEN, EspoAdvantageSettings())
    expected = [[a + A_COUT[g] for a in A_STEP[g]] for g in range(3)]
    assert_rows(advantages, expected)
    assert advantages.dtype == torch.float32
    assert torch.equal(returns, GOLDEN.rewards)
    # the estimator through the registry, as the trainer calls it
    via_registry, _ = compute_advantages(GOLDEN, EspoAdvantageSettings())
    assert torch.equal(via_registry, advantages)


def test_grpo_step_is_a_step_alone() -> None:
    advantages, returns = grpo_step(GOLDEN, EspoAdvantageSettings())
    assert_rows(advantages, A_STEP)
    assert torch.equal(returns, GOLDEN.rewards)
    via_registry, _ = compute_advantages(GOLDEN, EspoAdvantageSettings(estimator="grpo_step"))
    assert torch.equal(via_registry, advantages)


def test_settings_without_espos_fields_are_refused_not_defaulted() -> None:
    # a section without std / eps / k / w is an error, never read as ESPO's defaults
    with pytest.raises(ValueError, match=r"estimator 'grpo_step' reads EspoAdvantageSettings"):
        AdvantageSettings(estimator="grpo_step", gamma=0.9)
    plain = AdvantageSettings.model_construct(estimator="grpo_step", gamma=0.9)
    with pytest.raises(TypeError, match="grpo_step reads EspoAdvantageSettings"):
        ESTIMATORS.get("grpo_step")(GOLDEN, plain)


@pytest.mark.parametrize("combine", ["broadcast", "reward_sum"])
def test_w_0_is_grpo_step(combine) -> None:
    step_only, _ = grpo_step(GOLDEN, EspoAdvantageSettings())
    advantages, _ = espo(GOLDEN, EspoAdvantageSettings(w=0.0, combine=combine))
    assert torch.equal(advantages, step_only)


def test_a_constant_cout_reward_adds_nothing() -> None:
    same = [ACCURACY[0]] * 3  # equal accuracies, so equal R_COUT; the formats differ
    batch = espo_batch([same], [[[1, 1, 1, 1, 1], [0, 1, 1, 1, 0], [1, 0, 1, 0, 1]]])
    advantages, _ = espo(batch, EspoAdvantageSettings())
    step_only, _ = grpo_step(batch, EspoAdvantageSettings())
    assert bool(step_only.abs().sum() > 0)
    assert torch.equal(advantages, step_only)


def test_reward_sum_normalises_the_shaped_rewards() -> None:
    advantages, _ = espo(GOLDEN, EspoAdvantageSettings(combine="reward_sum"))
    rewards = as_rows(GOLDEN.rewards)
    couts = [R0, 2 * R0, 0.0]
    shaped = [[r + c for r in row] for row, c in zip(rewards, couts, strict=True)]
    columns = [norm([shaped[g][t] for g in range(3)]) for t in range(5)]
    expected = [[columns[t][g] for t in range(5)] for g in range(3)]
    assert_rows(advantages, expected)
    # step 0: r + R = [1.690399, 2.380797, 0.2], mean 1.423732, deviations [0.266667,
    # 0.957065, -1.223732], sample var (0.071111 + 0.915973 + 1.497520) / 2 = 1.242302,
    # sample std 1.114586
    assert as_rows(advantages)[0][0] == pytest.approx((1 + R0 - 1.423732) / 1.114586, abs=1e-5)
    assert [row[0] for row in expected] == pytest.approx([0.239252, 0.858673, -1.097925], abs=1e-5)


def test_population_std() -> None:
    advantages, _ = grpo_step(GOLDEN, EspoAdvantageSettings(std="population"))
    # step 0 [1, 1, 0.2]: deviations [d, d, -2d], population std sqrt(6 d^2 / 3) = sqrt(2) d
    assert [row[0] for row in as_rows(advantages)] == pytest.approx(
        [1 / math.sqrt(2), 1 / math.sqrt(2), -math.sqrt(2)], abs=1e-5
    )


def test_the_no_phi_and_no_psi_ablations() -> None:
    step_only, _ = grpo_step(GOLDEN, EspoAdvantageSettings())
    for settings, couts in (
        (EspoAdvantageSettings(use_phi=False), [0.25, SIGMA2, 0.0]),
        (EspoAdvantageSettings(use_psi=False), [0.5 * SIGMA2, 0.5, 0.0]),
    ):
        advantages, _ = espo(GOLDEN, settings)
        a_cout = norm(couts)
        assert_rows(advantages - step_only, [[a] * 5 for a in a_cout])
    neither, _ = espo(GOLDEN, EspoAdvantageSettings(use_phi=False, use_psi=False))
    assert torch.equal(neither, step_only)


def test_groups_are_normalised_separately() -> None:
    other = [[1, 0, 0.2, 1], [0, 0, 0.9, 0], [1, 1, 0.4, 1], [0, 1, 0.0, 1]]  # G = 4, 4 steps
    batch = espo_batch([other, ACCURACY], [[[1] * 4] * 4, FORMAT], group_ids=[7, 3])
    advantages, _ = espo(batch, EspoAdvantageSettings())
    alone, _ = espo(GOLDEN, EspoAdvantageSettings())
    assert torch.equal(advantages[16:], alone)
    first, _ = espo(espo_batch([other]), EspoAdvantageSettings())
    assert torch.equal(advantages[:16], first)


def test_a_group_of_one_sample_gets_zero() -> None:
    batch = espo_batch([[ACCURACY[0]], ACCURACY], [[FORMAT[0]], FORMAT])
    for fn in (espo, grpo_step):
        for std in ("sample", "population"):
            advantages, _ = fn(batch, EspoAdvantageSettings(std=std))
            assert not bool(advantages.isnan().any())
            assert advantages[:5].tolist() == [0.0] * 5
    advantages, _ = espo(batch, EspoAdvantageSettings())
    assert torch.equal(advantages[5:], espo(GOLDEN, EspoAdvantageSettings())[0])


def test_group_relative_over_the_first_dimension() -> None:
    x = torch.tensor([[1.0, 2.0], [3.0, 2.0]])
    # column 0: mean 2, sample std sqrt(2); column 1: no spread
    expected = [[-1 / math.sqrt(2), 0.0], [1 / math.sqrt(2), 0.0]]
    got = group_relative(x, "sample", 1e-6).tolist()
    assert got[0] == pytest.approx(expected[0], abs=1e-6)
    assert got[1] == pytest.approx(expected[1], abs=1e-6)
    assert group_relative(x[:1], "sample", 1e-6).tolist() == [[0.0, 0.0]]


# -- errors --------------------------------------------------------------------------------------


def test_missing_columns_are_errors() -> None:
    with pytest.raises(ValueError, match=r"espo needs batch\.stage"):
        espo(GOLDEN.with_fields(stage=None), EspoAdvantageSettings())
    with pytest.raises(ValueError, match="compares episodes in groups"):
        compute_advantages(GOLDEN.with_fields(group_id=None), EspoAdvantageSettings())
    with pytest.raises(ValueError, match="group_id must be set"):
        grpo_step(GOLDEN.with_fields(group_id=None), EspoAdvantageSettings())


def test_missing_or_bad_extras_are_errors() -> None:
    extras = [dict(e) for e in GOLDEN.extras]
    del extras[1]["accuracy"]
    with pytest.raises(ValueError, match=r"turn 1 \(search\): extras\['accuracy'\] is missing"):
        espo(GOLDEN.with_fields(extras=extras), EspoAdvantageSettings())
    extras = [dict(e) for e in GOLDEN.extras]
    extras[7] = {"accuracy": 1.0, "intent_acc": None}  # sample 1's pool turn
    with pytest.raises(ValueError, match=r"turn 7 \(pool\): extras\['intent_acc'\] is missing"):
        espo(GOLDEN.with_fields(extras=extras), EspoAdvantageSettings())
    extras = [dict(e) for e in GOLDEN.extras]
    extras[3] = {"accuracy": 1.5}
    with pytest.raises(ValueError, match=r"extras\['accuracy'\] = 1.5 is outside \[0, 1\]"):
        espo(GOLDEN.with_fields(extras=extras), EspoAdvantageSettings())


def test_bad_layouts_are_errors() -> None:
    short = espo_batch(
        [[ACCURACY[0], ACCURACY[1][:4]]],
        stages=[[STAGES, STAGES[:4]]],
    )
    with pytest.raises(ValueError, match=r"different step counts \[4, 5\]"):
        espo(short, EspoAdvantageSettings())
    with pytest.raises(ValueError, match="different step counts"):
        grpo_step(short, EspoAdvantageSettings())
    two_pools = espo_batch(
        [[[1, 0.5, 0.5], [1, 0.5, 0.5]]], stages=[[["search", "pool", "pool"]] * 2]
    )
    with pytest.raises(ValueError, match="has 2 pool turns, not one"):
        espo(two_pools, EspoAdvantageSettings())
    swapped = espo_batch([[[1, 0.5], [0.5, 1]]], stages=[[["search", "pool"], ["pool", "search"]]])
    with pytest.raises(ValueError, match="samples of step 0 disagree on the stage"):
        espo(swapped, EspoAdvantageSettings())
    unknown = GOLDEN.with_fields(
        stage=[("browse" if i % 5 == 0 else s) for i, s in enumerate(GOLDEN.stage)]
    )
    with pytest.raises(ValueError, match="unknown stage 'browse'"):
        espo(unknown, EspoAdvantageSettings())
    spanning = GOLDEN.with_fields(group_id=torch.tensor([0] * 4 + [1] * 11))
    with pytest.raises(ValueError, match="pseudo-episode 0 spans groups"):
        espo(spanning, EspoAdvantageSettings())
    repeated = GOLDEN.with_fields(sample_index=torch.tensor([0] * 5 + [0] * 5 + [2] * 5))
    with pytest.raises(ValueError, match="one sample_index of its own"):
        espo(repeated, EspoAdvantageSettings())


def test_settings_are_checked() -> None:
    defaults = EspoAdvantageSettings()
    assert (defaults.k, defaults.w, defaults.accumulation, defaults.combine) == (
        1.0,
        1.0,
        "signed",
        "broadcast",
    )
    assert (defaults.use_phi, defaults.use_psi, defaults.std, defaults.eps) == (
        True,
        True,
        "sample",
        1e-6,
    )
    with pytest.raises(ValueError, match=r"accumulation\n  Input should be 'signed'"):
        EspoAdvantageSettings(accumulation="product")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"std\n  Input should be 'population' or 'sample'"):
        EspoAdvantageSettings(std="mad")  # type: ignore[arg-type]
    for field, value in (("k", 0.0), ("w", -1.0), ("eps", 0.0)):
        with pytest.raises(ValueError, match=rf"{field}\n  Input should be greater than"):
            EspoAdvantageSettings(**{field: value})
    with pytest.raises(ValueError, match="estimator"):
        EspoAdvantageSettings(estimator="gae")  # ESPO has no value function
