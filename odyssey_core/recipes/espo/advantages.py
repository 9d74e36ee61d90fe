"""ESPO's chain-of-user-thought reward and episode-wise advantage (sections 4.2.2-4.2.3),
registered in :data:`~odyssey_core.rl.advantages.ESTIMATORS` as ``espo`` and ``grpo_step``.

Batch layout (teacher-forced sampling of one demonstrated episode). Every step prompt of a
demonstrated episode is sampled G times; ``group_id`` names the demonstrated episode and
``sample_index`` = g. Sample g of every step forms pseudo-episode g: one ``episode_ids``
value per pseudo-episode, its T turns contiguous and in time order (turn t = step t), and
every pseudo-episode of a group has the same T steps with the same stages. Per turn:

* ``rewards``: the stage reward r (:func:`~odyssey_core.recipes.espo.rewards.score_step`);
* ``stage``: ``search`` / ``pool`` / ``recommend`` (exactly one pool turn per episode);
* ``extras[i]["accuracy"]``: the step's accuracy a in [0, 1] (search and recommend turns);
* ``extras[i]["intent_acc"]``: Intent_acc in [0, 1] (the pool turn).

The chain-of-user-thought reward of pseudo-episode g, with sigma the logistic sigmoid:

    phi_g = sigma(k * S_gui),  S_gui = accumulation of the search-stage accuracies
    psi_g = sigma(k * S_rec),  S_rec = accumulation of the recommend-stage accuracies
    R_COUT_g = phi_g * Intent_acc_g + psi_g * Intent_acc_g

(``use_phi`` / ``use_psi`` = False drops that term: the paper's no-phi / no-psi ablations).
phi (intent confidence) pays for the intent only when the GUI steps that led to it were
right; psi (intent contribution) only when the decisions it led to were right.

Advantages, group-relative as in GRPO, norm(x) = (x - mean_G x) / (std_G x + eps) over the G
samples (``std``: EasyR1's GRPO divides by the sample, Bessel-corrected, std; a group with one
sample has no spread and gets 0, where EasyR1 would pass the raw score through):

    A_step[g, t] = norm over g of r[g, t]              (the same step's G samples)
    A_COUT[g]    = norm over g of R_COUT_g             (broadcast to every turn of g)
    broadcast:   A[g, t] = A_step[g, t] + w * A_COUT[g]
    reward_sum:  A[g, t] = norm over g of (r[g, t] + w * R_COUT_g)

``returns`` are the step rewards r themselves (no critic). ``grpo_step`` is A_step alone
(vanilla GRPO over the same step's samples), which is what ``espo`` gives at w = 0.

Why ``accumulation`` defaults to ``signed``. The gates must be able to *close* (go to 0) when
a stage went wrong, or R_COUT cannot tell good GUI evidence from bad. With accuracies a in
[0, 1]:

* ``sum`` (S = sum a) and ``mean`` (S = mean a) give S >= 0, so sigma(k * S) >= 0.5: a gate
  never drops below one half, whatever the steps did;
* ``centred_mean`` (S = mean(a) - 0.5) lies in [-0.5, 0.5]: at k = 1 the gate stays inside
  [0.38, 0.62], barely open or closed;
* ``signed`` (S = sum (2a - 1): +1 per right step, -1 per wrong one) lies in [-n, n]: five
  wrong search steps give sigma(-5) = 0.007, five right ones sigma(5) = 0.993.

So ``signed`` is the only reading under which a gate can close at the paper's k = 1.

A stage with no steps (an episode that starts on its item pool, say) has no evidence, and the
paper does not say what its gate is. The formula at S = 0 gives sigma(0) = 0.5 ("no evidence
either way"); reading the gate as "the stage's steps were right" gives 1.0 (nothing went
wrong: the intent term paid in full). It is one explicit setting, ``empty_stage_gate``
(default 0.5, the formula's own value), that phi and psi both take for an empty stage under
every accumulation and every k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, get_args

import torch
from pydantic import Field

from odyssey_core.config import redefault
from odyssey_core.envs.persona.episode import STAGES
from odyssey_core.rl.advantages import (
    AdvantageInputs,
    AdvantageSettings,
    check_episode_rows,
    estimator,
)

__all__ = [
    "EMPTY_STAGE_GATE",
    "EspoAdvantageSettings",
    "EspoInputs",
    "cout_reward",
    "episode_cout_rewards",
    "espo",
    "gate",
    "group_relative",
    "grpo_step",
    "stage_sum",
]

Accumulation = Literal["signed", "centred_mean", "sum", "mean"]
Combine = Literal["broadcast", "reward_sum"]
StdKind = Literal["population", "sample"]
#: the gate of a stage with no steps by default: sigma(0), the formula's value at S = 0
EMPTY_STAGE_GATE = 0.5


class EspoAdvantageSettings(AdvantageSettings):
    """ESPO's ``advantage:`` section: the estimator, the chain-of-user-thought reward's and the
    episode-wise advantage's knobs (paper: k = w = 1)."""

    estimator: Literal["espo", "grpo_step"] = Field(
        default="espo", description="espo: A_step + w * A_COUT; grpo_step: vanilla step GRPO"
    )
    gamma: float = redefault(
        AdvantageSettings,
        "gamma",
        1.0,
        "unused: ESPO does not discount (each step is scored on its own)",
    )
    k: float = Field(default=1.0, gt=0, description="the gates' temperature (paper: 1.0)")
    w: float = Field(default=1.0, ge=0, description="the COUT advantage weight (paper: 1.0)")
    accumulation: Accumulation = Field(
        default="signed",
        description="how a stage's step accuracies add up to S_gui / S_rec (see the module "
        "docstring: signed is the only reading whose gate can close at k=1)",
    )
    use_phi: bool = Field(default=True, description="false: the no-phi ablation")
    use_psi: bool = Field(default=True, description="false: the no-psi ablation")
    combine: Combine = Field(
        default="broadcast",
        description="broadcast: A_step + w * A_COUT; reward_sum: r + w * R_COUT, then "
        "group-relative per step",
    )
    std: StdKind = Field(
        default="sample", description="group-relative normalisation (EasyR1: sample std)"
    )
    eps: float = Field(default=1e-6, gt=0, description="EasyR1's GRPO epsilon")
    empty_stage_gate: float = Field(
        default=EMPTY_STAGE_GATE,
        ge=0,
        le=1,
        description="phi / psi of a stage with no steps, under every accumulation (0.5: "
        "sigma(0), no evidence either way; 1.0: nothing went wrong)",
    )


