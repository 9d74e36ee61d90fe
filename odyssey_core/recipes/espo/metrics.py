"""ESPO's offline metrics with confidence intervals, and the trivial baselines.

The ESPO paper (Section 5.1.2) follows SmartAgent: "EleAcc, Op F1 and Step SR measure GUI
actions" (Mind2Web's and SeeClick's metrics), RecAcc the recommendation decisions. So EleAcc,
Op F1 and Step SR are read over the *GUI steps* (the ``search`` stage: click, type, scroll,
exit); the intent-summary (``pool``) and Yes / No (``recommend``) steps count in RecAcc,
intent F1 and the named all-steps extras only.

An *operation string* is an action's type plus its text: ``"type new york"``, ``"click"``,
``"scroll down"``, ``"recommendation yes"``, ``"pool_found <summary>"``. Token F1
(:func:`~odyssey_core.recipes.espo.rewards.token_f1`, SQuAD's) lower-cases, deletes ASCII
punctuation, drops the articles a / an / the, splits on whitespace and counts the overlap as
a multiset: ``F1 = 2 P R / (P + R)``; two empty strings score 1, one empty string 0. Two texts
*match* when those normalised word lists are equal.

The headline metrics:

* **EleAcc** (SeeClick's click accuracy, Mind2Web's Ele. Acc): over the GUI steps whose gold
  action is spatial (click, type), the share whose predicted point lies in the gold target
  element's box (borders included), whatever type the prediction has.
* **Op F1** (Mind2Web's operation F1): token F1 between the predicted and the gold operation
  string, averaged over the GUI steps (micro: every step weighs the same).
* **Step SR** (Mind2Web's / SeeClick's step success rate, which needs the element and the
  exact operation): a GUI step succeeds when the action type matches (a scroll's direction is
  part of its type), for click / type the point lies in the target box, and for type the text
  matches the gold text exactly after normalisation. Averaged over the GUI steps.
* **RecAcc** (SmartAgent): the share of recommend steps answered with the gold Yes / No.

Named extras (the other readings, for comparison with other reports):

* ``op_f1_click`` / ``op_f1_type`` / ``op_f1_scroll`` / ``op_f1_exit``: Op F1 over the GUI
  steps whose gold action is of that family (the four scroll directions are one family), as
  SeeClick reports it per action type; ``op_f1_macro``: their mean over the families present
  (SeeClick's headline "Operation F1").
* ``op_f1_all_steps``: Op F1 over every step, the pool and recommend steps included.
* ``step_sr_text_f1``: Step SR over the GUI steps with typed text accepted at token F1
  ``>= threshold`` (0.5 by default) instead of an exact match.
* ``step_sr_all_steps``: Step SR over every step: GUI steps as Step SR; a pool step succeeds
  with ``pool_found`` and a summary at token F1 ``>= threshold`` with the step's gold summary
  (a free-text summary has no exact reading); a recommend step with the gold Yes / No.
  ``step_sr_search`` / ``step_sr_pool`` / ``step_sr_recommend`` split it by stage.
* intent F1: token F1 of the pool step's summary against the episode's true intent
  (``EpisodeRecord.intent``), averaged over pool steps.
* format valid: the share of responses :func:`parse_gui_answer` accepts whole, over every step.
* Yes precision = #(said Yes, gold Yes) / #(said Yes); Yes recall = #(said Yes, gold Yes) /
  #(gold Yes), over recommend steps.
* online success: the share of online episodes that reached their goal (given by the caller).

Scoring conventions: a step is scored by whatever action the parser read, even when the rest
of the format is wrong (two think blocks, a point on a non-spatial action); only a response
with no readable action scores 0 everywhere. Steps are scored against the demonstrated gold
action, as Mind2Web does, not against the set of optimal actions.

Intervals (95% by default), :class:`MetricValue` records:

* Wilson score interval over the steps, for the proportions (not the Op F1s or intent F1):
  ``(p + z^2/2n) / (1 + z^2/n) +- z / (1 + z^2/n) * sqrt(p (1-p) / n + z^2 / 4n^2)``.
* episode-cluster percentile bootstrap, for every metric: draw the episodes with replacement
  ``resamples`` times (seeded), recompute each metric as the sum of its step scores over its
  step count in the drawn episodes (``op_f1_macro``: the mean of the families' ratios that
  have steps in the draw), take the ``(1 -+ confidence) / 2`` quantiles; draws in which a
  metric has no steps are left out. Steps of one episode share a user, a screen path and
  carried-over mistakes, so they are not independent: Wilson treats them as independent and
  is too narrow when they cluster. With ~10 test episodes this interval is the honest one,
  and the one the Markdown table shows.

Trivial baselines (:data:`BASELINE_AGENTS`, no model; they answer every step, so every metric
has a baseline value):

* ``always_no`` / ``always_yes``: ``recommendation No`` / ``Yes`` on every step;
* ``first_item``: ``recommendation Yes`` on each episode's first recommend step, ``No`` on
  every other step;
* ``random``: knows the stage and the answer format, nothing else. On a recommend step Yes
  with probability 0.5 (one ``numpy.random.default_rng(seed).random()`` draw per recommend
  step, in episode order); on a GUI step a uniform action type of the search stage with, for
  click / type, a uniform pixel of the screen and no text (draws from
  ``numpy.random.default_rng([seed, 1])``, in step order); on a pool step ``pool_found`` with
  no summary;
* ``oracle``: the demonstrated (gold) action on every step, its summary included: the
  ceiling of every metric on this data (1 on everything but intent F1, whose ceiling is the
  gold summary's F1 against the true intent);
* ``random_expected``: the coin's expectation on the recommendation metrics only: RecAcc 0.5,
  Yes recall 0.5, Yes precision the share of gold Yes (a ratio of expectations).
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
from odyssey_core.protocol.gui import (
    ACTION_TYPES,
    STAGE_ACTIONS,
    GuiAction,
    parse_gui_answer,
    rescale_point,
)
from odyssey_core.recipes.espo.rewards import normalize_tokens, token_f1

__all__ = [
    "BASELINE_AGENTS",
    "CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "DEFAULT_THRESHOLD",
    "EXPECTATION_METRICS",
    "GUI_STAGE",
    "HEADLINE_METRICS",
    "LABELS",
    "MEAN_METRICS",
    "OPERATION_FAMILIES",
    "EspoMetrics",
    "MetricValue",
    "StepOutcome",
    "baseline_outcomes",
    "cluster_bootstrap",
    "cluster_bootstrap_macro",
    "element_hit",
    "evaluate_outcomes",
    "metrics_table_markdown",
    "operation_family",
    "operation_string",
    "outcome_from_response",
    "step_scores",
    "step_success",
    "texts_match",
    "trivial_baselines",
    "wilson_interval",
]

DEFAULT_THRESHOLD = 0.5  # token F1 an intent summary (and the text_f1 reading's text) needs
CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
GUI_STAGE = "search"  # the stage whose steps are GUI actions
#: the GUI operation families Op F1 is also reported per (SeeClick's per-action-type Op F1)
OPERATION_FAMILIES: tuple[str, ...] = ("click", "type", "scroll", "exit")

#: the four metrics of the paper's tables
HEADLINE_METRICS: tuple[str, ...] = ("ele_acc", "op_f1", "step_sr", "rec_acc")
#: every metric's key (``as_dict`` prefixes it with ``espo/``) and its display name, in order
LABELS: dict[str, str] = {
    "ele_acc": "EleAcc",
    "op_f1": "Op F1",
    "step_sr": "Step SR",
    "rec_acc": "RecAcc",
    "op_f1_macro": "Op F1 (mean over action types)",
    **{f"op_f1_{family}": f"Op F1 ({family})" for family in OPERATION_FAMILIES},
    "op_f1_all_steps": "Op F1 (all steps)",
    "step_sr_text_f1": "Step SR (text F1)",
    "step_sr_all_steps": "Step SR (all steps)",
    **{f"step_sr_{stage}": f"Step SR ({stage})" for stage in STAGES},
    "intent_f1": "Intent F1",
    "format_valid": "Format valid",
    "yes_precision": "Yes precision",
    "yes_recall": "Yes recall",
    "online_success": "Online success",
}
#: not proportions: no Wilson interval
MEAN_METRICS: frozenset[str] = frozenset(
    {"intent_f1", *(k for k in LABELS if k.startswith("op_f1"))}
)
#: the metrics ``random_expected`` gives (the coin's expectation)
EXPECTATION_METRICS: tuple[str, ...] = ("rec_acc", "yes_precision", "yes_recall")
#: the label-only agents of :func:`trivial_baselines` and ``odyssey espo eval --agent``
BASELINE_AGENTS: tuple[str, ...] = ("always_no", "always_yes", "first_item", "random", "oracle")


# ---- scoring one step ----


def operation_string(action: GuiAction) -> str:
    """The action type plus its text, e.g. ``"type new york"``, ``"click"``."""
    return f"{action.action} {action.text}".strip()


def operation_family(action: str) -> str:
    """An action type's family: its first word (the scroll directions are one family)."""
    return action.split()[0]


