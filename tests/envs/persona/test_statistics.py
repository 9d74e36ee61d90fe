"""The generated data's shape against SmartSpot's statistics table: per-channel means of GUI
steps, recommend steps, instruction and intent lengths within 15%, SmartSpot's episode counts
(five channels of 20, the two travel scenarios 12 and 10), and requests that always leave
something implicit."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from odyssey_core.envs.persona.dataset import PRESETS, generate_episodes
from odyssey_core.envs.persona.episode import EpisodeRecord
from odyssey_core.envs.persona.statistics import (
    SHAPE_FIELDS,
    SMARTSPOT_CHANNELS,
    SMARTSPOT_STATISTICS,
    channel_statistics,
    relative_gaps,
    statistics_table_markdown,
)
from odyssey_core.envs.persona.users import User

TOLERANCE = 0.15


@pytest.fixture(scope="module")
def smartspot_like() -> list[EpisodeRecord]:
    return generate_episodes("smartspot_like", 0)


def test_channel_counts_are_smartspots(smartspot_like: list[EpisodeRecord]) -> None:
    counts = Counter(e.channel for e in smartspot_like)
    assert counts == {
        "food": 20,
        "hotel": 20,
        "flight": 20,
        "movie": 20,
        "medicine": 20,
        "travel": 12,
        "travel_dining": 10,
    }
    assert sum(counts.values()) == 20 * 5 + 12 + 10 == 122
    for channel, n in counts.items():
        assert SMARTSPOT_STATISTICS[SMARTSPOT_CHANNELS[channel]].episodes == n
    # the two travel scenarios are two multi-app kinds
    apps = {e.channel: User.from_json(e.scenario["user"]).apps for e in smartspot_like}
    assert apps["travel"] == ("flight", "hotel") and apps["travel_dining"] == ("hotel", "food")


@pytest.mark.parametrize("seed", [0, 1])
def test_every_channel_is_within_15_percent_of_smartspots_means(seed: int) -> None:
    measured = channel_statistics(generate_episodes("smartspot_like", seed))
    assert set(measured) == set(SMARTSPOT_CHANNELS)
    table = statistics_table_markdown(measured)
    for channel, stats in measured.items():
        reference = SMARTSPOT_STATISTICS[SMARTSPOT_CHANNELS[channel]]
        assert stats.pool_steps == 1
        gaps = relative_gaps(stats, reference)
        assert set(gaps) == set(SHAPE_FIELDS)
        for name, gap in gaps.items():
            assert abs(gap) <= TOLERANCE, f"{channel} {name}: {gap:+.1%}\n{table}"


def test_movie_pools_hold_seven_items(smartspot_like: list[EpisodeRecord]) -> None:
    movie = [e for e in smartspot_like if e.channel == "movie"]
    assert {len(e.candidates) for e in movie} == {7}
    assert max(len(e.candidates) for e in smartspot_like) >= 7


def _named(value: str, request: str) -> bool:
    return re.search(rf"\b{re.escape(value.lower())}\b", request.lower()) is not None


def test_every_request_leaves_something_implicit(smartspot_like: list[EpisodeRecord]) -> None:
    """No request states the preference, and none names every explicit slot; fully specified
    requests come only when the preset asks for them."""
    assert PRESETS["smartspot_like"].ambiguity_weights[0] == 0
    for episode in smartspot_like:
        user = User.from_json(episode.scenario["user"])
        assert episode.ambiguity in ("partial", "vague"), episode.episode_id
        assert episode.intent_slots["preference"] not in episode.request
        values = [v for app in user.apps for v in user.wants[app].values()]
        assert not all(_named(v, episode.request) for v in values), episode.request
    assert {e.ambiguity for e in smartspot_like} == {"partial", "vague"}
