"""ESPO's offline metrics with confidence intervals, and the trivial recommendation baselines.

The ESPO paper (Section 5.1.2) follows SmartAgent: GUI metrics from Mind2Web and SeeClick,
plus recommendation accuracy. An *operation string* is an action's type plus its text:
``"type new york"``, ``"click"``, ``"scroll down"``, ``"recommendation yes"``,
``"pool_found <summary>"``. Token F1 (:func:`token_f1`, SQuAD's) lower-cases, deletes ASCII
punctuation, drops the articles a / an / the, splits on whitespace and counts the overlap as
a multiset: ``F1 = 2 P R / (P + R)``; two empty strings score 1, one empty string 0.

* **EleAcc** (element accuracy; SeeClick's click accuracy, Mind2Web's Ele. Acc): over the
  steps whose gold action is spatial (click, type), the share whose predicted point lies in
  the gold target element's box (borders included), whatever type the prediction has.
* **Op F1** (Mind2Web's operation F1): token F1 between the predicted and the gold operation
  string, averaged over all steps.
* **Step SR** (Mind2Web's step success rate): a step succeeds when the action type matches
  and, for click / type, the point lies in the target box; type and pool_found also need the
  text's token F1 with the gold text ``>= threshold`` (0.5 by default), a recommendation the
  same Yes / No. Averaged over all steps, and per stage (``step_sr_search`` ...).
* **RecAcc** (SmartAgent): the share of recommend steps answered with the gold Yes / No.
* intent F1: token F1 of the pool step's summary against the episode's true intent
  (``EpisodeRecord.intent``), averaged over pool steps.
* format valid: the share of responses :func:`parse_gui_answer` accepts whole.
* Yes precision = #(said Yes, gold Yes) / #(said Yes); Yes recall = #(said Yes, gold Yes) /
  #(gold Yes), over recommend steps.
* online success: the share of online episodes that reached their goal (given by the caller).

Scoring conventions: a step is scored by whatever action the parser read, even when the rest
of the format is wrong (two think blocks, a point on a non-spatial action); only a response
with no readable action scores 0 everywhere. Steps are scored against the demonstrated gold
action, as Mind2Web does, not against the set of optimal actions.

Intervals (95% by default), :class:`MetricValue` records:

* Wilson score interval over the steps, for the proportions (not Op F1 or intent F1):
  ``(p + z^2/2n) / (1 + z^2/n) +- z / (1 + z^2/n) * sqrt(p (1-p) / n + z^2 / 4n^2)``.
* episode-cluster percentile bootstrap, for every metric: draw the episodes with replacement
  ``resamples`` times (seeded), recompute each metric as the sum of its step scores over its
  step count in the drawn episodes, take the ``(1 -+ confidence) / 2`` quantiles; draws in
  which a metric has no steps are left out. Steps of one episode share a user, a screen path
  and carried-over mistakes, so they are not independent: Wilson treats them as independent
  and is too narrow when they cluster. With ~10 test episodes this interval is the honest
  one, and the one the Markdown table shows.

Trivial baselines (from the episodes' labels alone, no model): ``always_no``, ``always_yes``,
``first_item`` (Yes to each episode's first candidate only), ``random`` (Yes with probability
0.5: one ``numpy.random.default_rng(seed).random()`` draw per recommend step, in episode
order) and ``random_expected``, the coin's expectation: RecAcc 0.5, Yes recall 0.5, Yes
precision the share of gold Yes (a ratio of expectations).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from odyssey_core.common.tables import markdown_table
from odyssey_core.envs.persona.episode import STAGES, EpisodeRecord, StepRecord
from odyssey_core.envs.persona.screen import box_contains
from odyssey_core.eval.stats import wilson_interval
from odyssey_core.protocol.gui import GuiAction, parse_gui_answer, rescale_point
from odyssey_core.recipes.espo.rewards import token_f1

__all__ = [
    "BASELINE_METRICS",
    "CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "DEFAULT_THRESHOLD",
    "LABELS",
    "MEAN_METRICS",
    "EspoMetrics",
    "MetricValue",
    "StepOutcome",
    "cluster_bootstrap",
    "element_hit",
    "evaluate_outcomes",
    "metrics_table_markdown",
    "operation_string",
    "outcome_from_response",
    "step_scores",
    "step_success",
    "trivial_baselines",
    "wilson_interval",
]

DEFAULT_THRESHOLD = 0.5  # token F1 a typed text or an intent summary needs for step success
CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000

#: every metric's key (``as_dict`` prefixes it with ``espo/``) and its display name, in order
LABELS: dict[str, str] = {
    "ele_acc": "EleAcc",
    "op_f1": "Op F1",
    "step_sr": "Step SR",
    "rec_acc": "RecAcc",
    "intent_f1": "Intent F1",
    "format_valid": "Format valid",
    "yes_precision": "Yes precision",
    "yes_recall": "Yes recall",
    **{f"step_sr_{stage}": f"Step SR ({stage})" for stage in STAGES},
    "online_success": "Online success",
}
MEAN_METRICS: frozenset[str] = frozenset({"op_f1", "intent_f1"})  # not proportions: no Wilson
BASELINE_METRICS: tuple[str, ...] = ("rec_acc", "yes_precision", "yes_recall")


# ---- scoring one step ----


def operation_string(action: GuiAction) -> str:
    """The action type plus its text, e.g. ``"type new york"``, ``"click"``."""
    return f"{action.action} {action.text}".strip()


def element_hit(step: StepRecord, predicted: GuiAction | None) -> bool:
    """Whether the predicted point lies in the step's target box (any predicted type)."""
    box = step.target_box
    return predicted is not None and box is not None and box_contains(box, predicted.point)


