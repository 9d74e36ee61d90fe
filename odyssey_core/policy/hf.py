"""A local transformers policy: Qwen-VL sampling with exact per-token log-probabilities.

Generation is our own loop over the model's forward with a KV cache rather than
``model.generate``, for three reasons: the log-prob of each sampled token is taken from the
same logits the token was drawn from (see ``odyssey_core.policy.base`` for the convention);
each batch item samples from its own seeded generator, so an item's answer does not depend on
what else is in the batch; and the M-RoPE positions are computed once, explicitly, the same
way :meth:`HFPolicy.score` computes them, so rollout and training log-probs agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from odyssey_core.envs.base import Observation
from odyssey_core.models.loading import ModelConfig, load_model, load_processor
from odyssey_core.policy.base import (
    Generation,
    GenerationParams,
    PolicyBackend,
    TurnPrompt,
    turn_messages,
)

__all__ = ["HFPolicy"]

END_OF_TURN = "<|im_end|>"


class HFPolicy(PolicyBackend, TurnPrompt):
    """Runs a local Qwen-VL checkpoint (Qwen3-VL or Qwen2.5-VL) with transformers.

    ``model`` is a checkpoint folder (loaded with :func:`load_model`/:func:`load_processor`)
    or an already loaded model, in which case ``processor`` is required too (e.g. a model
    wrapped with LoRA). Frames are resized by ``image_scale`` / ``image_size`` (see
    :func:`~odyssey_core.models.processor.prepare_frame`) before the processor sees them.
    """

    def __init__(
        self,
        model: str | Path | torch.nn.Module,
        processor: Any = None,
        *,
        game: str = "odland",
        system_prompt: str | None = None,
        image_scale: int | None = None,
        image_size: tuple[int, int] | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        attn_implementation: str | None = "sdpa",
    ) -> None:
        if isinstance(model, str | Path):
            self.model = load_model(
                model, dtype=dtype, device=device, attn_implementation=attn_implementation
            )
            self.processor = processor if processor is not None else load_processor(model)
        else:
            if processor is None:
                raise ValueError("pass the processor together with an already loaded model")
            self.model, self.processor = model, processor
        self.set_turn_prompt(game, system_prompt, image_scale, image_size)

        tokenizer = self.processor.tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.image_token_id = int(self.model.config.image_token_id)
        self.video_token_id = int(getattr(self.model.config, "video_token_id", -1))
        # End of turn: <|im_end|>, plus whatever the checkpoint declares as eos.
        eos: set[int] = set()
        im_end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
            eos.add(im_end)
        for source in (getattr(self.model, "generation_config", None), self.model.config):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            eos.update([value] if isinstance(value, int) else (value or []))
        if tokenizer.eos_token_id is not None:
            eos.add(tokenizer.eos_token_id)
        self.eos_ids = frozenset(eos)
        # Vision placeholders are never sampled: in a response they would be mistaken for image
        # slots when the sequence is fed back. (The log-prob normaliser still covers them.)
        config = self.model.config
        banned = [
            getattr(config, k, None) for k in ("vision_start_token_id", "vision_end_token_id")
        ]
        banned += [self.image_token_id, self.video_token_id]
        self.banned_ids = sorted({int(i) for i in banned if i is not None and i >= 0})

    @classmethod
    def for_evaluation(
        cls,
        model_dir: str | Path,
        system_prompt: str,
        *,
        image_size: tuple[int, int] | None = None,
        image_scale: int | None = None,
        dtype: str = "float32",
        device: str = "cpu",
    ) -> HFPolicy:
        """A policy on a plain model folder, in eval mode, answering under ``system_prompt``."""
        policy = cls(
            Path(model_dir),
            system_prompt=system_prompt,
            image_size=image_size,
            image_scale=image_scale,
            dtype=dtype,
            device=device,
        )
        policy.model.eval()
        return policy

    @classmethod
    def from_config(
        cls, config: ModelConfig, *, game: str = "odland", system_prompt: str | None = None
    ) -> HFPolicy:
        """Build from a :class:`~odyssey_core.models.loading.ModelConfig` section."""
        return cls(
            config.path,
            game=game,
            system_prompt=system_prompt,
            image_scale=config.image_scale,
            image_size=config.image_size,
            dtype=config.dtype,
            device=config.device,
            attn_implementation=config.attn_implementation,
        )

    # ----------------------------------------------------------------------------- prompts
    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(p.dtype for p in self.model.parameters() if p.is_floating_point())

    def _vl_model(self) -> Any:
        """The inner ``Qwen*VLModel`` (it owns ``get_rope_index``), under any PEFT wrapper."""
        model = self.model
        if hasattr(model, "get_base_model"):  # a PEFT model
            model = model.get_base_model()
        return model.model

    def prepare_images(self, images: Sequence[np.ndarray | Image.Image]) -> list[Image.Image]:
        return [self.prepare_image(im) for im in images]

    def messages(self, observation: Observation) -> list[dict[str, Any]]:
        """The chat for one turn: system prompt, then the frame and the task text."""
        return turn_messages(self.system_prompt, observation.text)

    def prompt_text(self, observation: Observation) -> str:
        return self.processor.apply_chat_template(
            self.messages(observation), tokenize=False, add_generation_prompt=True
        )

    def encode(
        self, observations: Sequence[Observation]
    ) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Left-padded model inputs for a batch of observations, and the prompt texts."""
        texts = [self.prompt_text(obs) for obs in observations]
        frames = self.prepare_images([obs.image for obs in observations])
        batch = self.processor(
            text=texts, images=frames, padding=True, padding_side="left", return_tensors="pt"
        )
        return {k: v.to(self.device) for k, v in batch.items()}, texts

    # ----------------------------------------------------------------------------- helpers
    def _mm_token_type_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        kinds = (input_ids == self.image_token_id).int()
        return kinds + 2 * (input_ids == self.video_token_id).int()

    def _positions(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """M-RoPE positions ``[3, B, L]`` for a padded batch (padding gets dummy positions)."""
        positions, _ = self._vl_model().get_rope_index(
            inputs["input_ids"],
            mm_token_type_ids=inputs["mm_token_type_ids"],
            image_grid_thw=inputs.get("image_grid_thw"),
            attention_mask=inputs["attention_mask"],
        )
        return positions

    def _forward(
        self, inputs: dict[str, torch.Tensor], positions: torch.Tensor | None = None, **kwargs: Any
    ) -> Any:
        """A full forward over prompts (+ responses) with images and explicit positions."""
        return self.model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            position_ids=self._positions(inputs) if positions is None else positions,
            pixel_values=inputs["pixel_values"].to(self.dtype),
            image_grid_thw=inputs["image_grid_thw"],
            mm_token_type_ids=inputs["mm_token_type_ids"],
            **kwargs,
        )

    # ----------------------------------------------------------------------------- sampling
    @torch.no_grad()
    def generate(
        self, observations: Sequence[Observation], params: GenerationParams | None = None
    ) -> list[Generation]:
        """Sample one answer per observation; stops at end of turn or ``max_new_tokens``."""
        params = params or GenerationParams()
        if not observations:
            return []
        was_training = self.model.training
        self.model.eval()  # rollouts never use dropout
        try:
            return self._generate(list(observations), params)
        finally:
            self.model.train(was_training)

    def _generate(
        self, observations: list[Observation], params: GenerationParams
    ) -> list[Generation]:
        inputs, texts = self.encode(observations)
        inputs["mm_token_type_ids"] = self._mm_token_type_ids(inputs["input_ids"])
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        batch_size, device = input_ids.shape[0], input_ids.device
        vocab = self.model.config.get_text_config().vocab_size
        temperature = 1.0 if params.greedy else params.temperature
        eos_ids = self.eos_ids | set(params.stop_token_ids)

        # One generator per item (seed + index), so an item's sample is independent of the
        # batch it runs in.
        generators: list[torch.Generator | None] = []
        for i in range(batch_size):
            if params.seed is None:
                generators.append(None)
            else:
                generators.append(torch.Generator(device=device).manual_seed(params.seed + i))

        # Tokens already seen, for the repetition penalty (prompt included, as transformers does).
        seen = torch.zeros(batch_size, vocab, dtype=torch.bool, device=device)
        if params.repetition_penalty != 1.0:
            for b in range(batch_size):
                seen[b, input_ids[b][attention_mask[b].bool()].clamp(max=vocab - 1)] = True

        if not bool(attention_mask[:, -1].all()):  # the loop below relies on left padding
            raise RuntimeError("the processor did not left-pad the prompts")
        positions = self._positions(inputs)
        next_position = positions[0, :, -1] + 1  # the prompt ends in text: all 3 rows agree
        out = self._forward(inputs, positions, use_cache=True, logits_to_keep=1)
        cache = out.cache

        responses: list[list[int]] = [[] for _ in range(batch_size)]
        logprobs: list[list[float]] = [[] for _ in range(batch_size)]
        finish: list[str | None] = [None] * batch_size
        for step in range(params.max_new_tokens):
            logits = out.logits[:, -1, :vocab].float()
            token_logprobs = F.log_softmax(logits / temperature, dim=-1)
            tokens = self._pick(logits, seen, params, generators, self.banned_ids)
            chosen = token_logprobs.gather(1, tokens[:, None])[:, 0]

            active = [b for b in range(batch_size) if finish[b] is None]
            for b in active:
                token = int(tokens[b])
                responses[b].append(token)
                logprobs[b].append(float(chosen[b]))
                if token in eos_ids or self._hit_stop_string(responses[b], params.stop):
                    finish[b] = "stop"
                elif step + 1 == params.max_new_tokens:
                    finish[b] = "length"
            if all(f is not None for f in finish):
                break

            # Finished rows keep decoding padding; their outputs are ignored.
            done = torch.tensor([f is not None for f in finish], device=device)
            tokens = torch.where(done, torch.full_like(tokens, self.pad_id), tokens)
            if params.repetition_penalty != 1.0:
                seen[torch.arange(batch_size, device=device), tokens] = True
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], 1)
            step_positions = next_position.view(1, batch_size, 1).expand(3, batch_size, 1)
            out = self.model(
                input_ids=tokens[:, None],
                attention_mask=attention_mask,
                position_ids=step_positions,
                cache=cache,
                use_cache=True,
            )
            cache = out.cache
            next_position = next_position + 1

        results = []
        for b in range(batch_size):
            prompt = input_ids[b][inputs["attention_mask"][b].bool()].tolist()
            text = self.tokenizer.decode(responses[b], skip_special_tokens=True)
            results.append(
                Generation(
                    text=text,
                    prompt_ids=prompt,
                    response_ids=responses[b],
                    logprobs=logprobs[b],
                    finish_reason=finish[b] or "length",
                    prompt_text=texts[b],
                )
            )
        return results

    @staticmethod
    def _pick(
        logits: torch.Tensor,
        seen: torch.Tensor,
        params: GenerationParams,
        generators: list[torch.Generator | None],
        banned_ids: Sequence[int] = (),
    ) -> torch.Tensor:
        """The next token per row: penalty, then greedy or temperature + top-p sampling."""
        if banned_ids:
            logits = logits.clone()
            logits[:, list(banned_ids)] = float("-inf")
        if params.repetition_penalty != 1.0:
            penalised = torch.where(
                logits > 0, logits / params.repetition_penalty, logits * params.repetition_penalty
            )
            logits = torch.where(seen, penalised, logits)
        if params.greedy:
            return logits.argmax(dim=-1)
        probs = F.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # Drop a token when the mass before it already reaches top_p. The top one always
            # stays: a tiny top_p rounds to 0 in float32, where the comparison would drop it too.
            drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= params.top_p
            drop[:, 0] = False
            sorted_probs = sorted_probs.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(1, order, sorted_probs)
        tokens = [
            torch.multinomial(probs[b], 1, generator=generators[b]) for b in range(probs.shape[0])
        ]
        return torch.cat(tokens)

    def _hit_stop_string(self, response: list[int], stops: tuple[str, ...]) -> bool:
        if not stops:
            return False
        # Only the tail can newly contain a stop string; decode a window that covers it.
        window = max(len(s) for s in stops) + 8
        tail = self.tokenizer.decode(response[-window:], skip_special_tokens=True)
        return any(s in tail for s in stops)

    # ----------------------------------------------------------------------------- scoring
    def score(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        images: Sequence[np.ndarray | Image.Image],
        temperature: float = 1.0,
        micro_batch_size: int = 4,
        entropies: list[torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        """Log-probs ``log_softmax(logits / T)[token]`` of each response token given its prompt.

        The same quantity ``generate`` reports (``temperature=0`` is read as 1, as there).
        Runs in micro-batches of ``micro_batch_size`` items; under ``torch.enable_grad`` with
        trainable weights the returned tensors (float32, one per item) carry gradients.
        When a list is passed as ``entropies``, it receives each item's exact per-token
        entropy ``-sum_v p_v log p_v`` of the same distribution (with gradients): an entropy
        bonus needs the full distribution, not the sampled tokens' log-probs.
        """
        if not len(prompt_ids) == len(response_ids) == len(images):
            raise ValueError("prompt_ids, response_ids and images must have the same length")
        temperature = 1.0 if temperature == 0 else temperature
        results: list[torch.Tensor] = []
        for start in range(0, len(prompt_ids), max(1, micro_batch_size)):
            stop = start + max(1, micro_batch_size)
            results.extend(
                self._score_batch(
                    prompt_ids[start:stop],
                    response_ids[start:stop],
                    images[start:stop],
                    temperature,
                    entropies,
                )
            )
        return results

    def _score_batch(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        images: Sequence[np.ndarray | Image.Image],
        temperature: float,
        entropies: list[torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        device = self.device
        sequences = [list(p) + list(r) for p, r in zip(prompt_ids, response_ids, strict=True)]
        length = max(len(s) for s in sequences)
        # Left padding puts every response at the end, so only the last logits are needed.
        input_ids = torch.full((len(sequences), length), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
        for b, seq in enumerate(sequences):
            input_ids[b, length - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            attention_mask[b, length - len(seq) :] = 1
        pixels = self.processor.image_processor(self.prepare_images(images), return_tensors="pt")
        inputs = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention_mask.to(device),
            "pixel_values": pixels["pixel_values"].to(device),
            "image_grid_thw": pixels["image_grid_thw"].to(device),
        }
        # Only prompt tokens can be image slots; mask the responses out of the type ids.
        in_prompt = torch.zeros_like(attention_mask, dtype=torch.bool)
        for b, (p, r) in enumerate(zip(prompt_ids, response_ids, strict=True)):
            in_prompt[b, length - len(p) - len(r) : length - len(r)] = True
        type_ids = self._mm_token_type_ids(inputs["input_ids"]) * in_prompt.to(device)
        inputs["mm_token_type_ids"] = type_ids

        longest = max(len(r) for r in response_ids)
        # Logits at position t predict token t + 1: keep one more than the longest response.
        out = self._forward(inputs, use_cache=False, logits_to_keep=longest + 1)
        vocab = self.model.config.get_text_config().vocab_size
        logits = out.logits[:, :-1, :vocab].float() / temperature  # [B, longest, V]
        token_logprobs = F.log_softmax(logits, dim=-1)

        results = []
        for b, response in enumerate(response_ids):
            n = len(response)
            if n == 0:
                results.append(token_logprobs.new_zeros(0))
                continue
            targets = torch.tensor(list(response), dtype=torch.long, device=device)
            rows = token_logprobs[b, longest - n :]
            results.append(rows.gather(1, targets[:, None])[:, 0])
        if entropies is not None:
            for b, response in enumerate(response_ids):
                n = len(response)
                rows = token_logprobs[b, longest - n :] if n else token_logprobs.new_zeros(0, 1)
                entropies.append(-(rows.exp() * rows).sum(dim=-1))
        return results
