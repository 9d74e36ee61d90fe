"""The turn-level NatureCNN critic: shapes, fitting a toy problem, scaling and checkpoints.

Frames are kept tiny (36x36, the smallest the three convolutions accept) so the tests run fast.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from odyssey_core.rl.advantages import discounted_return_to_go
from odyssey_core.rl.critic import CriticTrainer, NatureCNN, explained_variance, stack_frames
from odyssey_core.rl.settings import CriticSettings
from odyssey_core.rollout.batch import TurnBatch

SMALL = {"input_height": 36, "input_width": 36, "hidden_dim": 64}


def brightness_problem(n: int = 64, seed: int = 0) -> tuple[list[np.ndarray], torch.Tensor]:
    """Flat grey frames whose brightness b in [0, 1] encodes the return R = 100 * b."""
    rng = np.random.default_rng(seed)
    brightness = rng.uniform(0.0, 1.0, size=n)
    frames = [np.full((36, 36, 3), round(255 * b), dtype=np.uint8) for b in brightness]
    returns = torch.tensor([round(255 * b) / 255 * 100 for b in brightness], dtype=torch.float32)
    return frames, returns


def test_nature_cnn_shapes_and_resize() -> None:
    net = NatureCNN(input_size=(84, 84))
    frames = torch.randint(0, 256, (5, 144, 160, 3), dtype=torch.uint8)  # the Game Boy screen
    assert net.preprocess(frames).shape == (5, 3, 84, 84)
    assert net(frames).shape == (5,)
    grey = NatureCNN(input_size=(36, 40), grayscale=True)
    assert grey.preprocess(frames).shape == (5, 1, 36, 40)
    assert grey(frames).shape == (5,)
    with pytest.raises(ValueError):
        net(torch.zeros(2, 84, 84, dtype=torch.uint8))


def test_preprocess_scales_to_unit_interval() -> None:
    net = NatureCNN(input_size=(36, 36))
    frames = torch.full((1, 36, 36, 3), 255, dtype=torch.uint8)
    assert torch.equal(net.preprocess(frames), torch.ones(1, 3, 36, 36))
    grey = NatureCNN(input_size=(36, 36), grayscale=True)
    assert torch.allclose(grey.preprocess(frames), torch.ones(1, 1, 36, 36))


def test_stack_frames_accepts_lists_and_tensors() -> None:
    frames = [np.full((4, 4, 3), i, dtype=np.uint8) for i in range(5)]
    assert stack_frames(frames, [3, 1])[:, 0, 0, 0].tolist() == [3, 1]
    assert stack_frames(torch.from_numpy(np.stack(frames)), [4])[:, 0, 0, 0].tolist() == [4]


def test_explained_variance_uses_population_variance() -> None:
    # R = [0, 2, 4]: Var = 8/3. V = [1, 2, 3]: R - V = [-1, 0, 1], Var = 2/3. EV = 1 - 1/4.
    target = torch.tensor([0.0, 2.0, 4.0])
    assert explained_variance(torch.tensor([1.0, 2.0, 3.0]), target) == pytest.approx(0.75)
    assert explained_variance(target, target) == pytest.approx(1.0)


def test_critic_fits_brightness_to_return() -> None:
    frames, returns = brightness_problem(n=32)
    trainer = CriticTrainer(CriticSettings(**SMALL, minibatch_size=16), seed=0)
    history = [trainer.train_step(frames, returns) for _ in range(30)]
    first, last = history[0], history[-1]
    assert last["critic/loss"] < 0.01 * first["critic/loss"]
    assert last["critic/explained_variance"] > 0.95 > 0.5 > first["critic/explained_variance"]
    held_out_frames, held_out_returns = brightness_problem(n=32, seed=1)
    assert explained_variance(trainer.predict(held_out_frames), held_out_returns) > 0.95
    assert set(last) >= {"critic/grad_norm", "critic/value_mean", "critic/time_s"}


def test_value_scale_round_trip() -> None:
    frames, returns = brightness_problem(n=8)
    trainer = CriticTrainer(
        CriticSettings(**SMALL, value_scale=100.0, minibatch_size=8, lr=1e-12), seed=1
    )
    stacked = stack_frames(frames)
    with torch.no_grad():
        raw = trainer.network(stacked)
    # predict() is in return units: 100 x the network's output.
    assert torch.allclose(trainer.predict(frames), raw * 100.0)
    # The loss regresses the raw output on R / 100 (one minibatch: measured before the step).
    metrics = trainer.train_step(frames, returns)
    expected = F.smooth_l1_loss(raw, returns / 100.0).item()
    assert metrics["critic/loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["critic/value_mean"] == pytest.approx(float(raw.mean() * 100), rel=1e-4)


def test_warmup_gates_the_actor() -> None:
    frames, returns = brightness_problem(n=4)
    trainer = CriticTrainer(CriticSettings(**SMALL, warmup_steps=2), seed=0)
    assert not trainer.actor_may_update()
    trainer.train_step(frames, returns)
    assert not trainer.actor_may_update()
    trainer.train_step(frames, returns)
    assert trainer.actor_may_update()
    assert trainer.actor_may_update(5) and not trainer.actor_may_update(1)


def test_state_dict_round_trip_continues_identically() -> None:
    frames, returns = brightness_problem(n=24)
    settings = CriticSettings(**SMALL, minibatch_size=8)
    uninterrupted = CriticTrainer(settings, seed=5)
    for _ in range(4):
        uninterrupted.train_step(frames, returns)

    first_half = CriticTrainer(settings, seed=5)
    for _ in range(2):
        first_half.train_step(frames, returns)
    state = first_half.state_dict()
    resumed = CriticTrainer(settings, seed=123)  # different init and shuffling: all overwritten
    resumed.load_state_dict(state)
    assert torch.equal(resumed.predict(frames), first_half.predict(frames))
    for _ in range(2):
        resumed.train_step(frames, returns)
    assert resumed.steps_done == 4
    assert torch.equal(resumed.predict(frames), uninterrupted.predict(frames))

    with pytest.raises(ValueError, match="value_scale"):
        CriticTrainer(CriticSettings(**SMALL, value_scale=1.0)).load_state_dict(state)


def test_train_on_batch_uses_discounted_returns() -> None:
    frames, _ = brightness_problem(n=4)
    rewards = torch.tensor([1.0, 0.0, 2.0, 3.0])
    episode_ids = torch.tensor([0, 0, 0, 1])
    batch = TurnBatch(
        episode_ids=episode_ids,
        turn_index=torch.tensor([0, 1, 2, 0]),
        levels=["1-1"] * 4,
        frames=frames,
        prompt_ids=[torch.tensor([1])] * 4,
        response_ids=[torch.tensor([2])] * 4,
        thought_mask=[torch.tensor([False])] * 4,
        action_mask=[torch.tensor([True])] * 4,
        behaviour_logprobs=[torch.tensor([-0.1])] * 4,
        rewards=rewards,
        terminated=torch.tensor([False, False, True, True]),
        truncated=torch.zeros(4, dtype=torch.bool),
    )
    settings = CriticSettings(**SMALL, minibatch_size=4)
    via_batch, direct = CriticTrainer(settings, seed=2), CriticTrainer(settings, seed=2)
    got = via_batch.train_on_batch(batch, gamma=0.5)
    want = direct.train_step(frames, discounted_return_to_go(rewards, episode_ids, 0.5))
    assert got["critic/loss"] == want["critic/loss"]
    # R = [1 + 0.5 * 1, 0 + 0.5 * 2, 2, 3] = [1.5, 1, 2, 3]
    assert got["critic/return_mean"] == pytest.approx(7.5 / 4)
