"""The ``openai`` corrector, the paper's: a VLM behind any OpenAI-compatible endpoint asked GTR's
questions (App. C) about the frame, the thought and the action, in the prompt of the step's
game (:mod:`~odyssey_core.recipes.gtr.corrector.vlm_prompts`), with a ``solve24`` tool that
runs the exact solver for the formula games; its JSON answer parsed into a
:class:`Correction`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Unpack

from odyssey_core.common.redaction import redact_uri
from odyssey_core.envs.cards.render import RANKS, card_value
from odyssey_core.envs.cards.solver import ALL_OPERATORS, evaluate_tokens, solve, tokenize
from odyssey_core.policy.openai_backend import EndpointOptions, OpenAIPolicy, encode_image_data_url
from odyssey_core.protocol.gtr_format import parse_gtr_response
from odyssey_core.recipes.gtr.corrector.base import (
    FORMULA_GAMES,
    Correction,
    EpisodeMemory,
    JudgingCorrector,
    StepToCorrect,
    claimed_formula,
    rank_of,
)
from odyssey_core.recipes.gtr.corrector.vlm_prompts import (
    CORRECTOR_ROLE,
    NOT_DETERMINED,
    corrector_query,
    corrector_system_prompt,
)

__all__ = [
    "SOLVE24_TOOL",
    "OpenAICorrector",
    "parse_correction_json",
    "solve24_tool",
]


def _compact(formula: str | None) -> str:
    return re.sub(r"\s+", "", formula or "")


def _still_reachable(target_formula: str | None, current: str) -> bool:
    """The typed formula is a prefix of the target formula (so it can still become it)."""
    target = _compact(target_formula)
    return bool(target) and target.startswith(_compact(current))


SOLVE24_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "solve24",
        "description": (
            "Exact solver: every distinct formula that uses each card value once and equals the "
            "target. Card ranks may be given as A, 2-10, J, Q, K or as numbers."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "cards": {"type": "array", "items": {"type": ["string", "integer"]}},
                "target": {"type": "integer", "description": "24 unless the task says otherwise"},
            },
            "required": ["cards"],
        },
    },
}

_REMINDER = (
    "That reply was not a valid JSON object with an evaluation (YES or NO) and, when the "
    "thought is wrong, a correction. Send only that JSON object."
)


def _values_from(cards: Sequence[Any]) -> list[int]:
    values = []
    for card in cards:
        if isinstance(card, int | float) and not isinstance(card, bool):
            values.append(int(card))
            continue
        rank = rank_of(str(card))
        if rank is None or rank not in RANKS:
            raise ValueError(f"not a card: {card!r}")
        values.append(card_value(rank))
    return values


def solve24_tool(arguments: str | Mapping[str, Any], ops: Sequence[str] = ALL_OPERATORS) -> str:
    """Run the solver for a tool call; the JSON result never raises (errors are reported)."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        values = _values_from(args.get("cards") or [])
        if not 1 <= len(values) <= 6:
            raise ValueError("give between 1 and 6 cards")
        target = int(args.get("target", 24))
        formulas = list(solve(values, target, ops))
        return json.dumps(
            {
                "values": values,
                "target": target,
                "solvable": bool(formulas),
                "count": len(formulas),
                "formulas": formulas[:30],
            }
        )
    except Exception as exc:  # the model sent bad arguments: tell it, do not crash
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"})


