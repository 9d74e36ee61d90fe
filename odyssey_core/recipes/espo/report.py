"""The pictures of an ESPO evaluation: bar plots of the metrics with their intervals (the
baselines beside the model) and videos of live episodes with the model's reasoning."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from odyssey_core.eval.video import EpisodeVideoWriter
from odyssey_core.protocol.gui import parse_gui_answer
from odyssey_core.recipes.espo.evaluation import OnlineResult
from odyssey_core.recipes.espo.metrics import HEADLINE_METRICS, LABELS, EspoMetrics

__all__ = ["PLOTTED", "plot_metrics", "write_online_video"]

#: the metrics on the bar plot, in the paper's order
PLOTTED = HEADLINE_METRICS


def plot_metrics(
    results: Mapping[str, EspoMetrics], baselines: Mapping[str, EspoMetrics], path: str | Path
) -> Path:
    """One group of bars per headline metric (GUI metrics over the GUI steps), one bar per
    model and baseline (every baseline answers every step, so each has every bar;
    ``random_expected`` only RecAcc), each with its episode-bootstrap interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {**results, **{f"{k} (baseline)": v for k, v in baselines.items()}}
    fig, ax = plt.subplots(figsize=(2.2 + 1.6 * len(PLOTTED), 3.4), dpi=100)
    width = 0.8 / max(1, len(rows))
    for i, (label, metrics) in enumerate(rows.items()):
        xs, values, errors = [], [], [[], []]
        for j, key in enumerate(PLOTTED):
            if key not in metrics.metrics or not np.isfinite(metrics[key].value):
                continue
            m = metrics[key]
            xs.append(j + (i - (len(rows) - 1) / 2) * width)
            values.append(100 * m.value)
            errors[0].append(100 * max(0.0, m.value - m.low))
            errors[1].append(100 * max(0.0, m.high - m.value))
        if xs:
            ax.bar(xs, values, width, yerr=errors, capsize=2, label=label)
    ax.set_xticks(range(len(PLOTTED)), [LABELS[k] for k in PLOTTED])
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def _panel(result: OnlineResult, turn: int, text: str | None, width: int = 52) -> list[str]:
    lines = [f"{result.episode_id}  turn {turn + 1}/{result.turns}"]
    if text is None:
        outcome = "success" if result.success else "wrong Yes set"
        return [*lines, f"end: {outcome}", f"said Yes to: {', '.join(result.recommended) or '-'}",
                f"the user's Yes set: {', '.join(result.yes_set) or '-'}"]  # fmt: skip
    parsed = parse_gui_answer(text)
    lines += textwrap.wrap(f"thought: {parsed.thought or '-'}", width) or ["thought: -"]
    answer = parsed.action.describe() if parsed.action else f"(unreadable: {parsed.error})"
    lines += textwrap.wrap(f"action: {answer}", width)
    return lines[:30]


def write_online_video(result: OnlineResult, path: str | Path) -> Path | None:
    """An MP4 of one live episode that kept its screens (``evaluate_online(record=...)``): each
    screen with the answer the model gave to it, then the last screen with the outcome."""
    if not result.frames:
        return None
    path = Path(path)
    with EpisodeVideoWriter(path, fps=2.0, scale=1, panel_width=420, font_size=12) as video:
        for turn, frame in enumerate(result.frames):
            text = result.texts[turn] if turn < len(result.texts) else None
            video.add(frame, _panel(result, turn, text))
    return path