def step_success(
    step: StepRecord, predicted: GuiAction | None, threshold: float = DEFAULT_THRESHOLD
) -> bool:
    """Mind2Web's step success, with the text rules of the module docstring."""
    if predicted is None or predicted.action != step.gold.action:
        return False
    if predicted.spatial and not element_hit(step, predicted):
        return False
    if predicted.action in ("type", "pool_found"):
        return token_f1(predicted.text, step.gold.text) >= threshold
    if predicted.action == "recommendation":
        return predicted.text == step.gold.text
    return True


@dataclass(frozen=True)
class StepOutcome:
    """What the model answered on one step. ``predicted`` is None when no action could be read;
    ``intent_summary`` is the user intent the answer stated on a pool step (None: take the
    pool_found text, "" if the answer was another action)."""

    episode_id: str
    step: StepRecord
    predicted: GuiAction | None
    format_valid: bool
    intent_summary: str | None = None

    @property
    def summary(self) -> str:
        """The stated intent this step is scored on ("" when it states none)."""
        if self.intent_summary is not None:
            return self.intent_summary
        if self.predicted is not None and self.predicted.action == "pool_found":
            return self.predicted.text
        return ""


def outcome_from_response(
    step: StepRecord,
    episode: EpisodeRecord,
    text: str,
    *,
    image_size: tuple[int, int] | None = None,
) -> StepOutcome:
    """Parse a raw response on ``step`` of ``episode``. ``image_size`` is the (width, height)
    the model saw when it is not the stored screenshot's: its point is rescaled once, here."""
    if step not in episode.steps:
        raise ValueError(f"step {step.index} is not a step of episode {episode.episode_id}")
    parsed = parse_gui_answer(text)
    predicted = parsed.action
    if predicted is not None and image_size is not None:
        point = rescale_point(predicted.point, image_size, (episode.width, episode.height))
        predicted = GuiAction(predicted.action, point, predicted.input_text)
    summary = None
    if step.stage == "pool":
        summary = predicted.text if predicted and predicted.action == "pool_found" else ""
    return StepOutcome(episode.episode_id, step, predicted, parsed.valid, summary)


