"""The CNN critic's update per training step: shuffled minibatches (one optimiser step each),
or the public release's one full-batch step on the 144x160 frames after a 5-step warm-up."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.rl.critic import CriticTrainer
from odyssey_core.rl.settings import CriticSettings

torch.set_num_threads(1)
TURNS = 50


def frames_and_returns(n: int = TURNS, shape: tuple[int, int] = (36, 40)):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(n, *shape, 3), dtype=np.uint8)
    returns = torch.from_numpy(frames.mean(axis=(1, 2, 3))).float()  # brightness -> return
    return list(frames), returns


def counted_steps(critic: CriticTrainer) -> list[int]:
    calls: list[int] = []
    step = critic.optimizer.step

    def counting_step(*args, **kwargs):
        calls.append(1)
        return step(*args, **kwargs)

    critic.optimizer.step = counting_step  # type: ignore[method-assign]
    return calls


def small(**changes) -> CriticSettings:
    return CriticSettings(input_height=36, input_width=40, hidden_dim=16, **changes)


@pytest.mark.parametrize(
    ("update", "minibatch", "epochs", "expected"),
    [
        ("minibatches", 8, 1, math.ceil(TURNS / 8)),
        ("minibatches", 8, 3, 3 * math.ceil(TURNS / 8)),
        ("minibatches", 1000, 1, 1),
        ("full_batch", 8, 1, 1),
        ("full_batch", 8, 3, 3),
    ],
)
def test_optimiser_steps_per_fit(update: str, minibatch: int, epochs: int, expected: int) -> None:
    critic = CriticTrainer(small(update=update, minibatch_size=minibatch, epochs=epochs))
    calls = counted_steps(critic)
    frames, returns = frames_and_returns()
    metrics = critic.train_step(frames, returns)
    assert len(calls) == expected and metrics["critic/optimizer_steps"] == expected
    metrics = critic.train_step(frames, returns)
    assert len(calls) == 2 * expected


def test_a_full_batch_step_is_one_step_on_the_mean_loss_whatever_the_chunk() -> None:
    frames, returns = frames_and_returns()
    chunked = CriticTrainer(small(update="full_batch", minibatch_size=7), seed=1)
    whole = CriticTrainer(small(update="full_batch", minibatch_size=TURNS), seed=1)
    start = [p.detach().clone() for p in whole.network.parameters()]
    a, b = chunked.train_step(frames, returns), whole.train_step(frames, returns)
    assert a["critic/loss"] == pytest.approx(b["critic/loss"], rel=1e-5)
    assert a["critic/grad_norm"] == pytest.approx(b["critic/grad_norm"], rel=1e-4)
    moved = False
    for p, q, p0 in zip(
        chunked.network.parameters(), whole.network.parameters(), start, strict=True
    ):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)
        moved |= not torch.equal(q, p0)
    assert moved


def test_the_paper_preset_trains_the_critic_as_the_release_does() -> None:
    for name in ("paper", "zero"):
        critic_settings = load_train_settings(name).critic
        assert critic_settings.update == "full_batch" and critic_settings.warmup_steps == 5
        assert (critic_settings.input_height, critic_settings.input_width) == (144, 160)
    critic = CriticTrainer(critic_settings.model_copy(update={"device": "cpu"}))
    assert critic.network.input_size == (144, 160)
    # The Game Boy's own 144x160 frame goes in as it is: no resize.
    frames, returns = frames_and_returns(3, (144, 160))
    batch = torch.from_numpy(np.stack(frames))
    expected = batch.permute(0, 3, 1, 2).float() / 255.0
    assert torch.equal(critic.network.preprocess(batch), expected)
    assert [critic.actor_may_update(step) for step in range(7)] == [False] * 5 + [True] * 2
    calls = counted_steps(critic)
    assert critic.train_step(frames, returns)["critic/optimizer_steps"] == 1 and calls == [1]


def test_other_presets_keep_minibatches_as_an_option() -> None:
    for name in ("tiny", "compare"):
        assert load_train_settings(name).critic.update == "minibatches"
    with pytest.raises(ValueError, match="update"):
        CriticSettings(update="full")
