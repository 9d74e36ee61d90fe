"""Correctors by name (``CORRECTORS``), their arguments in a preset (``CORRECTOR_SETTINGS``),
and the functions that check, build and describe the corrector a preset names."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field, ValidationError

from odyssey_core.common.registry import Registry
from odyssey_core.config import StrictModel
from odyssey_core.recipes.gtr.corrector.base import Corrector
from odyssey_core.recipes.gtr.corrector.noisy import NoisyProgrammaticCorrector
from odyssey_core.recipes.gtr.corrector.programmatic import ProgrammaticCorrector
from odyssey_core.recipes.gtr.corrector.vlm import OpenAICorrector

__all__ = [
    "CORRECTORS",
    "CORRECTOR_SETTINGS",
    "NO_CORRECTOR",
    "CorrectorConfigError",
    "NoArguments",
    "NoisyCorrectorSettings",
    "OpenAICorrectorSettings",
    "build_corrector",
    "check_corrector",
    "describe_corrector",
    "make_corrector",
    "split_corrector_spec",
    "validate_corrector_kwargs",
]

CORRECTORS: Registry[Callable[..., Corrector]] = Registry("corrector")
CORRECTORS.register("programmatic", ProgrammaticCorrector)
CORRECTORS.register("openai", OpenAICorrector)
CORRECTORS.register("noisy_programmatic", NoisyProgrammaticCorrector)
CORRECTORS.register("alfworld", "odyssey_core.recipes.gtr.corrector.alfworld:AlfWorldCorrector")

NO_CORRECTOR = "none"  # a run without a corrector (the RL4VLM baseline)


class CorrectorConfigError(ValueError):
    """A corrector's settings are incomplete or wrong; the message names the setting."""


class NoArguments(StrictModel):
    """The arguments of a corrector that takes none (the programmatic oracles)."""

    def resolve(self, where: str, environ: Mapping[str, str]) -> dict[str, Any]:
        return {}


class NoisyCorrectorSettings(StrictModel):
    """The ``noisy_programmatic`` corrector's arguments in a preset."""

    error_rate: float = Field(
        default=0.2, ge=0, le=1, description="the share of corrections given wrong, in [0, 1]"
    )
    seed: int = Field(default=0, description="seeds the draws of which corrections go wrong")

    def resolve(self, where: str, environ: Mapping[str, str]) -> dict[str, Any]:
        return {"error_rate": self.error_rate, "seed": self.seed}


class OpenAICorrectorSettings(StrictModel):
    """The ``openai`` corrector's arguments in a preset. A setting with an ``*_env`` twin is
    read from that environment variable when it is set (so a deployment can point a preset
    at its own server), else from the preset; the key only ever comes from the environment."""

    model: str | None = Field(default=None, description="the served model (the paper: gpt-4o)")
    model_env: str | None = Field(
        default=None, description="an environment variable that, when set, names the model"
    )
    base_url: str | None = Field(
        default=None,
        description="the API root: https://api.openai.com/v1, http://<host>:8000/v1 (vLLM)",
    )
    base_url_env: str | None = Field(
        default=None, description="an environment variable that, when set, gives the API root"
    )
    api_key_env: str | None = Field(
        default="OPENAI_API_KEY",
        description="the environment variable holding the API key; null: a server without keys",
    )
    temperature: float = Field(default=0.4, ge=0, description="GTR Table 2: 0.4")
    max_tokens: int = Field(default=600, ge=1, description="GTR Table 2: 600")
    max_tool_rounds: int = Field(default=3, ge=0, description="solve24 calls per correction")
    use_tools: bool = Field(default=True, description="offer solve24 in the formula games")
    timeout: float = Field(default=120.0, gt=0, description="seconds per request attempt")
    max_retries: int = Field(default=6, ge=0, description="retries of a failed request")
    max_total_wait: float = Field(default=300.0, ge=0, description="backoff budget per request")

    def _pick(self, name: str, environ: Mapping[str, str]) -> str | None:
        variable = getattr(self, f"{name}_env")
        value = environ.get(variable) if variable else None
        return value or getattr(self, name)

    def resolve(self, where: str, environ: Mapping[str, str]) -> dict[str, Any]:
        """The corrector's keyword arguments; a missing setting is a CorrectorConfigError that
        names it."""
        from odyssey_core.policy.openai_backend import RetrySettings

        def missing(name: str, what: str) -> CorrectorConfigError:
            variable = getattr(self, f"{name}_env")
            via = f" (or the environment variable {variable}, which is not set)" if variable else ""
            return CorrectorConfigError(f"the openai corrector needs {where}.{name}{via}: {what}")

        model = self._pick("model", environ)
        if not model:
            raise missing("model", "the served model's name (the paper's corrector is gpt-4o)")
        base_url = self._pick("base_url", environ)
        if not base_url:
            raise missing(
                "base_url",
                "the OpenAI-compatible API root, e.g. https://api.openai.com/v1 or "
                "http://<host>:8000/v1",
            )
        if self.api_key_env and not environ.get(self.api_key_env):
            raise CorrectorConfigError(
                f"the openai corrector reads its API key from the environment variable "
                f"{self.api_key_env} ({where}.api_key_env), which is not set: export it, or "
                f"set {where}.api_key_env: null for a server that needs no key"
            )
        return {
            "model": model,
            "base_url": base_url,
            "api_key_env": self.api_key_env,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "max_tool_rounds": self.max_tool_rounds,
            "use_tools": self.use_tools,
            "timeout": self.timeout,
            "retry": RetrySettings(
                max_retries=self.max_retries, max_total_wait=self.max_total_wait
            ),
        }