def step_scores(
    outcome: StepOutcome, intent: str, threshold: float = DEFAULT_THRESHOLD
) -> dict[str, float]:
    """The step's score on every metric it counts in (a step counts in EleAcc only when its
    gold action is spatial, in RecAcc only on a recommend step ...)."""
    step, predicted = outcome.step, outcome.predicted
    success = float(step_success(step, predicted, threshold))
    operation = operation_string(predicted) if predicted is not None else None
    scores = {
        "op_f1": 0.0 if operation is None else token_f1(operation, operation_string(step.gold)),
        "step_sr": success,
        f"step_sr_{step.stage}": success,
        "format_valid": float(outcome.format_valid),
    }
    if step.gold.spatial:
        scores["ele_acc"] = float(element_hit(step, predicted))
    if step.stage == "pool":
        scores["intent_f1"] = token_f1(outcome.summary, intent)
    if step.stage == "recommend":
        said = predicted.text if predicted and predicted.action == "recommendation" else None
        gold_yes = step.gold.text == "Yes"
        scores["rec_acc"] = float(said == step.gold.text)
        if said == "Yes":
            scores["yes_precision"] = float(gold_yes)
        if gold_yes:
            scores["yes_recall"] = float(said == "Yes")
    return scores


# ---- intervals ----


@dataclass(frozen=True)
class MetricValue:
    """A metric's value and interval. ``n`` counts the steps it is over (episodes for online
    success); ``method`` is ``"wilson"``, ``"bootstrap"`` or ``"expectation"``."""

    value: float
    low: float
    high: float
    n: int
    method: str


