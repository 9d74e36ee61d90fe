"""The agents an evaluation compares: policy backends and the non-learning agents.

``parse_agent_spec`` reads the command-line form:

* ``expert`` / ``random``: the search expert (upper bound) and the random floor. They act
  inside the environment's worker process (the expert searches by saving and loading the
  emulator, which must live next to it): :class:`AgentDrivenEnv` wraps the env so that
  stepping it with ``None`` lets the agent choose.
* ``hf:PATH``: a local checkpoint (:class:`~odyssey_core.policy.hf.HFPolicy`).
* ``openai:MODEL@BASE_URL``: any OpenAI-compatible endpoint (``@BASE_URL`` optional); an
  *API model*, with which suites may play fewer episodes (the paper: 8, not 256).
* ``LABEL=SPEC``: any of these as the report row ``LABEL`` (``base=hf:/models/Qwen3-VL-8B``
  is the row the paper's suites measure improvements against).

Policy agents answer all running environments with one batched ``generate`` per turn, with
the inference settings of a training preset when given
(:class:`~odyssey_core.eval.inference.InferenceSettings`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from odyssey_core.agents import make_agent
from odyssey_core.envs.base import Observation, StepResult, TurnEnv
from odyssey_core.eval.inference import InferenceSettings
from odyssey_core.policy.base import Generation, GenerationParams, PolicyBackend, make_policy

__all__ = [
    "AgentDrivenEnv",
    "AgentSpec",
    "PolicyAgent",
    "agent_driven_env_fn",
    "build_policy_agent",
    "parse_agent_spec",
]

ENV_AGENTS = ("expert", "random")
#: backends that answer through a remote API (the paper's "API models": fewer episodes)
API_BACKENDS = ("openai",)
_LABEL = re.compile(r"^([A-Za-z][\w.-]*)=(.+)$")


@dataclass(frozen=True)
class AgentSpec:
    """What to build for one row of the table."""

    label: str  # the row name in reports
    kind: Literal["env", "policy"]
    name: str  # "expert" | "random" | a policy backend name ("hf", "openai", ...)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def api(self) -> bool:
        """An API model (the suites' ``api_runs``), not an open one run here."""
        return self.kind == "policy" and self.name in API_BACKENDS


def parse_agent_spec(spec: str, label: str | None = None, **kwargs: Any) -> AgentSpec:
    """``expert``, ``random``, ``hf:PATH`` or ``openai:MODEL[@BASE_URL]``, optionally as
    ``LABEL=SPEC``; extra ``kwargs`` go to the agent or backend constructor."""
    named = _LABEL.match(spec)
    if named and label is None and ":" not in named.group(1):
        return parse_agent_spec(named.group(2), label=named.group(1), **kwargs)
    if spec in ENV_AGENTS:
        return AgentSpec(label or spec, "env", spec, dict(kwargs))
    backend, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ValueError(
            f"unknown agent {spec!r}: use expert, random, hf:PATH or openai:MODEL@BASE_URL"
        )
    if backend == "hf":
        name = Path(rest.rstrip("/")).name or rest
        return AgentSpec(label or f"hf:{name}", "policy", "hf", {"model": rest, **kwargs})
    if backend == "openai":
        model, _, base_url = rest.partition("@")
        options = {"model": model, "base_url": base_url or None, **kwargs}
        return AgentSpec(label or f"openai:{model}", "policy", "openai", options)
    # any other registered backend takes the model as its first argument
    return AgentSpec(label or spec, "policy", backend, {"model": rest, **kwargs})


class PolicyAgent:
    """A policy backend answering a batch of observations per turn."""

    def __init__(
        self,
        backend: PolicyBackend,
        label: str,
        params: GenerationParams | None = None,
        *,
        api: bool = False,
        inference: InferenceSettings | None = None,
    ) -> None:
        self.backend = backend
        self.label = label
        self.params = params or (inference.generation() if inference else GenerationParams())
        self.api = api
        self.inference = inference  # what it was built with, for reports and logs

    def set_game(self, game: str) -> None:
        """Switch the system prompt to ``game`` (cross-game sections reuse the same model)."""
        from odyssey_core.protocol import get_system_prompt

        if hasattr(self.backend, "system_prompt"):
            self.backend.system_prompt = get_system_prompt(game)

    def act_batch(
        self, observations: Sequence[Observation], seed: int | None = None
    ) -> list[Generation]:
        params = self.params if seed is None else self.params.model_copy(update={"seed": seed})
        return self.backend.generate(list(observations), params)


def build_policy_agent(
    spec: AgentSpec,
    game: str = "odland",
    params: GenerationParams | None = None,
    backend: PolicyBackend | None = None,
    *,
    inference: InferenceSettings | None = None,
) -> PolicyAgent:
    """Build the backend of a policy ``spec`` (or wrap an already built ``backend``).

    ``inference`` (a training preset's, App. E.3) gives the backend its image scale or size
    (and, for local models, device, dtype and attention kernel) and the sampling settings;
    ``params`` and the spec's own keyword arguments win over it."""
    if spec.kind != "policy":
        raise ValueError(f"{spec.label} is not a policy agent")
    if backend is None:
        kwargs = {**(inference.backend_kwargs(spec.name) if inference else {}), **spec.kwargs}
        backend = make_policy(spec.name, game=game, **kwargs)
    return PolicyAgent(backend, spec.label, params, api=spec.api, inference=inference)


class AgentDrivenEnv(TurnEnv):
    """An env whose agent lives beside it: ``step(None)`` asks the agent for the action.

    Any other action is passed through, so the same wrapper also serves replays.
    """

    def __init__(self, env: TurnEnv, agent_name: str, agent_kwargs: Mapping[str, Any]) -> None:
        self.env = env
        self.agent = make_agent(agent_name, **dict(agent_kwargs))
        self.env_id = env.env_id
        self.legal_actions = env.legal_actions
        self.action_space = env.action_space
        self.observation_space = getattr(env, "observation_space", None)
        self._observation: Observation | None = None
        self._info: dict[str, Any] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.env_id = self.env.env_id  # a reset may switch the level
        self.agent.reset(self.env, seed=seed)
        self._observation, self._info = observation, info
        return observation, info

    def step(self, action: Any) -> StepResult:
        if action is None:
            assert self._observation is not None, "reset() first"
            action = self.agent.act(self.env, self._observation, self._info)
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._observation, self._info = observation, info
        return observation, reward, terminated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    @property
    def supports_save_state(self) -> bool:
        return self.env.supports_save_state

    def save_state(self) -> bytes:
        return self.env.save_state()

    def load_state(self, state: bytes) -> None:
        self.env.load_state(state)

    def close(self) -> None:
        self.env.close()


def _build_agent_driven(
    env_fn: Any, agent_name: str, agent_kwargs: dict[str, Any]
) -> AgentDrivenEnv:
    return AgentDrivenEnv(env_fn(), agent_name, agent_kwargs)


def agent_driven_env_fn(env_fn: Any, agent_name: str, agent_kwargs: Mapping[str, Any]) -> Any:
    """A picklable factory of :class:`AgentDrivenEnv` around ``env_fn()``."""
    return functools.partial(_build_agent_driven, env_fn, agent_name, dict(agent_kwargs))
