"""Value functions are chosen by name through VALUE_FUNCTIONS: each entry builds from the
same inputs and reads its own part of them; the recipes build theirs this way."""

from __future__ import annotations

from pathlib import Path

import model_fixtures
import pytest
import torch

from odyssey_core.common.registry import Registry, RegistryError
from odyssey_core.recipes.gtr import settings as gtr_settings
from odyssey_core.recipes.gtr.settings import GTRValueSettings, load_gtr_settings
from odyssey_core.recipes.gtr.train import build_trainer as build_gtr
from odyssey_core.rl import value_functions
from odyssey_core.rl.settings import CriticSettings
from odyssey_core.rl.value_functions import (
    VALUE_FUNCTIONS,
    CNNValue,
    ValueFunctionInputs,
    VLMHeadValue,
    make_value_function,
)

torch.set_num_threads(1)
tiny_model_dir = model_fixtures.tiny_model_dir
REPO = Path(__file__).resolve().parents[2]
SMALL = CriticSettings(input_height=36, input_width=36, hidden_dim=16, minibatch_size=4)


def test_an_unknown_name_lists_the_registered_ones() -> None:
    assert VALUE_FUNCTIONS.names() == ["cnn", "vlm_head"]
    with pytest.raises(RegistryError, match="unknown value function 'mlp'; known: cnn, vlm_head"):
        make_value_function("mlp", ValueFunctionInputs(None, seed=0, critic=SMALL))


def test_cnn_reads_the_critic_settings_the_seed_and_the_device() -> None:
    inputs = ValueFunctionInputs(None, seed=3, critic=SMALL, device="meta", head_hidden_dims=[7])
    value = make_value_function("cnn", inputs)
    assert isinstance(value, CNNValue) and not value.in_graph
    assert value.device == torch.device("meta")
    assert value.critic.settings.hidden_dim == 16
    seeded = [
        make_value_function("cnn", ValueFunctionInputs(None, seed=k, critic=SMALL))
        for k in (3, 3, 4)
    ]
    weights = [next(iter(v.critic.network.parameters())).detach() for v in seeded]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])


@pytest.mark.parametrize("source", ["cnn", "vlm_head"])
def test_gtr_builds_the_value_function_its_settings_name(
    source: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = load_gtr_settings(
        REPO / "configs" / "gtr" / "tiny.yaml",
        {
            "model": {"path": str(tiny_model_dir)},
            "value": {"source": source, "head_hidden_dims": [8], "scale": 2.0},
            "critic": {"input_height": 36, "input_width": 36, "hidden_dim": 16},
        },
    )
    value = build_gtr(settings, tmp_path).value_function
    if source == "cnn":
        assert isinstance(value, CNNValue) and value.critic.settings.hidden_dim == 16
    else:
        assert isinstance(value, VLMHeadValue) and value.head.scale == 2.0
        assert value.lr == settings.ppo.lr  # head_lr null: the policy's
        assert value.value_coef == settings.ppo.value_coef


def test_gtr_takes_any_value_function_registered_and_names_them_on_a_typo(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry: Registry = Registry("value function")
    for name in VALUE_FUNCTIONS.names():
        registry.register(name, VALUE_FUNCTIONS.get(name))

    def narrow_cnn(inputs: ValueFunctionInputs) -> CNNValue:
        return CNNValue(inputs.critic.model_copy(update={"hidden_dim": 8}), seed=inputs.seed)

    registry.register("narrow_cnn", narrow_cnn)
    monkeypatch.setattr(value_functions, "VALUE_FUNCTIONS", registry)
    monkeypatch.setattr(gtr_settings, "VALUE_FUNCTIONS", registry)
    settings = load_gtr_settings(
        REPO / "configs" / "gtr" / "tiny.yaml",
        {
            "model": {"path": str(tiny_model_dir)},
            "value": {"source": "narrow_cnn"},
            "critic": {"input_height": 36, "input_width": 36},
        },
    )
    value = build_gtr(settings, tmp_path).value_function
    assert isinstance(value, CNNValue) and value.critic.settings.hidden_dim == 8
    with pytest.raises(
        ValueError,
        match=r"value\.source 'cnnn' is not a registered value function; known: cnn, "
        r"narrow_cnn, vlm_head",
    ):
        GTRValueSettings(source="cnnn")