class EspoInputs(AdvantageInputs, Protocol):
    """What ``espo`` reads beyond the common columns (a TurnBatch has all of it)."""

    sample_index: torch.Tensor | None
    stage: list[str] | None
    extras: list[dict[str, Any]]


# -- the chain-of-user-thought reward ------------------------------------------------------------


def stage_sum(accuracies: Sequence[float] | torch.Tensor, accumulation: Accumulation) -> float:
    """S of one stage: signed sum(2a - 1), centred_mean mean(a) - 0.5, sum sum(a), mean
    mean(a); 0 for a stage with no steps."""
    a = torch.as_tensor(accuracies, dtype=torch.float64).reshape(-1)
    if a.numel() == 0:
        return 0.0
    if accumulation == "signed":
        return float((2 * a - 1).sum())
    if accumulation == "centred_mean":
        return float(a.mean() - 0.5)
    if accumulation == "sum":
        return float(a.sum())
    if accumulation == "mean":
        return float(a.mean())
    raise ValueError(f"unknown accumulation {accumulation!r}; one of {get_args(Accumulation)}")


def gate(
    accuracies: Sequence[float] | torch.Tensor,
    k: float,
    accumulation: Accumulation,
    empty: float = EMPTY_STAGE_GATE,
) -> float:
    """sigma(k * S) of one stage (phi for the search stage, psi for the recommend stage);
    ``empty`` for a stage with no steps."""
    if torch.as_tensor(accuracies).numel() == 0:
        return float(empty)
    s = torch.tensor(k * stage_sum(accuracies, accumulation), dtype=torch.float64)
    return float(torch.sigmoid(s))


