"""How a policy answers during evaluation: the settings of the run that trained it.

The Odysseus paper evaluates with "the same set of hyperparameters in inference as in
training" (Appendix E.3). :class:`InferenceSettings` is that set (image scale or size, the
generation's max new tokens, temperature, top-p and repetition penalty, the model's device,
dtype and attention kernel), read from one place and never typed again:

* a recipe's training preset (:func:`load_inference`; an eval suite's are Odysseus RL presets,
  ``configs/odysseus/paper.yaml`` and so on): its ``model`` and ``rollout.generation``
  sections; the pipeline's evaluate stage, the nightly evaluation and the promotion gate use
  the pipeline's own RL preset;
* an RL checkpoint (:func:`checkpoint_inference`): the ``config.json`` saved beside its
  ``policy/`` folder is that run's settings;
* an eval suite's ``inference_from`` (a preset), for ``odyssey eval`` when neither is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from odyssey_core.config import StrictModel
from odyssey_core.policy.base import GenerationParams
from odyssey_core.recipe import RECIPES
from odyssey_core.rl.settings import ModelSettings

__all__ = [
    "InferenceSettings",
    "checkpoint_inference",
    "load_inference",
]

#: backends that take the model's device, dtype and attention kernel
LOCAL_BACKENDS = ("hf",)
#: whose training presets an eval suite's ``inference_from`` names: the suites play Game Boy
SUITE_RECIPE = "odysseus"


class InferenceSettings(StrictModel):
    """The inference half of a training preset."""

    image_scale: int | None = Field(default=None, ge=1, description="paper: x8")
    image_size: tuple[int, int] | None = None
    max_new_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    repetition_penalty: float = Field(default=1.0, gt=0)
    dtype: str = "float32"
    device: str = "cpu"
    attn_implementation: str = "sdpa"
    source: str = Field(default="defaults", description="where these came from")

    @classmethod
    def from_parts(
        cls, model: ModelSettings, generation: GenerationParams, source: str
    ) -> InferenceSettings:
        return cls(
            image_scale=model.image_scale,
            image_size=model.image_size,
            max_new_tokens=generation.max_new_tokens,
            temperature=generation.temperature,
            top_p=generation.top_p,
            repetition_penalty=generation.repetition_penalty,
            dtype=model.dtype,
            device=model.device,
            attn_implementation=model.attn_implementation,
            source=source,
        )

    @classmethod
    def from_training(cls, settings: Any, source: str = "training settings") -> InferenceSettings:
        """From RL run settings with ``model`` and ``rollout.generation`` (``RLTrainSettings``)."""
        return cls.from_parts(settings.model, settings.rollout.generation, source)

    def generation(self) -> GenerationParams:
        return GenerationParams(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            repetition_penalty=self.repetition_penalty,
        )

    def backend_kwargs(self, backend: str) -> dict[str, Any]:
        """Constructor arguments of policy backend ``backend`` (``hf``, ``openai``, ...)."""
        kwargs: dict[str, Any] = {"image_scale": self.image_scale, "image_size": self.image_size}
        if backend in LOCAL_BACKENDS:
            kwargs.update(
                dtype=self.dtype, device=self.device, attn_implementation=self.attn_implementation
            )
        return kwargs


def load_inference(
    preset: str | Path,
    overrides: dict[str, Any] | None = None,
    *,
    recipe: str = SUITE_RECIPE,
) -> InferenceSettings:
    """The inference settings of ``recipe``'s training preset (a name under
    ``configs/<recipe>/`` or a YAML path) with nested ``overrides``, as the recipe loads it."""
    settings = RECIPES.get(recipe).load_settings(preset, overrides)
    return InferenceSettings.from_training(settings, source=f"RL preset {preset}")


def checkpoint_inference(model_dir: str | Path) -> InferenceSettings | None:
    """The inference settings saved with an RL checkpoint: ``model_dir`` is its ``policy/``
    folder (or the checkpoint folder itself); ``None`` when there is no readable run config."""
    folder = Path(model_dir)
    # policy/config.json is the model's own (no "rollout" in it): the run's is one folder up
    for candidate in (folder / "config.json", folder.parent / "config.json"):
        if not candidate.is_file():
            continue
        try:
            data = json.loads(candidate.read_text())
            model = ModelSettings.model_validate(data["model"])
            generation = GenerationParams.model_validate(data["rollout"]["generation"])
        except (json.JSONDecodeError, KeyError, TypeError, ValidationError):
            continue
        return InferenceSettings.from_parts(model, generation, f"checkpoint {candidate}")
    return None
