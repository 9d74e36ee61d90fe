"""Evaluation of a GTR policy (card games, ALFWorld), and thought-collapse metrics in GTR's format.

:func:`evaluate_gtr_policy` plays ``episodes`` episodes with fixed seeds (``seed``,
``seed + 1``, ...), so two models evaluated with the same arguments see the same deals (the
promotion gate compares them on equal footing). It reports the success rate and the mean task
return, each with its standard error, and the thought-collapse metrics of every answer. The
return is the env's own reward: no format bonus and no corrector (neither exists at test time).

:func:`gtr_collapse_metrics` feeds :mod:`odyssey_core.eval.collapse` answers in the GTR
format (a thought, then ``"action": ...``): the thought is the reasoning and the action the one
"button", named in words by :func:`action_words` (``+`` is "plus", "add", ...; numbers and
``hit``/``stand`` name themselves).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from odyssey_core.envs.registry import make_env
from odyssey_core.envs.vector import SyncVectorEnv
from odyssey_core.eval.collapse import CollapseReport, CollapseSettings, collapse_metrics, tokens
from odyssey_core.policy.base import GenerationParams
from odyssey_core.protocol.gtr_format import parse_gtr_response
from odyssey_core.protocol.parsing import ParsedResponse
from odyssey_core.rollout.collector import (
    Collector,
    EpisodeBegin,
    EpisodeBudget,
    EpisodeStart,
    TurnOutcome,
)

__all__ = [
    "CARD_ACTION_WORDS",
    "GTREvaluation",
    "action_words",
    "evaluate_gtr_policy",
    "gtr_collapse_metrics",
]

# Words a thought may use for a card-game action (the collapse monitor's "agreement").
CARD_ACTION_WORDS: dict[str, tuple[str, ...]] = {
    "+": ("plus", "add", "adding", "increase", "up", "higher", "sum"),
    "-": ("minus", "subtract", "subtracting", "decrease", "down", "lower", "less"),
    "*": ("times", "multiply", "multiplying", "multiplied", "product"),
    "/": ("divide", "dividing", "divided", "over", "quotient"),
    "(": ("open", "opening", "parenthesis", "bracket"),
    ")": ("close", "closing", "parenthesis", "bracket"),
    "=": ("equals", "equal", "submit", "done", "complete", "finish"),
}


_FILLER = frozenset({"the", "from", "with", "into", "onto", "and"})
# A lone operator in quotes ("so I press '-'", "the next step is '+'") names that action; the
# token-based monitor cannot see symbols, so it is spelled as its first word. A quoted formula
# ('10+2') is left alone: its operators are not the action.
_QUOTED_SYMBOL = re.compile(r"""["'‘’“”]\s*([-+*/()=])\s*["'‘’“”]""")


def _spell_symbols(thought: str | None) -> str | None:
    if thought is None:
        return None
    return _QUOTED_SYMBOL.sub(lambda m: f" {CARD_ACTION_WORDS[m.group(1)][0]} ", thought)


def action_words(action: str) -> tuple[str, ...]:
    """The words that name ``action`` in a thought: :data:`CARD_ACTION_WORDS` for operators, the
    action itself for a one-word action (``10``, ``hit``), and for a phrase (ALFWorld's ``go to
    fridge 1``) its content words (``fridge``; numbers and fillers dropped)."""
    if action in CARD_ACTION_WORDS:
        return CARD_ACTION_WORDS[action]
    words = tokens(action)
    if len(words) <= 1:
        return tuple(words) or (action.lower(),)
    content = tuple(w for w in words if len(w) > 2 and not w.isdigit() and w not in _FILLER)
    return content or tuple(words)


def _words(legal: Sequence[str]) -> dict[str, tuple[str, ...]]:
    return {a: action_words(a) for a in legal}


def gtr_collapse_metrics(
    texts: Sequence[str],
    frames: Sequence[np.ndarray | str],
    legal_actions: Sequence[Sequence[str]],
    settings: CollapseSettings | None = None,
) -> CollapseReport:
    """Collapse metrics of GTR-format answers, each with its frame and legal actions."""
    if not len(texts) == len(frames) == len(legal_actions):
        raise ValueError("texts, frames and legal_actions must have the same length")
    parsed = []
    words: dict[str, tuple[str, ...]] = {}
    for text, legal in zip(texts, legal_actions, strict=True):
        answer = parse_gtr_response(text, legal)
        words.update(_words(legal))
        parsed.append(
            ParsedResponse(
                buttons=(answer.action,) if answer.valid and answer.action is not None else (),
                valid=answer.valid,
                reasoning=_spell_symbols(answer.thought),
                error=answer.error,
            )
        )
    base = settings or CollapseSettings()
    settings = base.model_copy(update={"button_words": words})
    return collapse_metrics(parsed, list(frames), settings)


@dataclass
class GTREvaluation:
    """Per-episode results of one evaluation and their summary."""

    returns: list[float]
    successes: list[bool]
    lengths: list[int]
    invalid_turns: int
    collapse: CollapseReport
    seeds: list[int] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # every answer, in the order played

    @staticmethod
    def _mean_se(values: Sequence[float]) -> tuple[float, float]:
        n = len(values)
        if n == 0:
            return math.nan, math.nan
        mean = float(np.mean(values))
        se = float(np.std(values, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        return mean, se

    def summary(self) -> dict[str, float]:
        success, success_se = self._mean_se([float(s) for s in self.successes])
        mean_return, return_se = self._mean_se(self.returns)
        turns = sum(self.lengths)
        out = {
            "episodes": float(len(self.returns)),
            "success_rate": success,
            "success_se": success_se,
            "mean_return": mean_return,
            "return_se": return_se,
            "mean_length": float(np.mean(self.lengths)) if self.lengths else math.nan,
            "invalid_rate": self.invalid_turns / turns if turns else math.nan,
        }
        out.update({f"collapse/{k}": v for k, v in self.collapse.metrics.items()})
        return out

    def scores(self, metric: str) -> list[float]:
        """The per-episode sample a promotion gate compares: ``return`` or ``success``."""
        if metric == "return":
            return list(self.returns)
        if metric == "success":
            return [float(s) for s in self.successes]
        raise ValueError(f"unknown score metric {metric!r}; use 'return' or 'success'")


@dataclass
class _Episodes:
    """Collects what the evaluation reports from the collector's events."""

    seeds: dict[int, int] = field(default_factory=dict)
    legal: dict[int, list[str]] = field(default_factory=dict)
    returns: dict[int, float] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)
    successes: dict[int, bool] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)
    legal_per_turn: list[list[str]] = field(default_factory=list)
    invalid: int = 0

    def on_start(self, episode: int, begin: EpisodeBegin) -> None:
        self.seeds[episode] = begin.env_seed
        self.legal[episode] = list(begin.info["legal_actions"])
        self.returns[episode], self.lengths[episode] = 0.0, 0

    def on_turn(self, episode: int, outcome: TurnOutcome) -> None:
        assert outcome.generation is not None
        self.texts.append(outcome.generation.text)
        self.frames.append(np.asarray(outcome.observation.image))
        self.legal_per_turn.append(self.legal[episode])
        self.legal[episode] = list(outcome.info.get("legal_actions", []))
        self.invalid += bool(outcome.info.get("invalid_action", False))
        self.returns[episode] += outcome.reward
        self.lengths[episode] += 1
        if outcome.ends_episode:
            self.successes[episode] = bool(outcome.info.get("success", False))

    def on_end(self, episode: int, error: str | None) -> None:
        if error is not None:
            raise RuntimeError(f"evaluation episode {episode} failed: {error}")


def evaluate_gtr_policy(
    policy: Any,
    env_name: str,
    *,
    episodes: int,
    seed: int,
    generation: GenerationParams,
    env_kwargs: dict[str, Any] | None = None,
    n_envs: int = 4,
    collapse_settings: CollapseSettings | None = None,
    max_turns: int = 10_000,
) -> GTREvaluation:
    """Play ``episodes`` episodes (env seeds ``seed + k``) with ``n_envs`` envs batched per
    turn, on the one collector; episodes end by the env's own rules (or ``max_turns``)."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    factory = functools.partial(make_env, env_name, **(env_kwargs or {}))
    envs = SyncVectorEnv([factory] * min(n_envs, episodes))
    record = _Episodes()
    try:
        Collector(envs, policy, generation, max_turns=max_turns).play(
            EpisodeBudget(episodes),
            record,
            seed=seed,
            starts=[EpisodeStart(seed=seed + k) for k in range(episodes)],
        )
    finally:
        envs.close()
    report = gtr_collapse_metrics(
        record.texts, record.frames, record.legal_per_turn, collapse_settings
    )
    order = range(episodes)  # by episode = by deal, so paired comparisons line up
    return GTREvaluation(
        returns=[record.returns[k] for k in order],
        successes=[record.successes[k] for k in order],
        lengths=[record.lengths[k] for k in order],
        invalid_turns=record.invalid,
        collapse=report,
        seeds=[record.seeds[k] for k in order],
        answers=record.texts,
    )