def cout_reward(
    search_accuracies: Sequence[float] | torch.Tensor,
    recommend_accuracies: Sequence[float] | torch.Tensor,
    intent_acc: float,
    settings: EspoAdvantageSettings,
) -> float:
    """R_COUT = phi * Intent_acc + psi * Intent_acc, each term only where enabled."""
    reward = 0.0
    options = (settings.k, settings.accumulation, settings.empty_stage_gate)
    if settings.use_phi:
        reward += gate(search_accuracies, *options) * intent_acc
    if settings.use_psi:
        reward += gate(recommend_accuracies, *options) * intent_acc
    return reward


# -- group-relative normalisation ---------------------------------------------------------------


def group_relative(x: torch.Tensor, std: StdKind, eps: float) -> torch.Tensor:
    """(x - mean) / (std + eps) over dim 0, the G samples; fewer than two samples: zeros."""
    if x.shape[0] < 2:
        return torch.zeros_like(x)
    spread = x.std(dim=0, correction=1 if std == "sample" else 0, keepdim=True)
    return (x - x.mean(dim=0, keepdim=True)) / (spread + eps)


# -- the batch layout ----------------------------------------------------------------------------


def _group_layout(batch: AdvantageInputs) -> list[torch.Tensor]:
    """One long [G, T] tensor of batch rows per group: row g is pseudo-episode g's turns in
    time order. Checks that episodes are contiguous, lie inside one group and that the
    pseudo-episodes of a group have the same number of steps."""
    rewards, episode_ids, group_id = batch.rewards, batch.episode_ids, batch.group_id
    check_episode_rows(rewards, episode_ids, unit="pseudo-episode")
    if group_id is None or group_id.shape != rewards.shape:
        raise ValueError("ESPO compares the samples of a step: group_id must be set per turn")
    ids, counts = torch.unique_consecutive(episode_ids, return_counts=True)
    episodes: dict[int, list[torch.Tensor]] = {}
    start = 0
    for episode, count in zip(ids.tolist(), counts.tolist(), strict=True):
        rows = torch.arange(start, start + count)
        groups = torch.unique(group_id[rows])
        if groups.numel() != 1:
            raise ValueError(f"pseudo-episode {episode} spans groups {groups.tolist()}")
        episodes.setdefault(int(groups), []).append(rows)
        start += count
    layout = []
    for group, members in episodes.items():
        lengths = sorted({m.numel() for m in members})
        if len(lengths) != 1:
            raise ValueError(
                f"group {group}: its pseudo-episodes have different step counts {lengths}; "
                "sample g of every step must form pseudo-episode g"
            )
        layout.append(torch.stack(members))
    sample_index = getattr(batch, "sample_index", None)
    if sample_index is not None:
        for rows in layout:
            samples = sample_index[rows]  # [G, T]
            constant = bool((samples == samples[:, :1]).all())
            if not constant or torch.unique(samples[:, 0]).numel() != len(rows):
                raise ValueError(
                    f"group {int(batch.group_id[rows[0, 0]])}: each pseudo-episode needs one "
                    "sample_index of its own"
                )
    return layout


def _number(extras: dict[str, Any], key: str, row: int, stage: str) -> float:
    if extras.get(key) is None:
        raise ValueError(f"turn {row} ({stage}): extras[{key!r}] is missing")
    value = float(extras[key])
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"turn {row} ({stage}): extras[{key!r}] = {value} is outside [0, 1]")
    return value