def texts_match(predicted: str, gold: str) -> bool:
    """Equal after token F1's normalisation (case, ASCII punctuation, articles, spacing)."""
    return normalize_tokens(predicted) == normalize_tokens(gold)


def element_hit(step: StepRecord, predicted: GuiAction | None) -> bool:
    """Whether the predicted point lies in the step's target box (any predicted type)."""
    box = step.target_box
    return predicted is not None and box is not None and box_contains(box, predicted.point)


def step_success(
    step: StepRecord,
    predicted: GuiAction | None,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    typed_text: str = "exact",
) -> bool:
    """Mind2Web's step success: the action type, for click / type the element, then the text:
    typed text must match (``typed_text="exact"``) or reach token F1 ``>= threshold``
    (``"f1"``); a pool summary needs token F1 ``>= threshold``, a recommendation the gold
    Yes / No."""
    if typed_text not in ("exact", "f1"):
        raise ValueError(f"typed_text must be 'exact' or 'f1', got {typed_text!r}")
    if predicted is None or predicted.action != step.gold.action:
        return False
    if predicted.spatial and not element_hit(step, predicted):
        return False
    if predicted.action == "type":
        if typed_text == "exact":
            return texts_match(predicted.text, step.gold.text)
        return token_f1(predicted.text, step.gold.text) >= threshold
    if predicted.action == "pool_found":
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
    """The step's score on every metric it counts in: the GUI metrics on GUI steps only
    (EleAcc only where the gold action is spatial), RecAcc on recommend steps, the all-steps
    readings and format validity everywhere (see the module docstring)."""
    step, predicted = outcome.step, outcome.predicted
    operation = 0.0
    if predicted is not None:
        operation = token_f1(operation_string(predicted), operation_string(step.gold))
    success = float(step_success(step, predicted, threshold))
    scores = {
        "op_f1_all_steps": operation,
        "step_sr_all_steps": success,
        f"step_sr_{step.stage}": success,
        "format_valid": float(outcome.format_valid),
    }
    if step.stage == GUI_STAGE:
        scores["op_f1"] = operation
        scores[f"op_f1_{operation_family(step.gold.action)}"] = operation
        scores["step_sr"] = success
        scores["step_sr_text_f1"] = float(step_success(step, predicted, threshold, typed_text="f1"))
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