def parse_correction_json(text: str | None) -> dict[str, Any] | None:
    """The JSON object in a reply (code fences and chatter around it allowed), or ``None``.

    The object needs an ``evaluation`` (text, or a boolean); its correction is ``correction``
    (GTR App. C: a JSON object, or null when the thought is correct) or ``corrected_thought``
    (text), either of which may be missing here and is checked by the caller.
    """
    if not text:
        return None
    body = re.sub(r"```(?:json)?", "", text).strip()
    candidates = [body]
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        candidates.append(body[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("evaluation"), str | bool):
            continue
        fix = data.get("correction", data.get("corrected_thought"))
        if fix is None or isinstance(fix, str | dict):
            return data
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("yes", "true"):
            return True
        if low in ("no", "false"):
            return False
    return None


def _judged_correct(data: Mapping[str, Any]) -> bool:
    explicit = _as_bool(data.get("agrees"))
    if explicit is not None:
        return explicit
    verdict = data.get("evaluation")
    if isinstance(verdict, bool):
        return verdict
    text = str(verdict or "").strip().lower().rstrip(".!")
    tail = text[-40:]
    if any(w in tail for w in ("incorrect", "not correct", "wrong")):
        return False
    if text.startswith("no") or text.endswith(" no"):
        return False
    return "correct" in tail or text.startswith("yes") or text.endswith(" yes")


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS)


_NONE_WORDS = ("", "none", "null", "n/a", NOT_DETERMINED.lower())


def _thought_from(fix: Any, legal: Sequence[str]) -> tuple[str, str | None]:
    """A correction as (thought in the agent's format, the action it names, if any)."""
    if isinstance(fix, dict):
        body = {k: v for k, v in fix.items() if str(k).lower() != "action"}
        action = fix.get("action")
        thought = json.dumps(body, ensure_ascii=False)[1:-1].strip()
        return thought, str(action) if action is not None and str(action) in legal else None
    text = str(fix)
    parsed = parse_gtr_response(text, legal)
    if parsed.valid:
        return (parsed.thought or "").strip(), parsed.action
    return text.strip(), None


def _formula_of(value: Any) -> str | None:
    if _empty(value) or not isinstance(value, str):
        return None
    return value.split("=")[0].strip() or None


