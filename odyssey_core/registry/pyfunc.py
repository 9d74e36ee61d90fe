"""Registered versions as real MLflow Models: a pyfunc flavour around a checkpoint folder.

A version of ``<prefix>-<game>`` is an MLflow Model (``MLmodel``, a signature, an input
example) whose artifacts are the HF checkpoint folder (``checkpoint``) and, where the
checkpoint has one, the critic / value head (``critic``). Its ``model_config`` is the
*serving spec*: which recipe answers (a name in :data:`odyssey_core.recipe.RECIPES`), the
response format that parses the answer and says what an unparsable one plays
(``odyssey_core.protocol.RESPONSE_FORMATS``), the system prompt the model was trained with, the
frame scaling and the generation defaults. So anything in the MLflow world
can use the champion::

    import mlflow
    model = mlflow.pyfunc.load_model("models:/odysseus-odland@champion")
    model.predict(pd.DataFrame([{"image": png_base64, "text": "Level 1-1. ..."}]))
    #   -> action ('["right", "a"]', a card action, or an ESPO GUI action as JSON), valid,
    #      text (the raw answer), recipe

    mlflow models serve -m "models:/odysseus-odland@champion" --env-manager local -p 5001

Input columns: ``image`` (a frame: base64 of PNG bytes; raw bytes or a ``uint8[H, W, 3]``
array work in Python), ``text`` (the task text, optional), ``game`` (optional, informative)
and ``legal_actions`` (optional JSON list of strings, what a GTR card game offers this
turn). Params: ``temperature`` (0: greedy), ``max_new_tokens``, ``seed``. The checkpoint is
loaded on the first ``predict`` (``load_context`` only reads the spec), on CPU unless the spec
says otherwise.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc

from odyssey_core.common.images import decode_image, encode_png
from odyssey_core.recipe import RECIPES, recipe_for_model

if TYPE_CHECKING:
    import pandas as pd

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

__all__ = [
    "MODEL_ARTIFACT_PATH",
    "OdysseyAgentModel",
    "encode_frame",
    "example_frame",
    "log_agent_model",
    "serving_spec",
]

MODEL_ARTIFACT_PATH = "model"  # under the stage run's artifacts
CHECKPOINT = "checkpoint"
CRITIC = "critic"
_CRITIC_NAMES = ("critic", "critic.safetensors", "value_head", "value_head.safetensors")


# -- the serving spec ---------------------------------------------------------------------------


def serving_spec(
    game: str,
    *,
    model_dir: str | Path | None = None,
    recipe: str | None = None,
    env: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
    image_scale: int | None = None,
    image_size: Sequence[int] | None = None,
    max_new_tokens: int = 256,
    device: str = "cpu",
    dtype: str = "float32",
) -> dict[str, Any]:
    """How a version answers: the recipe (``recipe``, else the one that claims a model of
    ``game`` in ``model_dir``: :func:`~odyssey_core.recipe.recipe_for_model`), its response
    format, the env it plays and the system prompt it was trained with (the recipe's)."""
    folder = None if model_dir is None else Path(model_dir)
    chosen = RECIPES.get(recipe) if recipe is not None else recipe_for_model(game, folder)
    env = env or chosen.serving_env(game, folder)
    prompt = system_prompt or chosen.system_prompt(env, dict(env_kwargs) if env_kwargs else None)
    return {
        "recipe": chosen.name,
        "game": game,
        "env": env,
        "format": chosen.response_format,
        "system_prompt": prompt,
        "image_scale": image_scale,
        "image_size": list(image_size) if image_size is not None else None,
        "max_new_tokens": int(max_new_tokens),
        "device": device,
        "dtype": dtype,
    }


# -- frames ------------------------------------------------------------------------------------


def encode_frame(image: Any) -> str:
    """A ``uint8[H, W, 3]`` frame (or a PIL image) as base64 PNG, the ``image`` column."""
    return base64.b64encode(encode_png(image)).decode("ascii")


def _decode_frame(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray) and value.ndim == 3:
        return np.ascontiguousarray(value.astype(np.uint8))
    if isinstance(value, str):
        value = base64.b64decode(value)
    if isinstance(value, bytes | bytearray):
        return decode_image(value)
    raise ValueError(
        f"image must be base64 PNG, PNG bytes or uint8[H, W, 3], got {type(value).__name__}"
    )


def example_frame(recipe: str) -> Any:
    """A small frame for the input example, the size of the recipe's screens."""
    import numpy as np

    shape = RECIPES.get(recipe).example_input.frame_shape
    frame = np.zeros(shape, np.uint8)
    frame[shape[0] // 2 :, :, 1] = 160  # something that is not a blank screen
    return frame


# -- the model ---------------------------------------------------------------------------------


def _legal(value: Any) -> list[str]:
    if value is None or (isinstance(value, float) and value != value):  # missing / NaN
        return []
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return []
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


class OdysseyAgentModel(mlflow.pyfunc.PythonModel):
    """One agent turn per input row: frame + task text -> the parsed action and the raw text."""

    def __init__(self) -> None:
        self._spec: dict[str, Any] = {}
        self._checkpoint: str | None = None
        self._policy: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # pickled without the loaded model or the lock
        return {"_spec": {}, "_checkpoint": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._policy = None
        self._lock = threading.Lock()

    def load_context(self, context: Any) -> None:
        self._spec = dict(context.model_config or {})
        self._checkpoint = context.artifacts[CHECKPOINT]

    def _load(self) -> Any:
        with self._lock:
            if self._policy is None:
                from odyssey_core.policy.hf import HFPolicy

                spec = self._spec
                size = spec.get("image_size")
                self._policy = HFPolicy(
                    Path(self._checkpoint or ""),
                    game=spec.get("env") or "odland",
                    system_prompt=spec.get("system_prompt"),
                    image_scale=spec.get("image_scale"),
                    image_size=tuple(size) if size else None,
                    dtype=spec.get("dtype") or "float32",
                    device=spec.get("device") or "cpu",
                )
                self._policy.model.eval()
            return self._policy

    def predict(
        self, context: Any, model_input: Any, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        import pandas as pd

        from odyssey_core.envs.base import Observation
        from odyssey_core.policy.base import GenerationParams
        from odyssey_core.protocol import RESPONSE_FORMATS

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        spec, params = self._spec, dict(params or {})
        if frame.empty:
            return pd.DataFrame(columns=["action", "valid", "text", "recipe"])
        rows = frame.to_dict(orient="records")
        observations = [
            Observation(image=_decode_frame(row["image"]), text=str(row.get("text") or ""))
            for row in rows
        ]
        generation = GenerationParams(
            temperature=float(params.get("temperature", 0.0)),
            max_new_tokens=int(params.get("max_new_tokens") or spec.get("max_new_tokens", 256)),
            seed=None if params.get("seed") is None else int(params["seed"]),
        )
        answers = self._load().generate(observations, generation)
        fmt = RESPONSE_FORMATS.get(spec["format"])
        out = []
        for row, answer in zip(rows, answers, strict=True):
            info = {"legal_actions": _legal(row.get("legal_actions"))}
            parsed = fmt.parse(answer.text, info)
            out.append(
                {
                    "action": fmt.serving_action(parsed, info),
                    "valid": bool(parsed.valid),
                    "text": answer.text,
                    "recipe": spec.get("recipe", ""),
                }
            )
        return pd.DataFrame(out, columns=["action", "valid", "text", "recipe"])


# -- logging -----------------------------------------------------------------------------------


def _signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

    inputs = Schema(
        [
            ColSpec("string", "image"),
            ColSpec("string", "text", required=False),
            ColSpec("string", "game", required=False),
            ColSpec("string", "legal_actions", required=False),
        ]
    )
    outputs = Schema(
        [
            ColSpec("string", "action"),
            ColSpec("boolean", "valid"),
            ColSpec("string", "text"),
            ColSpec("string", "recipe"),
        ]
    )
    params = ParamSchema(
        [
            ParamSpec("temperature", "double", 0.0),
            ParamSpec("max_new_tokens", "long", 256),
            ParamSpec("seed", "long", 0),
        ]
    )
    return ModelSignature(inputs=inputs, outputs=outputs, params=params)


def _input_example(spec: Mapping[str, Any]) -> Any:
    import pandas as pd

    example = RECIPES.get(spec["recipe"]).example_input
    row = {
        "image": encode_frame(example_frame(spec["recipe"])),
        "text": example.text,
        "game": spec["game"],
        "legal_actions": json.dumps(list(example.legal_actions)) if example.legal_actions else "",
    }
    return pd.DataFrame([row])


def _requirements() -> list[str]:
    from importlib import metadata

    reqs = []
    for dist in ("mlflow", "torch", "transformers", "pillow", "numpy", "pandas"):
        try:
            reqs.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            reqs.append(dist)
    return reqs


def find_critic(model_dir: str | Path) -> Path | None:
    """The critic / value head a checkpoint folder carries, if any."""
    for name in _CRITIC_NAMES:
        path = Path(model_dir) / name
        if path.exists():
            return path
    return None


def log_agent_model(
    client: Any,
    run_id: str,
    model_dir: str | Path,
    spec: Mapping[str, Any],
    *,
    critic: str | Path | None = None,
    artifact_path: str = MODEL_ARTIFACT_PATH,
) -> str:
    """Save the pyfunc model of ``model_dir`` and log it under run ``run_id`` (through
    ``client``, so no process-global active run is touched: stages may run in threads) at
    ``artifact_path``. Returns the model's artifact URI (the version's ``source``)."""
    critic = critic if critic is not None else find_critic(model_dir)
    artifacts = {CHECKPOINT: str(model_dir)}
    if critic is not None:
        artifacts[CRITIC] = str(critic)
    tmp = Path(tempfile.mkdtemp(prefix="odyssey-pyfunc-"))
    try:
        saved = tmp / artifact_path
        mlflow.pyfunc.save_model(
            str(saved),
            python_model=OdysseyAgentModel(),
            artifacts=artifacts,
            signature=_signature(),
            input_example=_input_example(spec),
            model_config=dict(spec),
            pip_requirements=_requirements(),
            metadata={"odyssey.recipe": spec["recipe"], "odyssey.game": spec["game"]},
        )
        client.log_artifacts(run_id, str(saved), artifact_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    run = client.get_run(run_id)
    return f"{run.info.artifact_uri.rstrip('/')}/{artifact_path}"