def _episode_draws(episodes: int, resamples: int, seed: int) -> np.ndarray:
    """[resamples, episodes] episode indices drawn with replacement: the same seed and episode
    count give the same draws, so every metric sees the same resampled test sets."""
    return np.random.default_rng(seed).integers(0, episodes, size=(resamples, episodes))


def _quantiles(ratios: np.ndarray, confidence: float) -> tuple[float, float]:
    low, high = np.quantile(ratios, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def cluster_bootstrap(
    sums: Sequence[float],
    counts: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile interval of ``sum(sums[e]) / sum(counts[e])`` over episodes ``e`` drawn with
    replacement; ``sums[e]`` / ``counts[e]`` are episode e's score total and step count.
    (nan, nan) when no episode has a step."""
    totals, sizes = np.asarray(sums, dtype=float), np.asarray(counts, dtype=float)
    if sizes.sum() == 0:
        return math.nan, math.nan
    draws = _episode_draws(len(sizes), resamples, seed)
    numerators, denominators = totals[draws].sum(axis=1), sizes[draws].sum(axis=1)
    kept = denominators > 0
    return _quantiles(numerators[kept] / denominators[kept], confidence)


def cluster_bootstrap_macro(
    parts: Sequence[tuple[Sequence[float], Sequence[float]]],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """The percentile interval of a macro mean: ``parts`` are (per-episode sums, per-episode
    counts) of each part (an action family); each draw averages the ratios of the parts that
    have steps in it, the draws of :func:`cluster_bootstrap` with the same seed. (nan, nan)
    when no part has a step."""
    if not parts:
        return math.nan, math.nan
    totals = np.stack([np.asarray(s, dtype=float) for s, _ in parts])  # [parts, episodes]
    sizes = np.stack([np.asarray(c, dtype=float) for _, c in parts])
    if sizes.sum() == 0:
        return math.nan, math.nan
    draws = _episode_draws(sizes.shape[1], resamples, seed)
    numerators = totals[:, draws].sum(axis=2)  # [parts, resamples]
    denominators = sizes[:, draws].sum(axis=2)
    present = denominators > 0
    ratios = np.where(present, numerators / np.where(present, denominators, 1.0), 0.0)
    kept = present.any(axis=0)
    macro = ratios[:, kept].sum(axis=0) / present[:, kept].sum(axis=0)
    return _quantiles(macro, confidence)


# ---- the whole evaluation ----


@dataclass(frozen=True)
class EspoMetrics:
    """The metrics of one model, variant or baseline. ``metrics`` holds every metric with its
    episode-cluster bootstrap interval (``random_expected``: its expectation); ``wilson`` the
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
        """Only the named metrics."""
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

    def summary(self) -> dict[str, Any]:
        """JSON-ready: ``metrics`` (name -> value), ``intervals`` (name -> low, high, n,
        method of the bootstrap), ``n_steps``, ``n_episodes``, ``confidence``; an undefined
        number is None (JSON has no NaN)."""

        def number(x: float) -> float | None:
            return None if math.isnan(x) else float(x)

        return {
            "metrics": {k: number(m.value) for k, m in self.metrics.items()},
            "intervals": {
                k: {"low": number(m.low), "high": number(m.high), "n": m.n, "method": m.method}
                for k, m in self.metrics.items()
            },
            "n_steps": self.n_steps,
            "n_episodes": self.n_episodes,
            "confidence": self.confidence,
        }

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


def _measure_macro(
    parts: list[tuple[np.ndarray, np.ndarray]], *, resamples: int, seed: int, confidence: float
) -> MetricValue:
    """``op_f1_macro``: the mean of the families' Op F1 over the families that have steps."""
    present = [(float(s.sum()), float(c.sum())) for s, c in parts if c.sum() > 0]
    value = float(np.mean([s / c for s, c in present])) if present else math.nan
    low, high = cluster_bootstrap_macro(
        parts, resamples=resamples, seed=seed, confidence=confidence
    )
    return MetricValue(value, low, high, int(sum(c for _, c in present)), "bootstrap")


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

    def per_episode(name: str) -> tuple[np.ndarray, np.ndarray]:
        where, values = scored.get(name, ([], []))
        sums = np.bincount(where, weights=values, minlength=len(clusters)).astype(float)
        return sums, np.bincount(where, minlength=len(clusters)).astype(float)

    settings = {"resamples": resamples, "seed": seed, "confidence": confidence}
    metrics: dict[str, MetricValue] = {}
    wilson: dict[str, MetricValue] = {}
    for name in LABELS:
        if name == "op_f1_macro":
            parts = [per_episode(f"op_f1_{family}") for family in OPERATION_FAMILIES]
            metrics[name] = _measure_macro(parts, **settings)
            continue
        if name == "online_success":
            if online_success is None:
                continue
            sums = np.asarray(online_success, dtype=float)
            counts = np.ones_like(sums)  # every online episode is its own cluster
        else:
            sums, counts = per_episode(name)
        metrics[name], proportion = _measure(name, sums, counts, **settings)
        if proportion is not None:
            wilson[name] = proportion
    return EspoMetrics(metrics, wilson, n_steps, len(clusters), confidence)


# ---- trivial baselines ----


def _recommend(yes: bool) -> GuiAction:
    return GuiAction("recommendation", input_text="Yes" if yes else "No")


#: the search stage's action types, in ACTION_TYPES order (the random agent's choices)
_GUI_ACTIONS: tuple[str, ...] = tuple(a for a in ACTION_TYPES if a in STAGE_ACTIONS[GUI_STAGE])


def baseline_outcomes(episodes: Episodes, agent: str, seed: int = 0) -> list[StepOutcome]:
    """The answer of the label-only ``agent`` (one of :data:`BASELINE_AGENTS`, defined in the
    module docstring) to every step of ``episodes``, in episode and step order."""
    if agent not in BASELINE_AGENTS:
        raise ValueError(f"unknown baseline agent {agent!r}; agents: {BASELINE_AGENTS}")
    by_id = _by_id(episodes)
    steps = [(episode, step) for episode in by_id.values() for step in episode.steps]
    coin = iter(
        np.random.default_rng(seed).random(sum(s.stage == "recommend" for _, s in steps)) < 0.5
    )
    gui = np.random.default_rng([seed, 1])
    first_asked = {
        episode.episode_id: recommend[0].index
        for episode in by_id.values()
        if (recommend := episode.stage_steps("recommend"))
    }
    outcomes = []
    for episode, step in steps:
        first = step.stage == "recommend" and first_asked[episode.episode_id] == step.index
        if agent == "oracle":
            answer = step.gold
        elif agent == "random" and step.stage == "recommend":
            answer = _recommend(bool(next(coin)))
        elif agent == "random" and step.stage == "pool":
            answer = GuiAction("pool_found")
        elif agent == "random":
            action = _GUI_ACTIONS[int(gui.integers(len(_GUI_ACTIONS)))]
            if action in ("click", "type"):
                point = (int(gui.integers(episode.width)), int(gui.integers(episode.height)))
                answer = GuiAction(action, point)
            else:
                answer = GuiAction(action)
        else:
            answer = _recommend(agent == "always_yes" or (agent == "first_item" and first))
        outcomes.append(StepOutcome(episode.episode_id, step, answer, format_valid=True))
    return outcomes


def trivial_baselines(
    episodes: Episodes,
    seed: int = 0,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> dict[str, EspoMetrics]:
    """Every metric of each of :data:`BASELINE_AGENTS` over every step of ``episodes``, with
    the same intervals as a model, and ``random_expected`` (the coin's expectation on
    :data:`EXPECTATION_METRICS`, point values only)."""
    by_id = _by_id(episodes)
    settings = {"threshold": threshold, "resamples": resamples, "confidence": confidence}
    baselines = {
        agent: evaluate_outcomes(
            baseline_outcomes(by_id, agent, seed), episodes=by_id, seed=seed, **settings
        )
        for agent in BASELINE_AGENTS
    }
    asked = [
        (episode.episode_id, step)
        for episode in by_id.values()
        for step in episode.stage_steps("recommend")
    ]
    n, n_yes = len(asked), sum(step.gold.text == "Yes" for _, step in asked)
    expected = {
        "rec_acc": (0.5 if n else math.nan, n),
        "yes_precision": (n_yes / n if n else math.nan, n),
        "yes_recall": (0.5 if n_yes else math.nan, n_yes),
    }
    baselines["random_expected"] = EspoMetrics(
        metrics={k: MetricValue(v, v, v, c, "expectation") for k, (v, c) in expected.items()},
        wilson={},
        n_steps=n,
        n_episodes=len({episode_id for episode_id, _ in asked}),
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


#: the second table's columns: the named extras, point values
_EXTRA_COLUMNS: tuple[tuple[str, str], ...] = (
    ("op_f1_macro", "Op F1 per type: mean"),
    *((f"op_f1_{family}", family) for family in OPERATION_FAMILIES),
    ("op_f1_all_steps", "Op F1 all steps"),
    ("step_sr_text_f1", "Step SR text F1"),
    ("step_sr_all_steps", "Step SR all steps"),
    ("step_sr_pool", "Step SR pool"),
    ("step_sr_recommend", "Step SR recommend"),
)


def metrics_table_markdown(
    results: Mapping[str, EspoMetrics], baselines: Mapping[str, EspoMetrics] | None = None
) -> str:
    """Two Markdown tables, one row per model / variant, then one per baseline: the headline
    metrics with their episode-cluster bootstrap intervals ("value [low, high]"), then the
    named extras (point values). Cells are percentages; "–": undefined or not measured."""
    rows = [(name, m) for name, m in results.items()]
    rows += [(f"{name} (baseline)", m) for name, m in (baselines or {}).items()]
    online = any("online_success" in m for _, m in rows)
    header = ["Model", "EleAcc", "Op F1", "Step SR", "RecAcc", "Yes P / R", "Intent F1"]
    header += ["Format valid", *(["Online success"] if online else []), "Steps / episodes"]
    table: list[list[str]] = []
    extras: list[list[str]] = []
    for name, m in rows:
        values = m.metrics
        label = name.replace("|", "\\|")
        cells = [label, *(_percent(values.get(k)) for k in HEADLINE_METRICS)]
        yes = (_percent(values.get(k), interval=False) for k in ("yes_precision", "yes_recall"))
        cells.append(" / ".join(yes))
        cells += [_percent(values.get(k), interval=False) for k in ("intent_f1", "format_valid")]
        if online:
            cells.append(_percent(values.get("online_success")))
        cells.append(f"{m.n_steps} / {m.n_episodes}")
        table.append(cells)
        extras.append(
            [label, *(_percent(values.get(k), interval=False) for k, _ in _EXTRA_COLUMNS)]
        )
    confidence = next((m.confidence for _, m in rows), CONFIDENCE)
    return (
        markdown_table(header, table)
        + f"\n\nPercent; brackets: {100 * confidence:g}% percentile bootstrap over episodes. "
        "EleAcc, Op F1 and Step SR are over the GUI (search) steps; Step SR needs the element "
        "and the exact operation (typed text equal after normalisation). Yes P / R: "
        "precision / recall of Yes on recommend steps.\n\n"
        + markdown_table(["Model", *(title for _, title in _EXTRA_COLUMNS)], extras)
        + "\n\nThe other readings, percent. Op F1 per gold action type (click, type, scroll, "
        "exit) and their mean, as SeeClick reports it; all steps: the pool and recommend "
        "steps counted too; text F1: typed text accepted at token F1 >= the threshold (0.5 by "
        "default)."
    )
