"""Teachers: write a ``<perception>/<reasoning>/<answer>`` response for each sampled frame.

* ``programmatic`` (offline default): describes the frame from the walkthrough sidecar's
  privileged game state and answers with the recording agent's next buttons. Deterministic per
  frame (seeded by the frame hash), with several phrasings per fact so fine-tuning does not
  learn a single template. Frames without a sidecar (imported videos) are refused.
* ``openai``: asks any OpenAI-compatible VLM, with the agent's own system prompt and turn
  text. Requests go through :class:`~odyssey_core.policy.openai_backend.OpenAIPolicy` (its
  retries with backoff and jitter on 429/5xx/timeouts, its image encoding); every answer is
  cached on disk, keyed by frame hash, prompt hash, model and parameters, so a rerun or a
  crash never pays for a frame twice. A preset may name environment variables instead of
  values (``model_env``, ``base_url_env``, ``api_key_env``): :func:`resolve_teacher` reads
  them and :func:`teacher_problems` says which are missing, before any work starts.

``annotate_frames`` runs a teacher and writes ``annotations.parquet`` (the dataset columns
except ``split``) and ``teacher_metrics.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from PIL import Image
from pydantic import Field, ValidationError, model_validator

from odyssey_core.common.registry import Registry
from odyssey_core.config import StrictModel
from odyssey_core.data.dataset import (
    ANNOTATION_SCHEMA,
    write_bytes_atomic,
    write_json,
    write_table,
)
from odyssey_core.data.sampling import SampledFrame
from odyssey_core.protocol import build_turn_text, format_response, get_system_prompt

__all__ = [
    "TEACHERS",
    "Annotation",
    "OpenAITeacher",
    "ProgrammaticTeacher",
    "Teacher",
    "TeacherConfig",
    "TeacherError",
    "TeacherRefusal",
    "TeacherResult",
    "TeacherSettingsError",
    "annotate_frames",
    "is_reasoning_model",
    "make_teacher",
    "probe_teacher",
    "resolve_teacher",
    "teacher_problems",
]

TILE = 8  # Game Boy tiles are 8x8 pixels
SCREEN_W, SCREEN_H = 160, 144


class TeacherRefusal(ValueError):
    """The teacher cannot annotate this frame (e.g. no privileged state for it)."""


class TeacherError(RuntimeError):
    """Some frames could not be annotated; the others are kept (and cached)."""


class TeacherConfig(StrictModel):
    name: str = "programmatic"
    options: dict[str, Any] = Field(default_factory=dict, description="the teacher's settings")


@dataclass(frozen=True)
class Annotation:
    frame_hash: str
    response: str
    buttons: list[str]
    teacher: str
    cached: bool = False
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class TeacherResult:
    annotations: list[Annotation]
    failures: dict[str, str]  # frame hash -> error
    metrics: dict[str, Any]
    # frame hash -> the exception itself, so a caller can tell a rate limit from a bad key
    errors: dict[str, BaseException] = field(default_factory=dict)


class Teacher(ABC):
    name: ClassVar[str] = "teacher"

    def __init__(self, game: str = "odland") -> None:
        self.game = game

    @abstractmethod
    def annotate(self, frames: Sequence[SampledFrame], frames_root: str | Path) -> TeacherResult:
        """Annotate ``frames`` (images under ``frames_root``)."""

    def label(self) -> str:
        """What goes into the dataset's ``teacher`` column."""
        return self.name


TEACHERS: Registry[type[Teacher]] = Registry("teacher")


def make_teacher(config: TeacherConfig, game: str = "odland", **overrides: Any) -> Teacher:
    """Build the teacher, reading the settings it takes from the environment (see
    :func:`resolve_teacher`; a missing one raises ``ValueError`` naming it)."""
    config = resolve_teacher(config)
    return TEACHERS.get(config.name)(game=game, **{**config.options, **overrides})


#: teacher options whose value may come from an environment variable: option -> the option
#: naming that variable
FROM_ENVIRONMENT = {"model": "model_env", "base_url": "base_url_env"}


