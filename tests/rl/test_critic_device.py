"""The CNN critic runs where it is told: its own setting, else the device it is given (the
policy's), else the CPU; a CUDA request on a machine without CUDA is a clear error; its state
dicts are CPU tensors that load onto any device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from odyssey_core.rl.critic import CriticTrainer, resolve_device
from odyssey_core.rl.settings import CriticSettings
from odyssey_core.rl.value_functions import CNNValue

SMALL = {"input_height": 36, "input_width": 36, "hidden_dim": 16, "minibatch_size": 4}


def frames_for(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (40, 44, 3), dtype=np.uint8) for _ in range(n)]


def test_the_device_comes_from_the_settings_then_the_caller_then_the_cpu() -> None:
    assert CriticTrainer(CriticSettings(**SMALL)).device == torch.device("cpu")
    assert CriticTrainer(CriticSettings(**SMALL), device="meta").device == torch.device("meta")
    own = CriticTrainer(CriticSettings(**SMALL, device="cpu"), device="meta")
    assert own.device == torch.device("cpu")
    value = CNNValue(CriticSettings(**SMALL), device="meta")
    assert value.device == torch.device("meta")
    assert {p.device.type for p in value.critic.network.parameters()} == {"meta"}


def test_frames_reach_the_network_on_its_device_a_chunk_at_a_time() -> None:
    critic = CriticTrainer(CriticSettings(**SMALL, predict_chunk=3), seed=0)
    seen: list[tuple[torch.device, torch.dtype, int]] = []
    critic.network.register_forward_pre_hook(
        lambda _m, args: seen.append((args[0].device, args[0].dtype, args[0].shape[0]))
    )
    values = critic.predict(frames_for(7))
    assert values.shape == (7,) and values.device == torch.device("cpu")
    # uint8 crosses to the device; the float conversion happens there, inside the network
    assert seen == [(torch.device("cpu"), torch.uint8, k) for k in (3, 3, 1)]
    seen.clear()
    critic.train_step(frames_for(7), torch.linspace(0, 10, 7))
    assert [k for _, _, k in seen] == [4, 3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match=rf"'{name}'.*set critic.device to 'cpu'"):
        CriticTrainer(CriticSettings(**SMALL, device=name))
    with pytest.raises(ValueError, match="CUDA"):
        CNNValue(CriticSettings(**SMALL), device=name)
    with pytest.raises(ValueError, match="CUDA"):
        resolve_device(name)
    assert resolve_device("cpu") == torch.device("cpu")


def test_state_dict_is_on_the_cpu_and_resumes_exactly() -> None:
    settings = CriticSettings(**SMALL)
    frames, returns = frames_for(8), torch.linspace(0, 30, 8)
    first = CriticTrainer(settings, seed=1)
    first.train_step(frames, returns)
    state = first.state_dict()
    tensors = [*state["network"].values()] + [
        v for s in state["optimizer"]["state"].values() for v in s.values()
    ]
    assert tensors and all(t.device == torch.device("cpu") for t in tensors)

    resumed = CriticTrainer(settings, seed=99)
    resumed.load_state_dict(state)
    first.train_step(frames, returns)
    resumed.train_step(frames, returns)
    for a, b in zip(first.network.parameters(), resumed.network.parameters(), strict=True):
        assert torch.equal(a, b)