def _episode_cout(batch: EspoInputs, rows: torch.Tensor, settings: EspoAdvantageSettings) -> float:
    """R_COUT of the pseudo-episode made of ``rows``."""
    assert batch.stage is not None
    search, recommend, intents = [], [], []
    for row in rows.tolist():
        stage, extras = batch.stage[row], batch.extras[row]
        if stage == "search":
            search.append(_number(extras, "accuracy", row, stage))
        elif stage == "recommend":
            recommend.append(_number(extras, "accuracy", row, stage))
        elif stage == "pool":
            intents.append(_number(extras, "intent_acc", row, stage))
        else:
            raise ValueError(f"turn {row}: unknown stage {stage!r}; stages: {STAGES}")
    if len(intents) != 1:
        episode = int(batch.episode_ids[rows[0]])
        raise ValueError(f"pseudo-episode {episode} has {len(intents)} pool turns, not one")
    return cout_reward(search, recommend, intents[0], settings)


def _cout_per_episode(
    batch: EspoInputs, layout: list[torch.Tensor], settings: EspoAdvantageSettings
) -> list[torch.Tensor]:
    """float64 [G] R_COUT per group; also checks the stages line up across samples."""
    if batch.stage is None:
        raise ValueError("espo needs batch.stage: search / pool / recommend per turn")
    if len(batch.extras) != batch.rewards.numel():
        raise ValueError("espo needs batch.extras per turn (accuracy, intent_acc)")
    rewards = []
    for rows in layout:
        stages = [[batch.stage[r] for r in episode] for episode in rows.tolist()]
        for t, column in enumerate(zip(*stages, strict=True)):
            if len(set(column)) != 1:
                group = int(batch.group_id[rows[0, 0]])
                raise ValueError(f"group {group}: its samples of step {t} disagree on the stage")
        rewards.append(
            torch.tensor([_episode_cout(batch, r, settings) for r in rows], dtype=torch.float64)
        )
    return rewards


def episode_cout_rewards(batch: EspoInputs, settings: EspoAdvantageSettings) -> torch.Tensor:
    """float [N]: each turn's pseudo-episode R_COUT (for metrics and evaluation)."""
    layout = _group_layout(batch)
    per_turn = torch.zeros(batch.rewards.numel(), dtype=torch.float64)
    for rows, cout in zip(layout, _cout_per_episode(batch, layout, settings), strict=True):
        per_turn[rows] = cout[:, None].expand_as(rows)
    return per_turn.float()


# -- the estimators ------------------------------------------------------------------------------


@estimator("grpo_step", grouped=True, settings=EspoAdvantageSettings)
def grpo_step(
    batch: AdvantageInputs, settings: EspoAdvantageSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """A[g, t] = (r[g, t] - mean_g r[., t]) / (std_g r[., t] + eps): vanilla GRPO over the G
    samples of the same step; returns = r."""
    rewards = batch.rewards.to(torch.float64)
    advantages = torch.zeros_like(rewards)
    for rows in _group_layout(batch):
        advantages[rows] = group_relative(rewards[rows], settings.std, settings.eps)
    return advantages.float(), batch.rewards.float().clone()


@estimator("espo", grouped=True, settings=EspoAdvantageSettings)
def espo(
    batch: AdvantageInputs, settings: EspoAdvantageSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """broadcast: A = A_step + w * A_COUT; reward_sum: A = norm_g(r + w * R_COUT_g);
    returns = r (see the module docstring for A_step, A_COUT and R_COUT)."""
    layout = _group_layout(batch)
    couts = _cout_per_episode(batch, layout, settings)  # type: ignore[arg-type]
    rewards = batch.rewards.to(torch.float64)
    advantages = torch.zeros_like(rewards)
    for rows, cout in zip(layout, couts, strict=True):
        step_rewards, episode_reward = rewards[rows], cout[:, None]  # [G, T], [G, 1]
        if settings.combine == "broadcast":
            a_step = group_relative(step_rewards, settings.std, settings.eps)
            a_cout = group_relative(episode_reward, settings.std, settings.eps)
            advantages[rows] = a_step + settings.w * a_cout
        else:
            shaped = step_rewards + settings.w * episode_reward
            advantages[rows] = group_relative(shaped, settings.std, settings.eps)
    return advantages.float(), batch.rewards.float().clone()
