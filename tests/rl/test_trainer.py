"""The one training loop: micro-batching keeps one micro-batch of graphs alive and gives the
minibatch's exact gradient, for the token-level and the turn-level objective."""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import pytest
import torch

from odyssey_core.recipes.gtr.settings import load_gtr_settings
from odyssey_core.recipes.gtr.train import build_trainer as build_gtr
from odyssey_core.recipes.odysseus.settings import load_train_settings
from odyssey_core.recipes.odysseus.train import build_trainer as build_odysseus

torch.set_num_threads(1)
tiny_model_dir = model_fixtures.tiny_model_dir
REPO = Path(__file__).resolve().parents[2]


def gtr(tiny_model_dir: Path, out: Path, micro: int):
    settings = load_gtr_settings(
        REPO / "configs" / "gtr" / "tiny.yaml",
        {
            "model": {"path": str(tiny_model_dir)},
            "rollout": {"score_micro_batch": micro},
            "ppo": {"epochs": 1},
        },
    )
    return build_gtr(settings, out)


def odysseus(tiny_model_dir: Path, out: Path, micro: int):
    settings = load_train_settings(
        REPO / "configs" / "odysseus" / "tiny.yaml",
        {
            "model": {"path": str(tiny_model_dir)},
            "levels": ["odland-1-1"],
            "rollout": {
                "num_trajectories": 2,
                "max_turns": 2,
                "n_envs": 2,
                "score_micro_batch": micro,
                "generation": {"max_new_tokens": 8},
            },
            "ppo": {"minibatch_size": 4, "skip_zero_advantage": False, "lr": 1e-3},
            "critic": {"input_height": 36, "input_width": 40, "minibatch_size": 4},
        },
    )
    return build_odysseus(settings, out)


BUILDERS = {"turn_ppo (GTR)": gtr, "token_ppo (Odysseus)": odysseus}


def _instrument(trainer) -> list[tuple[str, int]]:
    """Log every scoring forward that builds a graph and every backward, in order."""
    events: list[tuple[str, int]] = []
    score, backward = trainer.policy.score, trainer.updater.backward

    def logged_score(prompts, *args, **kwargs):
        if torch.is_grad_enabled():
            events.append(("forward", len(prompts)))
        return score(prompts, *args, **kwargs)

    def logged_backward(loss, boundary):
        events.append(("backward", int(boundary)))
        return backward(loss, boundary)

    trainer.policy.score = logged_score
    trainer.updater.backward = logged_backward
    return events


@pytest.mark.parametrize("name", list(BUILDERS))
def test_each_micro_batch_is_backpropagated_before_the_next_is_scored(
    name: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer = BUILDERS[name](tiny_model_dir, tmp_path, micro=1)
    events = _instrument(trainer)
    metrics = trainer.train_step()
    trainer.close()
    assert metrics["actor/updates"] >= 1
    forwards = [n for kind, n in events if kind == "forward"]
    assert forwards and max(forwards) == 1  # never more than one micro-batch per forward
    for k, (kind, _) in enumerate(events):  # forward, backward, forward, backward ...
        if kind == "forward":
            assert events[k + 1][0] == "backward", events
    boundaries = sum(flag for kind, flag in events if kind == "backward")
    assert boundaries == metrics["actor/updates"]  # one gradient boundary per optimiser step


@pytest.mark.parametrize("name", list(BUILDERS))
def test_micro_batch_size_does_not_change_the_gradient(
    name: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The first optimiser step's accumulated gradient is the same whether the minibatch is
    scored one turn at a time or four at a time (token / turn weighting is exact)."""
    gradients = []
    for micro in (1, 4):
        trainer = BUILDERS[name](tiny_model_dir, tmp_path / str(micro), micro=micro)
        captured: list[torch.Tensor] = []
        step = trainer.updater.step

        def capture_then_step(step=step, captured=captured, params=trainer.updater.params):
            if not captured:
                captured.append(torch.cat([p.grad.flatten() for p in params if p.grad is not None]))
            return step()

        trainer.updater.step = capture_then_step
        trainer.train_step()
        trainer.close()
        gradients.append(captured[0])
    one, four = gradients
    assert one.abs().max() > 0
    # float32 sums in another order: equal up to rounding, relative to the gradient's size
    assert float((one - four).norm() / one.norm()) < 1e-5
