"""HFPolicy on the tiny Qwen3-VL: prompts, sampling, log-prob agreement, and token masks."""

from __future__ import annotations

import copy
from pathlib import Path

import model_fixtures
import pytest
import torch
from model_fixtures import make_observations

from odyssey_core.policy import (
    BACKENDS,
    GenerationParams,
    PolicyBackend,
    make_policy,
)
from odyssey_core.protocol import get_system_prompt

# Shared session fixtures (see tests/model_fixtures.py), bound here so pytest finds them.
tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy


TEXTS = [
    "Level 1-1. Look at the screen and choose the buttons to press next.",
    "Level 2-3, turn 17. Look at the screen and choose the buttons to press next.",
    "Go.",
]


def test_registry_builds_the_hf_backend(tiny_model_dir: Path) -> None:
    from odyssey_core.policy.hf import HFPolicy

    assert "hf" in BACKENDS and BACKENDS.get("hf") is HFPolicy
    policy = make_policy("hf", model=tiny_model_dir, game="mario")
    assert isinstance(policy, PolicyBackend)
    assert policy.system_prompt == get_system_prompt("mario")


def test_from_config_scales_frames(tiny_model_dir: Path) -> None:
    from odyssey_core.models.loading import ModelConfig
    from odyssey_core.policy.hf import HFPolicy

    policy = HFPolicy.from_config(ModelConfig(path=tiny_model_dir, image_scale=2), game="mario")
    [gen] = policy.generate(
        make_observations(["Go."], shape=(72, 80)), GenerationParams(max_new_tokens=1)
    )
    # 72x80 upscaled x2 is 144x160: the same 20 image tokens as a full-size frame.
    assert gen.prompt_ids.count(policy.image_token_id) == 20


def test_prompt_has_system_prompt_image_and_task(tiny_policy) -> None:
    [gen] = tiny_policy.generate(make_observations([TEXTS[1]]), GenerationParams(max_new_tokens=2))
    tokenizer = tiny_policy.tokenizer
    prompt = tokenizer.decode(gen.prompt_ids)
    assert prompt.startswith("<|im_start|>system\n" + get_system_prompt("odland") + "<|im_end|>")
    assert "<|vision_start|>" + "<|image_pad|>" * 20 + "<|vision_end|>" + TEXTS[1] in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert gen.prompt_ids.count(tokenizer.pad_token_id) == 0  # no padding left in
    assert gen.prompt_text.count("<|image_pad|>") == 1  # the text before image expansion


def _stop_token_for(responses: list[list[int]]) -> tuple[int, int]:
    """A token early in item 0 that item 1 never samples: (token, its first index in item 0)."""
    for token in responses[0][1:]:
        if token not in responses[1]:
            return token, responses[0].index(token)
    raise AssertionError("no usable stop token")


def test_generate_logprobs_match_score(tiny_policy) -> None:
    """The rollout log-probs equal the trainer's recomputation (different prompt lengths,
    different response lengths, some items ending at a stop token, images included)."""
    observations = make_observations(TEXTS, seed=1)
    params = GenerationParams(temperature=0.9, top_p=0.95, max_new_tokens=16, seed=7)
    first = tiny_policy.generate(observations, params)
    # Sampling per item is independent of where it stops, so a token item 0 drew early (and
    # item 1 never drew) turns the rerun into a prefix: item 0 stops there, item 1 runs on.
    stop_token, index = _stop_token_for([g.response_ids for g in first])
    stopped = params.model_copy(update={"stop_token_ids": (stop_token,)})
    gens = tiny_policy.generate(observations, stopped)

    assert len({len(g.prompt_ids) for g in gens}) == 3
    assert len({len(g.response_ids) for g in gens}) >= 2
    assert gens[0].finish_reason == "stop" and len(gens[0].response_ids) == index + 1
    assert gens[0].response_ids[-1] == stop_token
    assert gens[1].finish_reason == "length" and len(gens[1].response_ids) == 16
    for gen, before in zip(gens, first, strict=True):
        assert gen.response_ids == before.response_ids[: len(gen.response_ids)]

    scores = tiny_policy.score(
        [g.prompt_ids for g in gens],
        [g.response_ids for g in gens],
        [o.image for o in observations],
        temperature=0.9,
        micro_batch_size=2,  # batched differently from the rollout on purpose
    )
    for gen, score in zip(gens, scores, strict=True):
        assert score.shape == (len(gen.response_ids),)
        torch.testing.assert_close(score.detach(), torch.tensor(gen.logprobs), atol=1e-4, rtol=0)


def test_left_padding_does_not_change_an_item(tiny_policy) -> None:
    observations = make_observations(TEXTS, seed=2)
    for params in (
        GenerationParams(temperature=0.0, max_new_tokens=8),
        GenerationParams(temperature=1.0, max_new_tokens=8, seed=11),
    ):
        batch = tiny_policy.generate(observations, params)
        for i, obs in enumerate(observations):
            # Item i of a batch samples with seed + i; alone it is item 0.
            alone_params = (
                params
                if params.seed is None
                else params.model_copy(update={"seed": params.seed + i})
            )
            [alone] = tiny_policy.generate([obs], alone_params)
            assert alone.prompt_ids == batch[i].prompt_ids
            assert alone.response_ids == batch[i].response_ids
            torch.testing.assert_close(
                torch.tensor(alone.logprobs), torch.tensor(batch[i].logprobs), atol=1e-4, rtol=0
            )


