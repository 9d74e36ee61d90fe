"""Super Mario Land's state decoded from synthetic memory images: no ROM needed.

Every expected value below is worked by hand from the bytes the test writes.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers_batches import facts_batch

from odyssey_core.envs.pyboy.levels import MARIO_LEVELS
from odyssey_core.envs.pyboy.mario import (
    DEATH_ADDRESS,
    GAME_OVER_ADDRESS,
    LEVEL_BLOCK,
    LIVES,
    LIVES_DISPLAY,
    MARIO_X,
    PAPER_MAX_PROGRESS,
    PLAYFIELD_FIRST_LINE,
    TIME_LEFT,
    WORLD_LEVEL,
    SuperMarioLand,
    bcd,
    decode,
    level_progress,
    to_bcd,
)
from odyssey_core.eval.report import table_rows
from odyssey_core.eval.stats import level_stats, table_from_cells
from odyssey_core.rollout.collector import default_info_extras
from odyssey_core.rollout.metrics import RolloutMetrics


class FakeMemory(dict):
    """A memory image: the bytes a test chose, 0 everywhere else."""

    def __missing__(self, address: int) -> int:
        return 0


def fake_pyboy(scroll_x: int = 0, **cells: int) -> SimpleNamespace:
    """An object with the two things ``SuperMarioLand.read`` may look at: memory and the LCD's
    per-line scroll record (line 16 carries ``scroll_x``; the HUD lines above it are at 0)."""
    lines = [[0, 0, -7, 0] for _ in range(144)]
    for line in range(PLAYFIELD_FIRST_LINE, 144):
        lines[line][0] = scroll_x
    memory = FakeMemory({int(k, 16): v for k, v in cells.items()})
    return SimpleNamespace(memory=memory, screen=SimpleNamespace(tilemap_position_list=lines))


def image(**cells: int) -> FakeMemory:
    return FakeMemory({int(k, 16): v for k, v in cells.items()})


@pytest.fixture()
def game(tmp_path: Path) -> SuperMarioLand:
    return SuperMarioLand(rom_path=tmp_path / "unused.gb")


@pytest.mark.parametrize(
    ("byte", "value"), [(0x00, 0), (0x02, 2), (0x09, 9), (0x10, 10), (0x25, 25), (0x99, 99)]
)
def test_bcd_bytes(byte: int, value: int) -> None:
    assert bcd(byte) == value
    assert to_bcd(value) == byte


def test_to_bcd_refuses_what_a_byte_cannot_hold() -> None:
    with pytest.raises(ValueError, match=r"0\.\.99"):
        to_bcd(100)


@pytest.mark.parametrize(
    ("block", "scroll_x", "mario_x", "expected"),
    [
        (0, 7, 0, 0),  # (7 - 7) mod 16 = 0
        (0, 6, 0, 15),  # (6 - 7) mod 16 = 15
        (0, 0, 40, 49),  # (0 - 7) mod 16 = 9; 9 + 40
        (12, 5, 48, 254),  # 16 * 12 + 14 + 48
        (1, 23, 0, 16),  # 16 + (23 - 7) mod 16 = 16 + 0
        (0x93, 0xF3, 0x50, 2444),  # 16 * 147 + (243 - 7) mod 16 = 2352 + 12, + 80
    ],
)
def test_level_progress_formula(block, scroll_x, mario_x, expected) -> None:
    assert level_progress(block, scroll_x, mario_x) == expected


def test_decode_reads_every_field_from_memory() -> None:
    memory = image(
        C0AB=0x0C,  # block 12
        C202=0x30,  # Mario at x 48 on screen
        DA15=0x12,  # 12 lives, in BCD
        DA01=0x50,  # time: ones and tens 50 ...
        DA02=0x03,  # ... hundreds 3 -> 350
        FFB4=0x21,  # world 2, level 1
    )
    snapshot = decode(memory, "2-1", scroll_x=5)
    assert snapshot.progress == 16 * 12 + 14 + 48 == 254
    assert snapshot.lives == 12
    assert snapshot.extras == {"world": (2, 1), "time_left": 350}
    assert not snapshot.dead and not snapshot.goal_reached and not snapshot.game_over


@pytest.mark.parametrize(
    ("low", "high", "seconds"), [(0x00, 0x04, 400), (0x09, 0x00, 9), (0x99, 0x09, 999)]
)
def test_time_left_is_two_bcd_bytes(low: int, high: int, seconds: int) -> None:
    memory = image(FFB4=0x11)
    memory[TIME_LEFT], memory[TIME_LEFT + 1] = low, high
    assert decode(memory, "1-1", scroll_x=0).extras["time_left"] == seconds


@pytest.mark.parametrize(
    ("death", "over", "world", "dead", "goal", "game_over"),
    [
        (0x00, 0x00, 0x11, False, False, False),
        (0x80, 0x00, 0x11, False, False, False),  # the threshold itself is still alive
        (0x81, 0x00, 0x11, True, False, False),
        (0x90, 0x00, 0x11, True, False, False),  # set when Mario falls off the screen
        (0x00, 0x39, 0x11, True, False, True),  # game over counts as a death
        (0x00, 0x00, 0x12, False, True, False),  # the world byte moved on: goal passed
        (0x00, 0x39, 0x12, True, False, True),  # ... but not on a game over
    ],
)
def test_death_goal_and_game_over(death, over, world, dead, goal, game_over) -> None:
    memory = image()
    memory[DEATH_ADDRESS], memory[GAME_OVER_ADDRESS], memory[WORLD_LEVEL] = death, over, world
    snapshot = decode(memory, "1-1", scroll_x=0)
    assert (snapshot.dead, snapshot.goal_reached, snapshot.game_over) == (dead, goal, game_over)


def test_read_takes_the_scroll_the_lcd_latched_below_the_hud(game) -> None:
    pyboy = fake_pyboy(scroll_x=0xF3, C0AB=0x93, C202=0x50, DA15=0x02, FFB4=0x11)
    snapshot = game.read(pyboy, "1-1")
    assert snapshot.progress == 2444 and snapshot.lives == 2
    assert snapshot.extras["world"] == (1, 1)


def test_read_uses_only_memory_and_the_lcd_record(game) -> None:
    """A stale wrapper must not matter: the fake has one, with wrong values, and read ignores it."""
    pyboy = fake_pyboy(scroll_x=7, C0AB=1, C202=10, DA15=0x03, FFB4=0x11)
    pyboy.game_wrapper = SimpleNamespace(level_progress=9999, lives_left=0, world=(4, 2))
    snapshot = game.read(pyboy, "1-1")
    assert (snapshot.progress, snapshot.lives) == (26, 3)
    assert snapshot.extras["world"] == (1, 1) and not snapshot.goal_reached


def test_set_lives_writes_bcd_and_the_hud_digits(game) -> None:
    pyboy = fake_pyboy()
    game.set_lives(pyboy, 12)
    assert pyboy.memory[LIVES] == 0x12
    assert (pyboy.memory[LIVES_DISPLAY], pyboy.memory[LIVES_DISPLAY + 1]) == (1, 2)
    pyboy.memory[LEVEL_BLOCK], pyboy.memory[MARIO_X] = 0, 0
    assert game.read(pyboy, "1-1").lives == 12


def test_paper_maximum_progress_for_the_training_levels(game) -> None:
    table2 = {"1-1": 2351, "1-2": 2190, "1-3": 2336, "2-1": 2510, "2-2": 2191}
    assert table2 == PAPER_MAX_PROGRESS
    assert {lv: game.max_progress(lv) for lv in table2} == table2
    assert set(table2) <= set(MARIO_LEVELS)
    for level in ("3-1", "3-2", "3-3", "4-1", "4-2"):
        assert game.max_progress(level) is None  # the paper gives no maximum for held-out levels


def test_reports_get_the_maximum_row_and_progress_fractions(game) -> None:
    levels = list(PAPER_MAX_PROGRESS)
    cells = {
        "agent": {
            f"mario-{lv}": level_stats(f"mario-{lv}", [1000.0, 1200.0], max_progress=m)
            for lv, m in ((lv, game.max_progress(lv)) for lv in levels)
        }
    }
    table = table_from_cells("mario", cells, levels=[f"mario-{lv}" for lv in levels])
    _, rows = table_rows(table)
    maximum = next(row for row in rows if row[0] == "Maximum")
    # 2351 + 2190 + 2336 + 2510 + 2191 = 11578; / 5 = 2315.6
    assert maximum == ["Maximum", "2351", "2190", "2336", "2510", "2191", "2315.6"]
    assert math.isclose(table.max_average(), 2315.6)


def test_rollout_metrics_get_the_progress_fraction(game) -> None:
    """One episode per level, its extras made from the info a Mario env reports."""
    final = {"mario-1-1": 1175.5, "mario-2-1": 2510.0, "mario-3-1": 700.0}
    extras = [
        default_info_extras({}, {"progress": p, "max_progress": game.max_progress(env[6:])})
        for env, p in final.items()
    ]
    n = len(extras)
    batch = facts_batch(
        list(range(n)),
        [0] * n,
        list(final),
        extras,
        torch.zeros(n),
        torch.ones(n, dtype=torch.bool),
    )
    metrics = RolloutMetrics.from_batch(batch)
    assert metrics.per_level["mario-1-1"].max_progress == 2351.0
    assert metrics.per_level["mario-1-1"].progress_frac_mean == 0.5  # 1175.5 / 2351
    assert metrics.per_level["mario-2-1"].progress_frac_mean == 1.0  # 2510 / 2510
    held_out = metrics.per_level["mario-3-1"]
    assert held_out.max_progress is None and held_out.progress_frac_mean is None
    assert metrics.overall.progress_frac_mean == 0.75  # mean over the levels that know it