# A corrector's arguments are validated with its settings model when a preset is loaded;
# one without an entry here takes its keyword arguments unchecked.
CORRECTOR_SETTINGS: dict[str, type[StrictModel]] = {
    "programmatic": NoArguments,
    "alfworld": NoArguments,
    "openai": OpenAICorrectorSettings,
    "noisy_programmatic": NoisyCorrectorSettings,
}


def split_corrector_spec(
    data: Any, key: str = "corrector", kwargs_key: str = "corrector_kwargs"
) -> Any:
    """A settings section with ``key: {name: ..., <arguments>}`` as ``key: name`` plus
    ``kwargs_key: {<arguments>}`` (both spellings are accepted in presets)."""
    if not isinstance(data, Mapping) or not isinstance(data.get(key), Mapping):
        return data
    spec = dict(data[key])
    if "name" not in spec:
        raise ValueError(f"{key} given as a mapping needs a 'name' (e.g. openai)")
    if data.get(kwargs_key):
        raise ValueError(f"give the corrector's arguments in {key} or in {kwargs_key}, not both")
    name = spec.pop("name")
    return {**data, key: name, kwargs_key: spec}


def validate_corrector_kwargs(name: str, kwargs: Mapping[str, Any], where: str) -> None:
    """The checks a preset load can make: a known name and well-formed arguments (settings
    that come from the environment are checked by :func:`check_corrector`)."""
    if name == NO_CORRECTOR:
        if kwargs:
            raise ValueError(f"{where}: {NO_CORRECTOR!r} takes no arguments")
        return
    if name not in CORRECTORS:
        raise ValueError(
            f"{where}: unknown corrector {name!r}; known: "
            f"{', '.join([*CORRECTORS.names(), NO_CORRECTOR])}"
        )
    model = CORRECTOR_SETTINGS.get(name)
    if model is not None:
        try:
            model.model_validate(dict(kwargs))
        except ValidationError as err:
            raise ValueError(f"{where} ({name}): {err}") from None


def check_corrector(
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    where: str = "rollout.corrector",
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments the corrector will be built with; raises CorrectorConfigError
    naming the first missing or wrong setting. Cheap (no client, no request): call it before
    any work."""
    environ = os.environ if environ is None else environ
    kwargs = dict(kwargs or {})
    if name == NO_CORRECTOR:
        validate_corrector_kwargs(name, kwargs, where)
        return {}
    try:
        validate_corrector_kwargs(name, kwargs, where)
    except ValueError as err:
        raise CorrectorConfigError(str(err)) from None
    model = CORRECTOR_SETTINGS.get(name)
    if model is None:
        return kwargs
    return model.model_validate(kwargs).resolve(where, environ)  # type: ignore[attr-defined]


def build_corrector(
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    where: str = "rollout.corrector",
    environ: Mapping[str, str] | None = None,
    **extra: Any,
) -> Corrector | None:
    """The corrector a preset names (None for ``none``), its arguments resolved by
    :func:`check_corrector`; ``extra`` goes to its constructor as is (a test's ``client``)."""
    resolved = check_corrector(name, kwargs, where=where, environ=environ)
    if name == NO_CORRECTOR:
        return None
    return CORRECTORS.get(name)(**resolved, **extra)


def describe_corrector(
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a report says about a corrector: its name, whether it is an oracle, its model
    (the one ``resolved`` by :func:`check_corrector` when given, else as configured, naming
    the variable it is read from) and one line of text."""
    kwargs = dict(kwargs or {})
    if name == NO_CORRECTOR:
        return {"name": name, "oracle": False, "model": None, "label": "no corrector"}
    oracle = bool(getattr(CORRECTORS.get(name), "oracle", False))
    model = kwargs.get("model")
    if kwargs.get("model_env"):
        model = f"${kwargs['model_env']} or {model}" if model else f"${kwargs['model_env']}"
    if resolved and resolved.get("model"):
        model = str(resolved["model"])
    if name == "noisy_programmatic":
        settings = NoisyCorrectorSettings.model_validate(kwargs)
        label = (
            f"`{name}`: not an oracle: the programmatic oracle with {settings.error_rate:.0%} "
            "of its corrections replaced by wrong ones (approved wrong thoughts, misread cards "
            "or numbers, other legal actions), seeded; a stand-in for a VLM corrector's "
            "mistakes, not a VLM"
        )
        return {
            "name": name,
            "oracle": False,
            "model": None,
            "label": label,
            "error_rate": settings.error_rate,
        }
    if oracle:
        label = (
            f"`{name}`: an oracle (it reads the game's hidden state and solves it exactly; "
            "not the paper's VLM corrector)"
        )
    else:
        label = f"`{name}`" + (f" ({model})" if model else "") + ": a model, not an oracle"
    return {"name": name, "oracle": oracle, "model": model, "label": label}


def make_corrector(name: str = "programmatic", **kwargs: Any) -> Corrector:
    """Build a registered corrector from its constructor's arguments (``programmatic`` needs
    none); presets go through :func:`build_corrector`."""
    return CORRECTORS.get(name)(**kwargs)