def cluster_bootstrap(
    sums: Sequence[float],
    counts: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile interval of ``sum(sums[e]) / sum(counts[e])`` over episodes ``e`` drawn with
    replacement; ``sums[e]`` / ``counts[e]`` are episode e's score total and step count. The
    same seed and episode count give the same draws, so every metric sees the same
    resampled test sets. (nan, nan) when no episode has a step."""
    totals, sizes = np.asarray(sums, dtype=float), np.asarray(counts, dtype=float)
    if sizes.sum() == 0:
        return math.nan, math.nan
    draws = np.random.default_rng(seed).integers(0, len(sizes), size=(resamples, len(sizes)))
    numerators, denominators = totals[draws].sum(axis=1), sizes[draws].sum(axis=1)
    kept = denominators > 0
    ratios = numerators[kept] / denominators[kept]
    low, high = np.quantile(ratios, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


# ---- the whole evaluation ----


@dataclass(frozen=True)
class EspoMetrics:
    """The metrics of one model / variant. ``metrics`` holds every metric with its
    episode-cluster bootstrap interval (the coin baseline: its expectation); ``wilson`` the
    proportions with their Wilson interval over steps."""

    metrics: Mapping[str, MetricValue]
    wilson: Mapping[str, MetricValue]
    n_steps: int
    n_episodes: int
    confidence: float = CONFIDENCE

    def __getitem__(self, name: str) -> MetricValue:
        return self.metrics[name]

    def __contains__(self, name: object) -> bool:
        return name in self.metrics

    def select(self, names: Iterable[str]) -> EspoMetrics:
        """Only the named metrics (the baselines keep the recommendation ones)."""
        keep = set(names)
        return EspoMetrics(
            metrics={k: v for k, v in self.metrics.items() if k in keep},
            wilson={k: v for k, v in self.wilson.items() if k in keep},
            n_steps=self.n_steps,
            n_episodes=self.n_episodes,
            confidence=self.confidence,
        )

    def as_dict(self, prefix: str = "espo/") -> dict[str, float]:
        """Flat floats for a logger: ``espo/ele_acc``, ``espo/ele_acc_low`` / ``_high`` (the
        bootstrap), ``espo/ele_acc_wilson_low`` / ``_high``, ``espo/ele_acc_n``, and
        ``espo/n_steps`` / ``espo/n_episodes``. Undefined metrics are NaN."""
        flat: dict[str, float] = {}
        for name, m in self.metrics.items():
            flat[f"{prefix}{name}"] = float(m.value)
            flat[f"{prefix}{name}_low"] = float(m.low)
            flat[f"{prefix}{name}_high"] = float(m.high)
            flat[f"{prefix}{name}_n"] = float(m.n)
        for name, m in self.wilson.items():
            flat[f"{prefix}{name}_wilson_low"] = float(m.low)
            flat[f"{prefix}{name}_wilson_high"] = float(m.high)
        flat[f"{prefix}n_steps"] = float(self.n_steps)
        flat[f"{prefix}n_episodes"] = float(self.n_episodes)
        return flat

    def table_rows(self) -> list[dict[str, Any]]:
        """One row per metric and interval method, in :data:`LABELS` order."""
        rows = []
        for name, label in LABELS.items():
            for table in (self.metrics, self.wilson):
                if name in table:
                    m = table[name]
                    rows.append(
                        {
                            "metric": name,
                            "label": label,
                            "value": m.value,
                            "low": m.low,
                            "high": m.high,
                            "n": m.n,
                            "method": m.method,
                        }
                    )
        return rows


Episodes = Mapping[str, EpisodeRecord] | Iterable[EpisodeRecord]


def _by_id(episodes: Episodes) -> dict[str, EpisodeRecord]:
    if isinstance(episodes, Mapping):
        return dict(episodes)
    out: dict[str, EpisodeRecord] = {}
    for episode in episodes:
        if episode.episode_id in out:
            raise ValueError(f"episode {episode.episode_id} is listed twice")
        out[episode.episode_id] = episode
    return out


def _measure(
    name: str,
    sums: np.ndarray,
    counts: np.ndarray,
    *,
    resamples: int,
    seed: int,
    confidence: float,
) -> tuple[MetricValue, MetricValue | None]:
    """A metric's bootstrap record and, for a proportion, its Wilson record."""
    n = int(counts.sum())
    total = float(sums.sum())
    value = total / n if n else math.nan
    low, high = cluster_bootstrap(
        sums, counts, resamples=resamples, seed=seed, confidence=confidence
    )
    boot = MetricValue(value, low, high, n, "bootstrap")
    if name in MEAN_METRICS:
        return boot, None
    w_low, w_high = wilson_interval(round(total), n, confidence)
    return boot, MetricValue(value, w_low, w_high, n, "wilson")


def evaluate_outcomes(
    outcomes: Iterable[StepOutcome],
    *,
    episodes: Episodes,
    online_success: Sequence[bool] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> EspoMetrics:
    """Every metric of the module docstring over ``outcomes``; ``episodes`` supplies each
    outcome's episode (its true intent). The bootstrap's clusters are the episodes that have
    outcomes; ``online_success`` (one bool per online episode) adds ``online_success``."""
    by_id = _by_id(episodes)
    clusters: dict[str, int] = {}
    scored: dict[str, tuple[list[int], list[float]]] = {}
    n_steps = 0
    for outcome in outcomes:
        if outcome.episode_id not in by_id:
            raise KeyError(f"outcome of unknown episode {outcome.episode_id!r}")
        cluster = clusters.setdefault(outcome.episode_id, len(clusters))
        n_steps += 1
        intent = by_id[outcome.episode_id].intent
        for name, score in step_scores(outcome, intent, threshold).items():
            where, values = scored.setdefault(name, ([], []))
            where.append(cluster)
            values.append(score)

    settings = {"resamples": resamples, "seed": seed, "confidence": confidence}
    metrics: dict[str, MetricValue] = {}
    wilson: dict[str, MetricValue] = {}
    for name in LABELS:
        if name == "online_success":
            if online_success is None:
                continue
            sums = np.asarray(online_success, dtype=float)
            counts = np.ones_like(sums)  # every online episode is its own cluster
        else:
            where, values = scored.get(name, ([], []))
            sums = np.bincount(where, weights=values, minlength=len(clusters)).astype(float)
            counts = np.bincount(where, minlength=len(clusters)).astype(float)
        metrics[name], proportion = _measure(name, sums, counts, **settings)
        if proportion is not None:
            wilson[name] = proportion
    return EspoMetrics(metrics, wilson, n_steps, len(clusters), confidence)


# ---- trivial baselines ----


def _recommend(yes: bool) -> GuiAction:
    return GuiAction("recommendation", input_text="Yes" if yes else "No")


def trivial_baselines(
    episodes: Episodes,
    seed: int = 0,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> dict[str, EspoMetrics]:
    """RecAcc and Yes precision / recall of the label-only baselines of the module docstring,
    with the same intervals as a model (``random_expected``: point values only)."""
    by_id = _by_id(episodes)
    asked = [
        (episode.episode_id, position, step)
        for episode in by_id.values()
        for position, step in enumerate(episode.stage_steps("recommend"))
    ]
    coin = np.random.default_rng(seed).random(len(asked)) < 0.5
    decisions = {
        "always_no": [False] * len(asked),
        "always_yes": [True] * len(asked),
        "first_item": [position == 0 for _, position, _ in asked],
        "random": [bool(c) for c in coin],
    }
    baselines = {}
    for name, says_yes in decisions.items():
        outcomes = [
            StepOutcome(episode_id, step, _recommend(yes), format_valid=True)
            for (episode_id, _, step), yes in zip(asked, says_yes, strict=True)
        ]
        measured = evaluate_outcomes(
            outcomes, episodes=by_id, seed=seed, resamples=resamples, confidence=confidence
        )
        baselines[name] = measured.select(BASELINE_METRICS)

    n, n_yes = len(asked), sum(step.gold.text == "Yes" for _, _, step in asked)
    expected = {
        "rec_acc": (0.5 if n else math.nan, n),
        "yes_precision": (n_yes / n if n else math.nan, n),
        "yes_recall": (0.5 if n_yes else math.nan, n_yes),
    }
    baselines["random_expected"] = EspoMetrics(
        metrics={k: MetricValue(v, v, v, c, "expectation") for k, (v, c) in expected.items()},
        wilson={},
        n_steps=n,
        n_episodes=len({episode_id for episode_id, _, _ in asked}),
        confidence=confidence,
    )
    return baselines


# ---- the report table ----


def _percent(m: MetricValue | None, *, interval: bool = True) -> str:
    if m is None or math.isnan(m.value):
        return "–"
    text = f"{100 * m.value:.1f}"
    if interval and m.method != "expectation" and not math.isnan(m.low):
        text += f" [{100 * m.low:.1f}, {100 * m.high:.1f}]"
    return text


def metrics_table_markdown(
    results: Mapping[str, EspoMetrics], baselines: Mapping[str, EspoMetrics] | None = None
) -> str:
    """A Markdown table: one row per model / variant, then one per trivial baseline. Cells are
    percentages, "value [low, high]" with the episode-cluster bootstrap interval; "–": the
    metric is undefined or not measured (the baselines only recommend)."""
    rows = [(name, m) for name, m in results.items()]
    rows += [(f"{name} (trivial)", m) for name, m in (baselines or {}).items()]
    online = any("online_success" in m for _, m in rows)
    header = ["Model", "EleAcc", "Op F1", "Step SR", "RecAcc", "Yes P / R", "Intent F1"]
    header += ["Format valid", *(["Online success"] if online else []), "Steps / episodes"]
    table: list[list[str]] = []
    for name, m in rows:
        values = m.metrics
        cells = [name.replace("|", "\\|")]
        cells += [_percent(values.get(k)) for k in ("ele_acc", "op_f1", "step_sr", "rec_acc")]
        yes = (_percent(values.get(k), interval=False) for k in ("yes_precision", "yes_recall"))
        cells.append(" / ".join(yes))
        cells += [_percent(values.get(k), interval=False) for k in ("intent_f1", "format_valid")]
        if online:
            cells.append(_percent(values.get("online_success")))
        cells.append(f"{m.n_steps} / {m.n_episodes}")
        table.append(cells)
    confidence = next((m.confidence for _, m in rows), CONFIDENCE)
    return (
        markdown_table(header, table)
        + f"\n\nPercent; brackets: {100 * confidence:g}% percentile bootstrap over episodes. "
        "Yes P / R: precision / recall of Yes on recommend steps."
    )