def teacher_problems(config: TeacherConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """What keeps ``config``'s teacher from running here, one line per missing setting: an
    environment variable named by ``model_env`` / ``base_url_env`` (when the value itself is
    not in the options) or by ``api_key_env`` that is unset or empty. Empty when it can run."""
    if config.name != OpenAITeacher.name:
        return []
    env = os.environ if environ is None else environ
    options = config.options
    problems = []
    for option, variable_option in FROM_ENVIRONMENT.items():
        variable = options.get(variable_option)
        if options.get(option) in (None, "") and variable and not env.get(variable):
            problems.append(
                f"environment variable {variable} is not set: the teacher's {option} "
                f"(teacher.options.{variable_option})"
            )
    key = options.get("api_key_env")
    if key and not env.get(key):
        problems.append(
            f"environment variable {key} is not set: the teacher's API key "
            "(teacher.options.api_key_env; any value for a server without keys)"
        )
    if not problems:  # the settings themselves, for the model they will be sent to
        resolved = dict(options)
        for option, variable_option in FROM_ENVIRONMENT.items():
            if resolved.get(option) in (None, "") and options.get(variable_option):
                resolved[option] = env[options[variable_option]]
        known = set(OpenAITeacherSettings.model_fields)
        try:
            OpenAITeacherSettings(**{k: v for k, v in resolved.items() if k in known})
        except ValidationError as error:
            problems += [f"teacher.options: {e['msg']}" for e in error.errors()]
    return problems


def resolve_teacher(
    config: TeacherConfig, environ: Mapping[str, str] | None = None
) -> TeacherConfig:
    """``config`` with the values of ``model_env`` / ``base_url_env`` read from the
    environment into ``model`` / ``base_url`` (values already in the options win). Raises
    ``ValueError`` naming every such variable that is unset; the API key itself is read by
    the backend, never copied into the config."""
    if config.name != OpenAITeacher.name:
        return config
    env = os.environ if environ is None else environ
    missing = [p for p in teacher_problems(config, env) if "API key" not in p]
    if missing:
        raise ValueError("the teacher cannot be configured: " + "; ".join(missing))
    options = dict(config.options)
    for option, variable_option in FROM_ENVIRONMENT.items():
        variable = options.get(variable_option)
        if options.get(option) in (None, "") and variable:
            options[option] = env[variable]
    return config.model_copy(update={"options": options})


# ======================================================================= programmatic teacher
# Several phrasings per fact; {d} is a distance, {w} a width, {dir} ahead/behind.
_POSITION = (
    "The hero is {h} of the screen, {v}.",
    "I see my character {h} of the screen, {v}.",
    "My character is {h} of the view, {v}.",
    "The player sprite sits {h} of the screen, {v}.",
)
_GROUNDED = ("standing on the ground", "on solid ground", "with both feet on the floor")
_RISING = ("in the air and still rising", "mid-jump, going up", "airborne and climbing")
_FALLING = ("in the air and coming down", "falling back down", "airborne and descending")
_OBJECT = {
    "walker": (
        "an enemy walker {d} {dir}",
        "a walking enemy about {d} {dir}",
        "a patrolling foe roughly {d} {dir}",
    ),
    "gap": (
        "a gap about {w} wide {d} {dir}",
        "a pit, {w} across, {d} {dir}",
        "a hole in the ground roughly {w} wide, {d} {dir}",
    ),
    "block": (
        "a block {d} {dir}",
        "a solid block about {d} {dir}",
        "a raised block roughly {d} {dir}",
    ),
    "goal": (
        "the goal {d} {dir}",
        "the level's finish {d} {dir}",
        "the end of the level about {d} {dir}",
    ),
}
_AHEAD = ("ahead", "to the right", "in front")
_BEHIND = ("behind", "to the left", "back to the left")
_LIST_INTRO = ("Nearby there is {items}.", "I can make out {items}.", "On screen: {items}.")
_CLEAR = (
    "Nothing dangerous is in view.",
    "The way ahead looks clear.",
    "No enemies or gaps are visible nearby.",
)
_LIVES = ("Lives left: {n}.", "I still have {n} lives.", "{n} lives remain.")

_REASON_JUMP = {
    "walker": (
        "The enemy is close, so I jump to get over it.",
        "Touching that walker would cost a life; a jump clears it.",
        "I jump now so the enemy passes underneath.",
    ),
    "gap": (
        "The gap is right there; I jump to clear it.",
        "Walking on would drop me into the pit, so I jump across.",
        "Time to leap over the hole before I reach its edge.",
    ),
    "block": (
        "A block stands in the way, so I hop up and over it.",
        "I jump to get past the block.",
        "The block would stop my run; jumping clears it.",
    ),
    None: (
        "A jump here keeps my momentum and costs nothing.",
        "I jump while moving to keep the pace up.",
        "Jumping now is safe and keeps me going.",
    ),
}
_REASON_AIR = (
    "I am in the air, so I keep steering to land in a safe spot.",
    "While airborne I hold the direction to carry the jump through.",
    "Mid-jump, I keep pushing to land past the danger.",
)
_REASON_RUN = (
    "The path is clear, so I keep heading right toward the goal.",
    "Nothing needs a jump yet; I keep moving right.",
    "Progress comes from going right, so I keep running.",
)
_REASON_APPROACH = (
    "The {kind} is still {d} away, so I keep moving and jump later.",
    "There is time before the {kind} ({d} away); I keep going for now.",
    "I keep advancing; the {kind} is {d} off, not close enough to jump yet.",
)
_REASON_LEFT = (
    "I step back a little to line up the next move.",
    "Backing off to the left gives me room to time it better.",
    "I retreat slightly so the next move is safer.",
)
_REASON_WAIT = (
    "I wait a moment for a better opening.",
    "Holding still lets the danger move first.",
    "No input this turn; timing matters here.",
)
_REASON_RUN_FAST = (" Holding B makes me run faster.", " B keeps the speed up.", "")
_KIND_NAMES = {"walker": "enemy", "gap": "gap", "block": "block", "goal": "goal"}


def _tiles(pixels: float) -> str:
    n = round(abs(pixels) / TILE)
    if n == 0:
        return "right next to me"
    return "1 tile" if n == 1 else f"{n} tiles"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class ProgrammaticTeacher(Teacher):
    """Writes responses from the sidecar's privileged state; answers with the agent's action."""

    name = "programmatic"

    def __init__(
        self,
        game: str = "odland",
        *,
        seed: int = 0,
        view_ahead_tiles: int = 20,
        view_behind_tiles: int = 6,
        max_objects: int = 4,
        near_tiles: int = 6,
    ) -> None:
        super().__init__(game)
        self.seed = seed
        self.view_ahead = view_ahead_tiles * TILE
        self.view_behind = view_behind_tiles * TILE
        self.max_objects = max_objects
        self.near = near_tiles * TILE

    def _nearby(self, state: dict[str, Any]) -> list[tuple[float, dict[str, Any]]]:
        x = float(state["player_x"])
        objects = json.loads(state.get("objects") or "[]")
        near = [
            (float(o["x"]) - x, o)
            for o in objects
            if -self.view_behind <= float(o["x"]) - x <= self.view_ahead
        ]
        near.sort(key=lambda item: abs(item[0]))
        return near[: self.max_objects]

    def perception(self, state: dict[str, Any], rng: random.Random) -> str:
        screen_x = state.get("screen_x")
        if screen_x is None:
            screen_x = SCREEN_W / 2
        h = (
            "on the left side"
            if screen_x < SCREEN_W / 3
            else "in the middle"
            if screen_x < 2 * SCREEN_W / 3
            else "on the right side"
        )
        if state.get("on_ground", True):
            v = rng.choice(_GROUNDED)
        else:
            v = rng.choice(_RISING if (state.get("velocity_y") or 0) < 0 else _FALLING)
        parts = [rng.choice(_POSITION).format(h=h, v=v)]
        items = []
        for dx, obj in self._nearby(state):
            kind = obj["kind"] if obj["kind"] in _OBJECT else "block"
            direction = rng.choice(_AHEAD if dx >= 0 else _BEHIND)
            width = _tiles(obj.get("y", 0)) if kind == "gap" else ""
            text = rng.choice(_OBJECT[kind]).format(d=_tiles(dx), w=width, dir=direction)
            items.append(text.replace("right next to me ", "right next to me, "))
        parts.append(
            rng.choice(_LIST_INTRO).format(items=_join(items)) if items else rng.choice(_CLEAR)
        )
        if state.get("lives") is not None and rng.random() < 0.3:
            parts.append(rng.choice(_LIVES).format(n=state["lives"]))
        return " ".join(parts)

    def reasoning(self, state: dict[str, Any], buttons: list[str], rng: random.Random) -> str:
        threats = [
            (dx, o)
            for dx, o in self._nearby(state)
            if dx >= 0 and o["kind"] in ("walker", "gap", "block")
        ]
        nearest = min(threats, key=lambda t: t[0]) if threats else None
        close = nearest if nearest and nearest[0] <= self.near else None
        airborne = not state.get("on_ground", True)
        if "a" in buttons:
            text = rng.choice(_REASON_JUMP[close[1]["kind"] if close else None])
        elif airborne and ("right" in buttons or "left" in buttons):
            text = rng.choice(_REASON_AIR)
        elif "right" in buttons:
            if nearest is not None:
                kind = _KIND_NAMES[nearest[1]["kind"]]
                text = rng.choice(_REASON_APPROACH).format(kind=kind, d=_tiles(nearest[0]))
            else:
                text = rng.choice(_REASON_RUN)
        elif "left" in buttons:
            text = rng.choice(_REASON_LEFT)
        else:
            text = rng.choice(_REASON_WAIT)
        if "b" in buttons and "right" in buttons:
            text += rng.choice(_REASON_RUN_FAST)
        return text

    def annotate_one(self, frame: SampledFrame) -> Annotation:
        state = frame.state_dict()
        if state is None:
            raise TeacherRefusal(
                f"the programmatic teacher needs a walkthrough sidecar, but frame "
                f"{frame.frame_hash[:12]} ({frame.source}) has none; annotate imported videos "
                "with a VLM teacher (teacher: openai)"
            )
        buttons = [str(b) for b in state.get("buttons_next") or []]
        if not buttons:
            raise TeacherRefusal(f"frame {frame.frame_hash[:12]} has no recorded next action")
        rng = random.Random(int(frame.frame_hash[:16], 16) ^ self.seed)
        response = format_response(
            self.perception(state, rng), self.reasoning(state, buttons, rng), tuple(buttons)
        )
        return Annotation(frame.frame_hash, response, buttons, self.label())

    def annotate(self, frames: Sequence[SampledFrame], frames_root: str | Path) -> TeacherResult:
        missing = [f for f in frames if f.state is None]
        if missing:
            sources = sorted({f.source for f in missing})
            raise TeacherRefusal(
                f"the programmatic teacher needs privileged state from a recorded walkthrough; "
                f"{len(missing)} of {len(frames)} frames have no sidecar (sources: "
                f"{', '.join(sources)}). Use a VLM teacher (teacher: openai) for imported videos."
            )
        annotations, failures, errors = [], {}, {}
        for frame in frames:
            try:
                annotations.append(self.annotate_one(frame))
            except TeacherRefusal as error:
                failures[frame.frame_hash] = str(error)
                errors[frame.frame_hash] = error
        metrics = {"annotated": len(annotations), "refused": len(failures), "requests": 0}
        return TeacherResult(annotations, failures, metrics, errors)


# ============================================================================== openai teacher
#: the least completion budget a reasoning model gets: its hidden reasoning counts against it
MIN_REASONING_TOKENS = 4096
#: served names of models that reason before answering and refuse sampling settings (OpenAI's
#: o-series and gpt-5), after any provider prefix (``openai/o3``)
REASONING_MODEL_PATTERN = re.compile(r"^(o\d|gpt-5)", re.IGNORECASE)


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` names a reasoning model (o1, o3, o4-mini, gpt-5, ...)."""
    return bool(REASONING_MODEL_PATTERN.match(model.rsplit("/", 1)[-1]))


class TeacherSettingsError(ValueError):
    """The teacher's settings do not work with its model; the message names what to change."""


class OpenAITeacherSettings(StrictModel):
    model: str = Field(description="the served model's name (or from model_env)")
    model_env: str | None = Field(default=None, description="variable holding the model name")
    base_url: str | None = None
    base_url_env: str | None = Field(default=None, description="variable holding the API root")
    api_key_env: str | None = "OPENAI_API_KEY"
    concurrency: int = Field(default=8, ge=1)
    timeout: float = Field(default=60.0, gt=0)
    reasoning: bool | None = Field(
        default=None,
        description="the model reasons before answering (o-series, gpt-5): no temperature or "
        "top_p is sent (such models refuse them), the budget goes as max_completion_tokens and "
        f"must be at least {MIN_REASONING_TOKENS}; null: decided from the model's name",
    )
    temperature: float | None = Field(
        default=0.2, ge=0, description="sent to models that accept it; null: never sent"
    )
    top_p: float | None = Field(
        default=1.0, gt=0, le=1, description="sent to models that accept it; null: never sent"
    )
    max_tokens: int = Field(
        default=512,
        ge=1,
        description="the completion budget (a reasoning model's hidden reasoning included)",
    )
    seed: int | None = 0
    image_scale: int | None = None
    image_size: tuple[int, int] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = Field(
        default=None,
        description="the name the budget is sent under; null: max_completion_tokens for "
        "reasoning models, else max_tokens",
    )
    price_prompt_per_1k: float = Field(default=0.0, ge=0, description="USD per 1k prompt tokens")
    price_completion_per_1k: float = Field(default=0.0, ge=0, description="USD per 1k output")
    cache_dir: Path | None = Field(default=None, description="default: <annotate out>/cache")
    max_retries: int = Field(default=6, ge=0)
    initial_backoff: float = Field(default=0.5, ge=0)
    max_backoff: float = Field(default=30.0, ge=0)
    max_total_wait: float = Field(default=300.0, ge=0)
    show_progress: bool = True

    @property
    def is_reasoning(self) -> bool:
        return is_reasoning_model(self.model) if self.reasoning is None else self.reasoning

    @property
    def budget_field(self) -> str:
        if self.max_tokens_field is not None:
            return self.max_tokens_field
        return "max_completion_tokens" if self.is_reasoning else "max_tokens"

    @model_validator(mode="after")
    def _fits_a_reasoning_model(self) -> OpenAITeacherSettings:
        if not self.is_reasoning:
            return self
        why = f"{self.model!r} is a reasoning model"
        if self.reasoning is None:
            why += " (by its name; teacher.options.reasoning: false says otherwise)"
        if self.max_tokens_field == "max_tokens":
            raise TeacherSettingsError(
                f"{why} and refuses max_tokens: set teacher.options.max_tokens_field to "
                "max_completion_tokens (or leave it unset)"
            )
        if self.max_tokens < MIN_REASONING_TOKENS:
            raise TeacherSettingsError(
                f"{why}: teacher.options.max_tokens {self.max_tokens} leaves no room for its "
                f"hidden reasoning; set it to at least {MIN_REASONING_TOKENS}"
            )
        return self

    def request_kwargs(self) -> dict[str, Any]:
        """What every request sends besides the model and the messages."""
        kwargs: dict[str, Any] = {self.budget_field: self.max_tokens}
        if not self.is_reasoning:
            if self.temperature is not None:
                kwargs["temperature"] = self.temperature
            if self.top_p is not None:
                kwargs["top_p"] = self.top_p
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        return kwargs


#: a request setting a server may refuse -> the teacher option that changes it
REFUSABLE_SETTINGS = {
    "temperature": "teacher.options.temperature: null (or reasoning: true)",
    "top_p": "teacher.options.top_p: null (or reasoning: true)",
    "max_tokens": "teacher.options.max_tokens_field: max_completion_tokens (or reasoning: true)",
    "max_completion_tokens": "teacher.options.max_tokens_field: max_tokens",
    "seed": "teacher.options.seed: null",
}


def _sha(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class OpenAITeacher(Teacher):
    """A VLM behind an OpenAI-compatible API, with an on-disk response cache."""

    name = "openai"

    def __init__(
        self,
        game: str = "odland",
        *,
        client: Any = None,
        sleep: Callable[[float], None] | None = None,
        **options: Any,
    ) -> None:
        from odyssey_core.policy.openai_backend import OpenAIPolicy, RetrySettings

        super().__init__(game)
        self.settings = OpenAITeacherSettings(**options)
        s = self.settings
        self.system_prompt = get_system_prompt(game)
        retry = RetrySettings(
            max_retries=s.max_retries,
            initial_backoff=s.initial_backoff,
            max_backoff=s.max_backoff,
            max_total_wait=s.max_total_wait,
        )
        extra: dict[str, Any] = {"sleep": sleep} if sleep is not None else {}
        # concurrency=1 inside the policy: this teacher runs its own pool so that each answer
        # is cached the moment it arrives.
        self.policy = OpenAIPolicy(
            s.model,
            s.base_url,
            api_key_env=s.api_key_env,
            game=game,
            system_prompt=self.system_prompt,
            image_scale=s.image_scale,
            image_size=s.image_size,
            concurrency=1,
            timeout=s.timeout,
            retry=retry,
            max_tokens_field=s.budget_field,
            extra_body=s.extra_body,
            client=client,
            **extra,
        )
        self.cache_dir = s.cache_dir
        self._lock = threading.Lock()

    def label(self) -> str:
        return f"openai:{self.settings.model}"

    def params_key(self) -> dict[str, Any]:
        """What the answer depends on besides the frame, the prompt and the model: the request
        settings as sent."""
        s = self.settings
        return {
            **self.settings.request_kwargs(),
            "image_scale": s.image_scale,
            "image_size": s.image_size,
        }

    def request(self, observation: Any) -> dict[str, Any]:
        """One request with this teacher's settings: the answer's text, finish reason, usage."""
        response = self.policy.create_with_retries(
            self.policy.messages(observation), self.settings.request_kwargs()
        )
        choice = response.choices[0]
        usage = getattr(response, "usage", None)
        return {
            "text": choice.message.content or "",
            "finish_reason": choice.finish_reason,
            "usage": {
                name: int(getattr(usage, name, 0) or 0)
                for name in ("prompt_tokens", "completion_tokens", "total_tokens")
            }
            if usage is not None
            else {},
        }

    def probe(self) -> dict[str, Any]:
        """One request on a blank frame before any work: the server accepts these settings
        and the budget leaves room for an answer. Raises :class:`TeacherSettingsError` naming
        the setting to change."""
        from odyssey_core.envs.base import Observation
        from odyssey_core.policy.openai_backend import OpenAIBackendError

        blank = np.full((SCREEN_H, SCREEN_W, 3), 255, dtype=np.uint8)
        try:
            answer = self.request(Observation(image=blank, text=build_turn_text("1-1")))
        except OpenAIBackendError as error:
            if error.status_code not in (400, 422):
                raise
            message = str(error)
            named = [hint for name, hint in REFUSABLE_SETTINGS.items() if f"'{name}'" in message]
            named = (
                named or [hint for name, hint in REFUSABLE_SETTINGS.items() if name in message][:1]
            )
            change = f"; change {' and '.join(named)}" if named else ""
            raise TeacherSettingsError(
                f"the teacher's probe request was refused: {message}{change}"
            ) from error
        if answer["finish_reason"] == "length" or not answer["text"].strip():
            raise TeacherSettingsError(
                f"the teacher's probe answer was cut off at teacher.options.max_tokens "
                f"{self.settings.max_tokens} (finish reason {answer['finish_reason']!r}, "
                f"{answer['usage'].get('completion_tokens', '?')} completion tokens): raise it"
                + (
                    f" (reasoning models need at least {MIN_REASONING_TOKENS})"
                    if not self.settings.is_reasoning
                    else ""
                )
            )
        return answer

    def cache_key(self, frame_hash: str, turn_text: str) -> str:
        prompt_hash = _sha([self.system_prompt, turn_text])
        return _sha(
            {
                "frame": frame_hash,
                "prompt": prompt_hash,
                "model": self.settings.model,
                "params": self.params_key(),
            }
        )

    def _cache_path(self, key: str) -> Path:
        if self.cache_dir is None:
            raise ValueError("OpenAITeacher needs cache_dir (annotate_frames sets a default)")
        return Path(self.cache_dir) / key[:2] / f"{key}.json"

    def _cost(self, usage: dict[str, int]) -> float:
        s = self.settings
        return (
            usage.get("prompt_tokens", 0) / 1000 * s.price_prompt_per_1k
            + usage.get("completion_tokens", 0) / 1000 * s.price_completion_per_1k
        )

    def _one(self, frame: SampledFrame, frames_root: Path) -> Annotation:
        from odyssey_core.envs.base import Observation
        from odyssey_core.protocol import parse_response

        turn_text = build_turn_text(frame.level)
        key = self.cache_key(frame.frame_hash, turn_text)
        path = self._cache_path(key)
        if path.is_file():
            entry = json.loads(path.read_text())
            cached = True
        else:
            image = np.asarray(Image.open(frames_root / frame.frame).convert("RGB"))
            answer = self.request(Observation(image=image, text=turn_text))
            entry = {
                "key": key,
                "frame_hash": frame.frame_hash,
                "model": self.settings.model,
                "params": self.params_key(),
                **answer,
                "created": time.time(),
            }
            write_bytes_atomic(path, json.dumps(entry, sort_keys=True).encode())
            cached = False
        parsed = parse_response(entry["text"])
        return Annotation(
            frame.frame_hash,
            entry["text"],
            list(parsed.buttons),
            self.label(),
            cached=cached,
            usage=dict(entry.get("usage") or {}),
        )

    def annotate(self, frames: Sequence[SampledFrame], frames_root: str | Path) -> TeacherResult:
        from tqdm.auto import tqdm

        from odyssey_core.policy.openai_backend import OpenAIBackendError

        root = Path(frames_root)
        results: dict[str, Annotation] = {}
        failures: dict[str, str] = {}
        errors: dict[str, BaseException] = {}
        self.policy.reset_metrics()
        bar = tqdm(
            total=len(frames),
            desc=f"annotate ({self.label()})",
            unit="frame",
            disable=not self.settings.show_progress,
        )
        pool = ThreadPoolExecutor(
            max_workers=self.settings.concurrency, thread_name_prefix="teacher"
        )
        try:
            futures = {pool.submit(self._one, f, root): f for f in frames}
            for future, frame in futures.items():
                try:
                    results[frame.frame_hash] = future.result()
                except OpenAIBackendError as error:  # retries exhausted: others still count
                    failures[frame.frame_hash] = str(error)
                    errors[frame.frame_hash] = error
                bar.update(1)
        finally:
            # On a crash, do not start the queued requests; finished ones are cached already.
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        annotations = [results[f.frame_hash] for f in frames if f.frame_hash in results]
        fresh = [a for a in annotations if not a.cached]
        cached = [a for a in annotations if a.cached]

        def total(items: list[Annotation], name: str) -> int:
            return sum(int(a.usage.get(name, 0)) for a in items)

        metrics = {
            "annotated": len(annotations),
            "failed": len(failures),
            "cache_hits": len(cached),
            "requests": len(fresh),
            **{f"http_{k}": v for k, v in self.policy.metrics().items()},
            "prompt_tokens": total(fresh, "prompt_tokens"),
            "completion_tokens": total(fresh, "completion_tokens"),
            "cost_usd": round(sum(self._cost(a.usage) for a in fresh), 6),
            "cost_usd_saved_by_cache": round(sum(self._cost(a.usage) for a in cached), 6),
        }
        return TeacherResult(annotations, failures, metrics, errors)


TEACHERS.register("programmatic", ProgrammaticTeacher)
TEACHERS.register("openai", OpenAITeacher)


# ============================================================================== stage runner
ANNOTATIONS_FILE = "annotations.parquet"


def annotate_frames(
    teacher: Teacher,
    frames: Sequence[SampledFrame],
    frames_root: str | Path,
    out_dir: str | Path,
    *,
    allow_failures: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run ``teacher`` and write ``annotations.parquet`` and ``teacher_metrics.json``.

    Returns (rows, metrics). Raises :class:`TeacherError` after writing the successful rows
    when some frames failed (unless ``allow_failures``); a rerun only redoes those frames.
    """
    out = Path(out_dir)
    if isinstance(teacher, OpenAITeacher) and teacher.cache_dir is None:
        teacher.cache_dir = out / "cache"
    by_hash = {f.frame_hash: f for f in frames}
    result = teacher.annotate(frames, frames_root)
    rows = []
    for annotation in result.annotations:
        frame = by_hash[annotation.frame_hash]
        rows.append(
            {
                "sample_id": frame.frame_hash,
                "frame": frame.frame,
                "frame_hash": frame.frame_hash,
                "game": frame.game,
                "level": frame.level,
                "turn_text": build_turn_text(frame.level),
                "response": annotation.response,
                "buttons": list(annotation.buttons),
                "source": frame.source,
                "frame_index": int(frame.frame_index),
                "timestamp_s": float(frame.timestamp_s),
                "teacher": annotation.teacher,
            }
        )
    metrics = {**result.metrics, "failures": result.failures}
    write_table(out / ANNOTATIONS_FILE, rows, schema=ANNOTATION_SCHEMA)
    write_json(out / "teacher_metrics.json", metrics)
    if result.failures and not allow_failures:
        first = next(iter(result.failures.values()))
        # chained, so an orchestrator's retry rule sees whether the cause was transient
        cause = next(iter(result.errors.values()), None)
        raise TeacherError(
            f"{len(result.failures)} of {len(frames)} frames could not be annotated "
            f"(first error: {first}); the rest are saved, rerun to retry the failed ones"
        ) from cause
    return rows, metrics


def probe_teacher(config: TeacherConfig, game: str = "odland") -> dict[str, Any] | None:
    """One request with an API teacher's settings before curation starts (see
    :meth:`OpenAITeacher.probe`); None for a teacher that sends no requests."""
    teacher = make_teacher(config, game=game)
    if not isinstance(teacher, OpenAITeacher):
        return None
    return teacher.probe()