class OpenAICorrector(JudgingCorrector):
    """A VLM corrector behind any OpenAI-compatible endpoint, with a ``solve24`` tool.

    Requests go through :class:`~odyssey_core.policy.openai_backend.OpenAIPolicy`'s retry
    loop (backoff, ``Retry-After``, clear 401/404 errors); ``endpoint`` (the key's variable,
    timeout, retry settings, a client) goes to it as given. ``max_tool_rounds`` bounds how many
    times the model may call the tool per correction. With an :class:`EpisodeMemory`, the
    target formula one step's answer settles on is handed to the next steps of the episode
    (App. C's "[Target Formula]"), as long as the typed formula can still become it.
    """

    source = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        temperature: float = 0.4,  # GTR Table 2: corrector temperature
        max_tokens: int = 600,  # GTR Table 2: corrector max text length
        max_tool_rounds: int = 3,
        use_tools: bool = True,
        **endpoint: Unpack[EndpointOptions],
    ) -> None:
        super().__init__()
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_tool_rounds = max_tool_rounds
        self.use_tools = use_tools
        self._http = OpenAIPolicy(
            model, base_url, api_key, system_prompt=CORRECTOR_ROLE, concurrency=1, **endpoint
        )

    def __repr__(self) -> str:
        base_url = redact_uri(str(self._http.base_url))
        return f"{type(self).__name__}(model={self.model!r}, base_url={base_url!r})"

    def metrics(self) -> dict[str, int]:
        out = {
            k: 0
            for k in (
                "corrections",
                "tool_calls",
                "malformed",
                "format_retries",
                "no_correction",
                "kept",
            )
        }
        out.update(self._counts)
        out.update({f"http_{k}": v for k, v in self._http.metrics().items()})
        return out

    def messages(
        self, step: StepToCorrect, target_formula: str | None = None
    ) -> list[dict[str, Any]]:
        text = corrector_query(step, target_formula)
        image = {
            "type": "image_url",
            "image_url": {"url": encode_image_data_url(step.observation.image)},
        }
        return [
            {"role": "system", "content": corrector_system_prompt(step.info)},
            {"role": "user", "content": [image, {"type": "text", "text": text}]},
        ]

    def judge(self, step: StepToCorrect, memory: EpisodeMemory | None) -> Correction:
        thought, action, info = step.thought, step.action, step.info
        formula_game = info.get("game") in FORMULA_GAMES
        target = None
        if memory is not None and memory.target_formula and formula_game:
            if _still_reachable(memory.target_formula, str(info.get("formula", ""))):
                target = memory.target_formula
            else:  # the agent typed past it: the corrector picks a new one
                memory.target_formula = None
        messages = self.messages(step, target)
        ops = tuple(info.get("operators", ALL_OPERATORS))
        tools = self.use_tools and formula_game
        result = None
        for attempt in range(2):  # the first answer, then one retry with a reminder
            content = self._ask(messages, tools, ops)
            data = parse_correction_json(content)
            result = None if data is None else self._interpret(data, thought, action, info)
            if result is not None:
                break
            self._counts["malformed"] += 1
            if attempt == 0:
                self._counts["format_retries"] += 1
                messages += [
                    {"role": "assistant", "content": content or ""},
                    {"role": "user", "content": _REMINDER},
                ]
        if result is None:
            self._counts["no_correction"] += 1
            return Correction(
                evaluation="",
                corrected_thought="",
                solvable=None,
                agrees=True,  # no grounds to overrule the agent; trainers skip invalid ones
                source=self.source,
                valid=False,
                target_formula=target,
            )
        if memory is not None and formula_game:
            chosen = result.target_formula or target
            if result.solvable is False:
                chosen = None
            if chosen and evaluate_tokens(tokenize(chosen)) != info.get("target"):
                chosen = target  # not a formula for this target: keep the one we had
            memory.target_formula = chosen
            result = replace(result, target_formula=chosen)
        return result

    def _interpret(
        self,
        data: Mapping[str, Any],
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
    ) -> Correction | None:
        """A reply as a Correction; None when it says the thought is wrong but gives no
        correction (malformed: retried once)."""
        legal = [str(a) for a in info.get("legal_actions", ())]
        agrees = _judged_correct(data)
        fix = data.get("correction", data.get("corrected_thought"))
        corrected, fix_action = ("", None) if _empty(fix) else _thought_from(fix, legal)
        if not agrees and not corrected:
            return None
        named = data.get("action")
        if fix_action is None and isinstance(named, str) and named.strip() in legal:
            fix_action = named.strip()
        solvable = _as_bool(data.get("possible_solution", data.get("solvable")))
        target = _formula_of(data.get("target_formula"))
        if target is None:
            target = claimed_formula(corrected) or (
                claimed_formula(thought or "") if agrees else None
            )
        evaluation = data.get("evaluation")
        answers = [str(data[k]) for k in ("answer1", "answer2", "answer3", "answer4") if k in data]
        text = evaluation if isinstance(evaluation, str) else ("YES" if evaluation else "NO")
        return Correction(
            evaluation="; ".join([*answers, text]) if answers else text,
            corrected_thought=corrected,
            solvable=solvable,
            agrees=agrees,
            source=self.source,
            action=fix_action if not agrees else (action or fix_action),
            target_formula=target,
            details={"raw": dict(data)},
        )

    def _ask(self, messages: list[dict[str, Any]], tools: bool, ops: Sequence[str]) -> str | None:
        """One model answer, running any ``solve24`` calls it makes along the way."""
        kwargs: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        for round_ in range(self.max_tool_rounds + 1):
            allow = tools and round_ < self.max_tool_rounds
            call_kwargs = {**kwargs, "tools": [SOLVE24_TOOL]} if allow else kwargs
            response = self._http.create_with_retries(messages, call_kwargs)
            message = response.choices[0].message
            calls = getattr(message, "tool_calls", None) or []
            if not calls or not allow:
                return message.content
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content or "",
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                        for call in calls
                    ],
                }
            )
            for call in calls:
                self._counts["tool_calls"] += 1
                if call.function.name == "solve24":
                    result = solve24_tool(call.function.arguments, ops)
                else:
                    result = json.dumps({"error": f"unknown tool {call.function.name!r}"})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return None
