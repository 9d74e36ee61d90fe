"""The per-channel shape of a personalized-GUI dataset, beside SmartSpot's own statistics.

SmartSpot's table (SmartAgent's release; per-episode means; instruction and intent lengths in
words) is :data:`SMARTSPOT_STATISTICS`. A channel's *GUI steps* are its ``search`` steps, its
*pool steps* the ``pool`` step (one an episode), its *recommend steps* the Yes / No steps; the
*instruction* is the user's request and the *intent* the true intent sentence, both counted in
whitespace-separated words. :data:`SMARTSPOT_CHANNELS` maps each of our channels to its row
(``travel`` and ``travel_dining`` are SmartSpot's two multi-app travel scenarios).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from odyssey_core.common.tables import markdown_table
from odyssey_core.envs.persona.episode import EpisodeRecord

__all__ = [
    "SHAPE_FIELDS",
    "SMARTSPOT_CHANNELS",
    "SMARTSPOT_STATISTICS",
    "ChannelStatistics",
    "channel_statistics",
    "relative_gaps",
    "statistics_table_markdown",
]


@dataclass(frozen=True)
class ChannelStatistics:
    """One channel's episode count and per-episode means."""

    episodes: int
    gui_steps: float
    pool_steps: float
    recommend_steps: float
    instruction_words: float
    intent_words: float

    @property
    def steps(self) -> float:
        """Mean steps an episode (GUI + pool + recommend)."""
        return self.gui_steps + self.pool_steps + self.recommend_steps


#: the means a generated channel must match (within a tolerance) to have SmartSpot's shape
SHAPE_FIELDS: tuple[str, ...] = (
    "gui_steps",
    "recommend_steps",
    "instruction_words",
    "intent_words",
)

SMARTSPOT_STATISTICS: dict[str, ChannelStatistics] = {
    "food": ChannelStatistics(20, 7.00, 1, 4.00, 12.90, 27.50),
    "hotel": ChannelStatistics(20, 11.00, 1, 4.00, 14.80, 35.45),
    "flight": ChannelStatistics(20, 9.20, 1, 4.50, 19.95, 24.25),
    "movie": ChannelStatistics(20, 8.00, 1, 7.00, 13.45, 34.15),
    "medicine": ChannelStatistics(20, 6.55, 1, 4.20, 13.15, 19.00),
    "travel 1": ChannelStatistics(12, 17.30, 1, 4.00, 23.10, 48.30),
    "travel 2": ChannelStatistics(10, 21.33, 1, 4.00, 23.67, 55.25),
}

#: our channel -> its SmartSpot row
SMARTSPOT_CHANNELS: dict[str, str] = {
    "food": "food",
    "hotel": "hotel",
    "flight": "flight",
    "movie": "movie",
    "medicine": "medicine",
    "travel": "travel 1",
    "travel_dining": "travel 2",
}


def _words(text: str) -> int:
    return len(text.split())


def channel_statistics(episodes: Iterable[EpisodeRecord]) -> dict[str, ChannelStatistics]:
    """Each channel's count and per-episode means, channels in first-seen order."""
    by_channel: dict[str, list[EpisodeRecord]] = {}
    for episode in episodes:
        by_channel.setdefault(episode.channel, []).append(episode)
    out = {}
    for channel, group in by_channel.items():
        n = len(group)

        def mean(values: Iterable[float], n: int = n) -> float:
            return sum(values) / n

        out[channel] = ChannelStatistics(
            episodes=n,
            gui_steps=mean(len(e.stage_steps("search")) for e in group),
            pool_steps=mean(len(e.stage_steps("pool")) for e in group),
            recommend_steps=mean(len(e.stage_steps("recommend")) for e in group),
            instruction_words=mean(_words(e.request) for e in group),
            intent_words=mean(_words(e.intent) for e in group),
        )
    return out


def relative_gaps(measured: ChannelStatistics, reference: ChannelStatistics) -> dict[str, float]:
    """``(measured - reference) / reference`` for each of :data:`SHAPE_FIELDS`."""
    got, want = asdict(measured), asdict(reference)
    return {name: (got[name] - want[name]) / want[name] for name in SHAPE_FIELDS}


def statistics_table_markdown(
    measured: Mapping[str, ChannelStatistics],
    reference: Mapping[str, ChannelStatistics] = SMARTSPOT_STATISTICS,
) -> str:
    """One row per channel: the measured means, each followed by SmartSpot's in parentheses
    (where the channel has a SmartSpot row), then the total episodes and steps."""
    header = ["channel", "episodes", "GUI steps", "pool", "recommend", "instruction", "intent"]
    rows = []
    for channel, m in measured.items():
        ref = reference.get(SMARTSPOT_CHANNELS.get(channel, ""))

        def cell(name: str, digits: int = 2, m: ChannelStatistics = m, ref=ref) -> str:
            value = f"{getattr(m, name):.{digits}f}"
            return value if ref is None else f"{value} ({getattr(ref, name):.{digits}f})"

        episodes = str(m.episodes) + ("" if ref is None else f" ({ref.episodes})")
        rows.append(
            [
                channel,
                episodes,
                cell("gui_steps"),
                cell("pool_steps", 0),
                cell("recommend_steps"),
                cell("instruction_words"),
                cell("intent_words"),
            ]
        )
    episodes = sum(m.episodes for m in measured.values())
    steps = sum(m.episodes * m.steps for m in measured.values())
    return (
        markdown_table(header, rows)
        + f"\n\n{episodes} episodes, {round(steps)} steps. Per-episode means; in parentheses "
        "SmartSpot's (SmartAgent's release); instruction and intent in words."
    )
