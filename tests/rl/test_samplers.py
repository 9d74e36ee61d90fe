"""Minibatch samplers: exact draws with a seeded generator, and what each keeps together.

Keys used throughout: rows 0-2 belong to unit 5, rows 3-4 to unit 2, rows 5-8 to unit 9 and
row 9 to unit 4 (units numbered 0, 1, 2, 3 by first appearance).
"""

from __future__ import annotations

import pytest
import torch

from odyssey_core.rl.samplers import SAMPLERS, episodes, shuffled_turns, shuffled_turns_equal_steps

KEYS = torch.tensor([5, 5, 5, 2, 2, 9, 9, 9, 9, 4])
UNITS = {5: [0, 1, 2], 2: [3, 4], 9: [5, 6, 7, 8], 4: [9]}


def seeded(seed: int = 1) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def as_lists(minibatches: list[torch.Tensor]) -> list[list[int]]:
    assert all(m.dtype == torch.long for m in minibatches)
    return [m.tolist() for m in minibatches]


def test_registry() -> None:
    assert SAMPLERS.names() == ["episodes", "shuffled_turns", "shuffled_turns_equal_steps"]
    assert SAMPLERS.get("episodes") is episodes
    assert SAMPLERS.get("shuffled_turns") is shuffled_turns
    assert SAMPLERS.get("shuffled_turns_equal_steps") is shuffled_turns_equal_steps


def test_shuffled_turns_equal_steps_exact_draw() -> None:
    # randperm(10) under seed 1 is [5, 6, 1, 2, 0, 8, 9, 3, 7, 4]; four units: four steps of
    # 3, 3, 2, 2 turns at size 1, two steps of 5 turns at size 3
    assert as_lists(shuffled_turns_equal_steps(KEYS, 1, seeded())) == [
        [5, 6, 1],
        [2, 0, 8],
        [9, 3],
        [7, 4],
    ]
    assert as_lists(shuffled_turns_equal_steps(KEYS, 3, seeded())) == [
        [5, 6, 1, 2, 0],
        [8, 9, 3, 7, 4],
    ]


def test_shuffled_turns_equal_steps_matches_the_episodic_step_count_and_mixes_units() -> None:
    for seed in range(20):
        for size in (1, 2, 3, 4, 10):
            ours = as_lists(shuffled_turns_equal_steps(KEYS, size, seeded(seed)))
            theirs = as_lists(episodes(KEYS, size, seeded(seed)))
            assert len(ours) == len(theirs)
            assert sorted(row for m in ours for row in m) == list(range(10))
            assert max(map(len, ours)) - min(map(len, ours)) <= 1
    mixed = [
        len(set(KEYS[m].tolist())) > 1
        for seed in range(20)
        for m in as_lists(shuffled_turns_equal_steps(KEYS, 1, seeded(seed)))
    ]
    assert sum(mixed) > len(mixed) // 2  # most minibatches hold turns of several units


def test_shuffled_turns_exact_draw() -> None:
    # torch.randperm(10) under seed 1 is [5, 6, 1, 2, 0, 8, 9, 3, 7, 4]
    assert as_lists(shuffled_turns(KEYS, 4, seeded())) == [[5, 6, 1, 2], [0, 8, 9, 3], [7, 4]]


def test_shuffled_turns_is_the_trainers_old_permutation() -> None:
    """``order = torch.randperm(len(turns), generator)`` then chunks of ``minibatch_size``:
    the same rows and the same generator state afterwards, so later epochs draw the same."""
    for n, size, seed in ((10, 4, 1), (7, 3, 0), (5, 5, 3), (3, 8, 2)):
        ours, theirs = seeded(seed), seeded(seed)
        order = torch.randperm(n, generator=theirs)
        chunks = [order[s : s + size] for s in range(0, n, size)]
        assert as_lists(shuffled_turns(torch.zeros(n, dtype=torch.long), size, ours)) == (
            as_lists(chunks)
        )
        assert torch.equal(ours.get_state(), theirs.get_state())


def test_episodes_exact_draws() -> None:
    # randperm(4) under seed 1 is [1, 3, 2, 0]: units 2, 4, 9, 5
    assert as_lists(episodes(KEYS, 1, seeded())) == [[3, 4], [9], [5, 6, 7, 8], [0, 1, 2]]
    assert as_lists(episodes(KEYS, 3, seeded())) == [[3, 4, 9, 5, 6, 7, 8], [0, 1, 2]]
    # randperm(4) under seed 0 is [0, 1, 3, 2]
    assert as_lists(episodes(KEYS, 3, seeded(0))) == [[0, 1, 2, 3, 4, 9], [5, 6, 7, 8]]


def test_episodes_keep_units_whole_and_in_time_order() -> None:
    for seed in range(20):
        for size in (1, 2, 3):
            minibatches = as_lists(episodes(KEYS, size, seeded(seed)))
            assert sorted(row for m in minibatches for row in m) == list(range(10))
            for m in minibatches:
                keys = KEYS[m].tolist()
                units = list(dict.fromkeys(keys))
                assert len(units) <= size
                # each unit appears once, as its full row list in the original order
                assert m == [row for unit in units for row in UNITS[unit]]


def test_episodes_with_interleaved_keys_keep_batch_order() -> None:
    keys = torch.tensor([1, 0, 1, 0, 1])
    draws = {tuple(map(tuple, as_lists(episodes(keys, 1, seeded(s))))) for s in range(10)}
    assert draws == {((0, 2, 4), (1, 3)), ((1, 3), (0, 2, 4))}


def test_size_larger_than_the_units() -> None:
    # one minibatch with every unit; randperm(4) under seed 1: units 2, 4, 9, 5
    assert as_lists(episodes(KEYS, 10, seeded())) == [[3, 4, 9, 5, 6, 7, 8, 0, 1, 2]]
    (only,) = shuffled_turns(KEYS, 50, seeded())
    assert only.tolist() == [5, 6, 1, 2, 0, 8, 9, 3, 7, 4]


def test_empty_batches_and_bad_arguments() -> None:
    empty = torch.zeros(0, dtype=torch.long)
    assert episodes(empty, 1, seeded()) == [] and shuffled_turns(empty, 1, seeded()) == []
    assert shuffled_turns_equal_steps(empty, 1, seeded()) == []
    for sampler in (episodes, shuffled_turns, shuffled_turns_equal_steps):
        with pytest.raises(ValueError, match="at least one unit"):
            sampler(KEYS, 0, seeded())
        with pytest.raises(ValueError, match="must be 1-D"):
            sampler(KEYS.reshape(2, 5), 1, seeded())