def test_greedy_logprobs_are_at_temperature_one(tiny_policy) -> None:
    observations = make_observations(TEXTS[:2], seed=3)
    gens = tiny_policy.generate(observations, GenerationParams(temperature=0.0, max_new_tokens=5))
    scores = tiny_policy.score(
        [g.prompt_ids for g in gens],
        [g.response_ids for g in gens],
        [o.image for o in observations],
    )
    for gen, score in zip(gens, scores, strict=True):
        torch.testing.assert_close(score.detach(), torch.tensor(gen.logprobs), atol=1e-4, rtol=0)


def test_seeded_sampling_is_deterministic(tiny_policy) -> None:
    observations = make_observations(TEXTS, seed=4)
    params = GenerationParams(temperature=1.2, max_new_tokens=10, seed=5)
    a = tiny_policy.generate(observations, params)
    b = tiny_policy.generate(observations, params)
    c = tiny_policy.generate(observations, params.model_copy(update={"seed": 6}))
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]
    assert [g.response_ids for g in a] != [g.response_ids for g in c]


def test_max_new_tokens_and_generation_fields(tiny_policy) -> None:
    observations = make_observations(TEXTS, seed=5)
    gens = tiny_policy.generate(observations, GenerationParams(max_new_tokens=3, seed=0))
    for gen in gens:
        assert 1 <= len(gen.response_ids) <= 3 and len(gen.logprobs) == len(gen.response_ids)
        assert gen.finish_reason == ("length" if len(gen.response_ids) == 3 else "stop")
        assert all(lp <= 0.0 for lp in gen.logprobs)
        assert gen.text == tiny_policy.tokenizer.decode(gen.response_ids, skip_special_tokens=True)
        assert not hasattr(gen, "parsed")  # backends do not parse: RESPONSE_FORMATS does


def test_stops_at_im_end(tiny_policy) -> None:
    """Make <|im_end|> the greedy choice after a few tokens: generation ends right there."""
    observations = make_observations(TEXTS[:1], seed=6)
    [plain] = tiny_policy.generate(observations, GenerationParams(temperature=0, max_new_tokens=6))
    model = copy.deepcopy(tiny_policy.model)
    im_end = tiny_policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():  # im_end now scores 1.5x the token greedy picks at step 3
        model.lm_head.weight[im_end] = 1.5 * model.lm_head.weight[plain.response_ids[3]]
    policy = type(tiny_policy)(model, tiny_policy.processor)
    [gen] = policy.generate(observations, GenerationParams(temperature=0, max_new_tokens=6))
    assert gen.finish_reason == "stop"
    assert gen.response_ids[-1] == im_end and len(gen.response_ids) <= 4
    assert gen.response_ids[:-1] == plain.response_ids[: len(gen.response_ids) - 1]
    assert "<|im_end|>" not in gen.text


def test_stop_strings(tiny_policy) -> None:
    observations = make_observations(TEXTS[:1], seed=7)
    [plain] = tiny_policy.generate(observations, GenerationParams(temperature=0, max_new_tokens=12))
    text = plain.text
    stop = next(text[i : i + 2] for i in range(3, len(text) - 2) if text[i : i + 2].strip())
    [gen] = tiny_policy.generate(
        observations, GenerationParams(temperature=0, max_new_tokens=12, stop=(stop,))
    )
    assert gen.finish_reason == "stop" and stop in gen.text
    assert len(gen.response_ids) < len(plain.response_ids)


def test_score_carries_gradients(tiny_policy) -> None:
    observations = make_observations(TEXTS[:2], seed=8)
    gens = tiny_policy.generate(observations, GenerationParams(max_new_tokens=4, seed=1))
    tiny_policy.model.zero_grad()
    with torch.enable_grad():
        scores = tiny_policy.score(
            [g.prompt_ids for g in gens],
            [g.response_ids for g in gens],
            [o.image for o in observations],
            micro_batch_size=1,
        )
        torch.stack([s.sum() for s in scores]).sum().backward()
    assert all(s.requires_grad for s in scores)
    grad = tiny_policy.model.lm_head.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    tiny_policy.model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("bad", [{"temperature": -1.0}, {"top_p": 0.0}, {"max_new_tokens": 0}])
def test_generation_params_validate(bad: dict) -> None:
    with pytest.raises(ValueError):
        GenerationParams(**bad)


def test_a_tiny_top_p_keeps_the_top_token() -> None:
    """top_p rounds to 0 in float32 when tiny; the nucleus must still hold its top token."""
    from odyssey_core.policy.hf import HFPolicy

    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 5.0]])
    seen = torch.zeros_like(logits, dtype=torch.bool)
    params = GenerationParams(temperature=1.0, top_p=1e-300)
    generators = [torch.Generator().manual_seed(k) for k in range(2)]
    picked = HFPolicy._pick(logits, seen, params, generators)
    assert picked.tolist() == [1, 2]
