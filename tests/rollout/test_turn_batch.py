from pathlib import Path

import numpy as np
import pytest
import torch

from odyssey_core.rollout.batch import TurnBatch


def make_batch(episodes=(3, 2), seed=0) -> TurnBatch:
    rng = np.random.default_rng(seed)
    ids, turns = [], []
    for episode, length in enumerate(episodes):
        ids += [episode] * length
        turns += list(range(length))
    n = len(ids)
    lengths = [int(rng.integers(1, 6)) for _ in range(n)]
    return TurnBatch(
        episode_ids=torch.tensor(ids),
        turn_index=torch.tensor(turns),
        levels=[f"odland-1-{1 + e % 2}" for e in ids],
        frames=[rng.integers(0, 256, (8, 10, 3), dtype=np.uint8) for _ in range(n)],
        prompt_ids=[torch.arange(4 + i) for i in range(n)],
        response_ids=[torch.arange(k) for k in lengths],
        thought_mask=[torch.arange(k) < k - 1 for k in lengths],
        action_mask=[torch.arange(k) == k - 1 for k in lengths],
        behaviour_logprobs=[torch.full((k,), -0.5) for k in lengths],
        rewards=torch.arange(n, dtype=torch.float32),
        terminated=torch.tensor(
            [t == length - 1 for e, length in enumerate(episodes) for t in range(length)]
        ),
        truncated=torch.zeros(n, dtype=torch.bool),
        extras=[{"progress": i, "buttons": ("a", "right")} for i in range(n)],
    )


def test_parquet_round_trip_keeps_everything(tmp_path: Path) -> None:
    batch = make_batch()
    batch.values = torch.linspace(0, 1, len(batch))
    TurnBatch.save(batch, tmp_path / "b")
    loaded = TurnBatch.load(tmp_path / "b")
    assert torch.equal(loaded.episode_ids, batch.episode_ids) and loaded.levels == batch.levels
    for a, b in zip(loaded.frames, batch.frames, strict=True):
        assert np.array_equal(a, b)
    for name in ("prompt_ids", "response_ids", "thought_mask", "action_mask", "behaviour_logprobs"):
        for a, b in zip(getattr(loaded, name), getattr(batch, name), strict=True):
            assert torch.equal(a, b), name
    assert torch.allclose(loaded.values, batch.values) and loaded.advantages is None
    assert loaded.extras[1] == {"progress": 1, "buttons": ["a", "right"]}


def test_invariants_are_checked() -> None:
    batch = make_batch()
    with pytest.raises(ValueError, match="contiguous"):
        batch.with_fields(episode_ids=torch.tensor([0, 1, 0, 1, 1]))
    with pytest.raises(ValueError, match="turn_index"):
        batch.with_fields(turn_index=torch.tensor([0, 1, 1, 0, 1]))
    with pytest.raises(ValueError, match="response tokens"):
        batch.with_fields(action_mask=[torch.ones(9, dtype=torch.bool)] * len(batch))
    with pytest.raises(ValueError, match="not both"):
        batch.with_fields(truncated=batch.terminated.clone())
    with pytest.raises(ValueError, match="last turn"):
        batch.with_fields(terminated=torch.ones(len(batch), dtype=torch.bool))


def test_terminated_truncated_bootstrap_and_grouping_columns_round_trip(tmp_path: Path) -> None:
    batch = make_batch()
    n = len(batch)
    ends = batch.terminated.clone()
    # the last episode was cut instead: truncated, with a bootstrap value on its last turn
    last_end = int(torch.nonzero(ends).flatten()[-1])
    terminated, truncated = ends.clone(), torch.zeros(n, dtype=torch.bool)
    terminated[last_end], truncated[last_end] = False, True
    bootstrap = torch.zeros(n)
    bootstrap[last_end] = 2.5
    batch = batch.with_fields(
        terminated=terminated,
        truncated=truncated,
        bootstrap_values=bootstrap,
        group_id=batch.episode_ids // 2,
        sample_index=batch.episode_ids % 2,
        stage=["search"] * (n - 1) + ["recommend"],
    )
    assert torch.equal(batch.dones, ends)
    loaded = TurnBatch.load(TurnBatch.save(batch, tmp_path / "b"))
    for name in ("terminated", "truncated", "bootstrap_values", "group_id", "sample_index"):
        assert torch.equal(getattr(loaded, name), getattr(batch, name)), name
    assert loaded.stage == batch.stage and loaded.next_observations is None
    joined = TurnBatch.concat([batch, batch])
    assert torch.equal(joined.truncated, torch.cat([truncated, truncated]))
    assert joined.stage == batch.stage * 2


def test_episodes_select_and_concat() -> None:
    batch = make_batch((3, 2))
    assert batch.num_episodes == 2
    assert [(s.start, s.stop) for s in batch.episode_slices()] == [(0, 3), (3, 5)]
    picked = batch.select([4, 0])
    assert picked.rewards.tolist() == [4.0, 0.0] and len(picked.response_ids) == 2
    both = TurnBatch.concat([batch, make_batch((1,), seed=1)])
    assert len(both) == 6 and both.episode_ids.tolist() == [0, 0, 0, 1, 1, 2]
