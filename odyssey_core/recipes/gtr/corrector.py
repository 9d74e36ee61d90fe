"""Thought correctors for GTR: judge the agent's thought each step and write a better one.

Two correctors share one interface (:class:`Corrector`):

* ``programmatic`` (the offline default) reads the env's privileged state from ``info`` and
  uses the exact solver, so its corrections are always right. It is what tests and CPU runs use.
* ``openai`` asks any OpenAI-compatible VLM, given the frame, the task, the agent's thought and
  action, the GTR questions (cards, card reading, target formula and its reachability, whether
  the action moves toward it). The model may call a ``solve24`` tool, which runs our solver.
  Its answer is a JSON object; a malformed one gets one retry with a reminder and is then
  treated as "no correction" (``Correction.valid`` is False), counted in ``metrics()``.

A trainer adds ``corrected_thought`` to the thought-cloning set only when ``valid``; ``agrees``
says whether the agent's own thought was judged right, and ``solvable is False`` is the signal
to truncate the episode (see :mod:`odyssey_core.recipes.gtr.rewards`).
"""

from __future__ import annotations

import json
import re
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from odyssey_core.common.registry import Registry
from odyssey_core.envs.base import Observation
from odyssey_core.envs.cards.render import RANKS, card_value
from odyssey_core.envs.cards.solver import (
    ALL_OPERATORS,
    completions,
    evaluate_tokens,
    solve,
    tokenize,
    uses_numbers,
)
from odyssey_core.protocol.gtr_format import format_gtr_response, parse_gtr_response

__all__ = [
    "CORRECTORS",
    "Correction",
    "Corrector",
    "OpenAICorrector",
    "ProgrammaticCorrector",
    "basic_strategy",
    "make_corrector",
    "solve24_tool",
]

FORMULA_GAMES = ("points24", "ezpoints")


@dataclass(frozen=True)
class Correction:
    """A corrector's verdict on one step."""

    evaluation: str
    corrected_thought: str
    solvable: bool | None
    agrees: bool
    source: str
    action: str | None = None  # the next action the corrected thought leads to, when known
    target_formula: str | None = None
    valid: bool = True  # False: the corrector gave no usable answer ("no correction")
    details: dict[str, Any] = field(default_factory=dict)

    def as_response(self) -> str | None:
        """The corrected thought followed by its action, in the agent's answer format."""
        if not self.valid or not self.corrected_thought or self.action is None:
            return None
        return format_gtr_response(self.corrected_thought, self.action)


class Corrector(ABC):
    """Judges ``(frame, thought, action)`` for one step; ``info`` is the env's step info."""

    source: str = ""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()  # what metrics() reports

    @abstractmethod
    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
    ) -> Correction: ...

    def correct_response(
        self, observation: Observation, response: str, info: Mapping[str, Any]
    ) -> Correction:
        """Parse a raw agent answer, then correct its thought."""
        parsed = parse_gtr_response(response, info.get("legal_actions", ()))
        thought = (
            parsed.thought if parsed.thought is not None else ("" if parsed.valid else response)
        )
        return self.correct(observation, thought, parsed.action, info)

    def metrics(self) -> dict[str, int]:
        return dict(self._counts)


# ------------------------------------------------------------------------ reading the thought
_RANK_RE = re.compile(r"\b(10|[2-9]|[ajqk]|ace|jack|queen|king|ten)(?![a-z])", re.IGNORECASE)
_WORD_RANK = {"ace": "A", "jack": "J", "queen": "Q", "king": "K", "ten": "10"}


def _rank_of(token: str) -> str | None:
    match = _RANK_RE.search(token.strip().strip("\"'"))
    if match is None:
        return None
    word = match.group(1).lower()
    return _WORD_RANK.get(word, word.upper())


def claimed_cards(thought: str) -> list[str] | None:
    """Ranks listed in a ``"cards": [...]`` field of the thought (``None`` when absent)."""
    match = re.search(r"cards?[\"']?\s*[:=]\s*\[([^\]]*)\]", thought or "", re.IGNORECASE)
    if match is None:
        return None
    ranks = [_rank_of(piece) for piece in match.group(1).split(",") if piece.strip()]
    return [r for r in ranks if r is not None]


def claimed_formula(thought: str) -> str | None:
    """The ``"formula": "..."`` the thought aims for, without a trailing ``= 24``."""
    match = re.search(r"formula[\"']?\s*[:=]\s*[\"']([^\"']*)[\"']", thought or "", re.IGNORECASE)
    if match is None:
        return None
    return match.group(1).split("=")[0].strip() or None


def _claimed_number(thought: str, word: str) -> int | None:
    match = re.search(rf"{word}[\"']?\D{{0,12}}?(\d+)", thought or "", re.IGNORECASE)
    return int(match.group(1)) if match else None


def basic_strategy(player_total: int, usable_ace: bool, dealer_rank: str) -> str:
    """A simplified basic strategy (no doubling/splitting): ``"hit"`` or ``"stand"``."""
    dealer = 11 if dealer_rank == "A" else card_value(dealer_rank)
    if usable_ace:
        if player_total >= 19:
            return "stand"
        if player_total == 18:
            return "stand" if dealer <= 8 else "hit"
        return "hit"
    if player_total >= 17:
        return "stand"
    if player_total <= 11:
        return "hit"
    if player_total == 12:
        return "stand" if 4 <= dealer <= 6 else "hit"
    return "stand" if dealer <= 6 else "hit"


def _verdict(parts: list[str], agrees: bool) -> str:
    return "; ".join(parts) + f". Verdict: {'CORRECT' if agrees else 'INCORRECT'}."


# ------------------------------------------------------------------------------ programmatic
class ProgrammaticCorrector(Corrector):
    """Ground-truth corrections from the env's privileged state and the exact solver."""

    source = "programmatic"

    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
    ) -> Correction:
        game = info.get("game")
        self._counts["corrections"] += 1
        thought = thought or ""
        if game in FORMULA_GAMES:
            result = self._formula(thought, action, info)
        elif game == "numberline":
            result = self._numberline(thought, action, info)
        elif game == "blackjack":
            result = self._blackjack(thought, action, info)
        else:
            raise ValueError(f"the programmatic corrector does not know the game {game!r}")
        self._counts["agreements" if result.agrees else "disagreements"] += 1
        return result

    def _formula(self, thought: str, action: str | None, info: Mapping[str, Any]) -> Correction:
        cards = [str(c)[:-1] for c in info["cards"]]  # "QS" -> "Q"
        values = [int(v) for v in info["card_values"]]
        target = int(info["target"])
        ops = tuple(info.get("operators", ALL_OPERATORS))
        parens = bool(info.get("parentheses", True))
        prefix = list(info.get("formula_tokens", tokenize(info.get("formula", ""))))
        current = "".join(prefix)
        parts: list[str] = []

        read = claimed_cards(thought)
        cards_ok: bool | None = None
        if read is None:
            parts.append("cards: not stated")
        else:
            cards_ok = Counter(card_value(r) for r in read) == Counter(values)
            parts.append(
                "cards: read correctly"
                if cards_ok
                else f"cards: misread ({', '.join(read) or 'none'} vs {', '.join(cards)})"
            )

        complete = evaluate_tokens(prefix) == target and Counter(uses_numbers(prefix)) == Counter(
            values
        )
        ways = completions(prefix, values, target, ops, parens)
        solvable_now = complete or bool(ways)

        proposed = claimed_formula(thought)
        formula_ok: bool | None = None
        plan: tuple[str, ...] | None = None
        if proposed is not None:
            p_tokens = tuple(tokenize(proposed))
            formula_ok = (
                evaluate_tokens(p_tokens) == target
                and Counter(uses_numbers(p_tokens)) == Counter(values)
                and p_tokens[: len(prefix)] == tuple(prefix)
            )
            parts.append(
                f"formula {proposed!r}: "
                + ("reaches the target from here" if formula_ok else "is not a reachable solution")
            )
            if formula_ok:
                plan = p_tokens
        else:
            parts.append("formula: not stated")
        if plan is None and ways:
            plan = ways[0]  # the shortest way to finish what is already typed

        nexts = {w[len(prefix)] if len(w) > len(prefix) else "=" for w in ways}
        if complete:
            nexts.add("=")
        expected = "=" if complete else (plan[len(prefix)] if plan else None)
        action_ok: bool | None = None
        if solvable_now:
            action_ok = action in nexts
            parts.append(f"action {action!r}: " + ("on track" if action_ok else "off track"))
        else:
            parts.append("action: no action can reach the target any more")
        agrees = cards_ok is not False and formula_ok is not False and action_ok is not False
        if not solvable_now:
            agrees = False

        shown_cards = ", ".join(json.dumps(c) for c in cards)
        numbers = ", ".join(str(v) for v in values)
        if not info.get("solvable", True):
            why = f"No formula using {numbers} once each makes {target}, so this deal is lost."
        elif not solvable_now:
            why = (
                f"The formula so far, '{current}', can no longer be finished to make {target} "
                "with the numbers left."
            )
        elif complete:
            why = f"The formula '{current}' already uses every card and makes {target}, so '='."
        else:
            assert plan is not None and expected is not None
            where = f"The formula so far is '{current}'" if current else "The formula is empty"
            why = (
                f"The cards are worth {numbers}. {where}; it can become "
                f"'{''.join(plan)}' = {target}, so the next step is '{expected}'."
            )
        target_formula = "".join(plan) if plan and solvable_now else None
        corrected = (
            f'"cards": [{shown_cards}], "formula": "{target_formula or ""}", "thoughts": "{why}"'
        )
        return Correction(
            evaluation=_verdict(parts, agrees),
            corrected_thought=corrected,
            solvable=solvable_now,
            agrees=agrees,
            source=self.source,
            action=expected if solvable_now else None,
            target_formula=target_formula,
            details={"cards_ok": cards_ok, "formula_ok": formula_ok, "action_ok": action_ok},
        )

    def _numberline(self, thought: str, action: str | None, info: Mapping[str, Any]) -> Correction:
        target, current = int(info["target"]), int(info["current"])
        said_target, said_current = (
            _claimed_number(thought, "target"),
            _claimed_number(thought, "current"),
        )
        read_ok: bool | None = None
        parts = []
        if said_target is None and said_current is None:
            parts.append("numbers: not stated")
        else:
            read_ok = said_target in (None, target) and said_current in (None, current)
            parts.append("numbers: read correctly" if read_ok else "numbers: misread")
        expected = "=" if current == target else ("+" if current < target else "-")
        action_ok = action == expected
        parts.append(f"action {action!r}: " + ("moves toward the target" if action_ok else "wrong"))
        agrees = read_ok is not False and action_ok
        side = "below" if current < target else "above"
        why = (
            f"The current number {current} is {side} the target {target}, so I press '{expected}'."
        )
        corrected = f'"target": {target}, "current": {current}, "thoughts": "{why}"'
        return Correction(
            evaluation=_verdict(parts, agrees),
            corrected_thought=corrected,
            solvable=True,
            agrees=agrees,
            source=self.source,
            action=expected,
            details={"cards_ok": read_ok, "action_ok": action_ok},
        )

    def _blackjack(self, thought: str, action: str | None, info: Mapping[str, Any]) -> Correction:
        total, usable = int(info["player_total"]), bool(info["usable_ace"])
        dealer = str(info["dealer_visible"])[:-1]
        player = [str(c)[:-1] for c in info["player_cards"]]
        said_total = _claimed_number(thought, "total")
        read_ok = None if said_total is None else said_total == total
        parts = [
            "total: not stated"
            if read_ok is None
            else ("total: read correctly" if read_ok else f"total: misread ({said_total})")
        ]
        expected = basic_strategy(total, usable, dealer)
        action_ok = action == expected
        parts.append(f"action {action!r}: " + ("sound" if action_ok else "against basic strategy"))
        agrees = read_ok is not False and action_ok
        soft = " (an ace counted as 11)" if usable else ""
        why = (
            f"My cards {', '.join(player)} total {total}{soft} and the dealer shows {dealer}; "
            f"basic strategy says {expected}."
        )
        shown = ", ".join(json.dumps(c) for c in player)
        corrected = (
            f'"dealer": "{dealer}", "player": [{shown}], "total": {total}, "thoughts": "{why}"'
        )
        return Correction(
            evaluation=_verdict(parts, agrees),
            corrected_thought=corrected,
            solvable=None,
            agrees=agrees,
            source=self.source,
            action=expected,
            details={"cards_ok": read_ok, "action_ok": action_ok},
        )


# ------------------------------------------------------------------------------------ openai
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

_SYSTEM = (
    "You check the reasoning of an agent that plays a card game from pictures. You see the "
    "picture the agent saw, the task, the agent's thought and the action it chose. Look at the "
    "picture yourself, decide whether the thought is right, and write the thought the agent "
    "should have had. Ace counts 1; J, Q and K count 10."
)

_QUESTIONS = (
    "Work through these, briefly:\n"
    "1. Which cards does the picture show?\n"
    "2. Does the thought name the same cards (in any order)?\n"
    "3. Which formula is the thought aiming for, and can it still be reached from the current "
    "formula? You may call solve24 with the card values to get every correct formula.\n"
    "4. Does the chosen action move toward that formula (or is it '=' once the formula is "
    "complete)?\n"
    "Reply with one JSON object and nothing else:\n"
    '{"evaluation": "<your short answers, ending in CORRECT or INCORRECT>", '
    '"corrected_thought": "<the thought the agent should have had, naming the cards, the '
    'formula to reach and the next step>", "solvable": <true, false or null>}'
)

_REMINDER = (
    "That reply was not a valid JSON object with the keys evaluation, corrected_thought and "
    "solvable. Send only that JSON object."
)


def _values_from(cards: Sequence[Any]) -> list[int]:
    values = []
    for card in cards:
        if isinstance(card, int | float) and not isinstance(card, bool):
            values.append(int(card))
            continue
        rank = _rank_of(str(card))
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
    """The JSON object in a reply (code fences and chatter around it allowed), or ``None``."""
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
        if (
            isinstance(data, dict)
            and isinstance(data.get("evaluation"), str)
            and isinstance(data.get("corrected_thought"), str)
        ):
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
    text = str(data.get("evaluation", "")).strip().lower()
    tail = text[-40:]
    if "incorrect" in tail or text.startswith("no"):
        return False
    return "correct" in tail or text.startswith("yes")


class OpenAICorrector(Corrector):
    """A VLM corrector behind any OpenAI-compatible endpoint, with a ``solve24`` tool.

    Requests go through :class:`~odyssey_core.policy.openai_backend.OpenAIPolicy`'s retry
    loop (backoff, ``Retry-After``, clear 401/404 errors). ``max_tool_rounds`` bounds how many
    times the model may call the tool per correction.
    """

    source = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        temperature: float = 0.4,  # GTR Table 2: corrector temperature
        max_tokens: int = 600,  # GTR Table 2: corrector max text length
        max_tool_rounds: int = 3,
        use_tools: bool = True,
        timeout: float = 120.0,
        retry: Any = None,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        from odyssey_core.policy.openai_backend import OpenAIPolicy

        super().__init__()
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_tool_rounds = max_tool_rounds
        self.use_tools = use_tools
        self._http = OpenAIPolicy(
            model,
            base_url,
            api_key,
            api_key_env=api_key_env,
            system_prompt=_SYSTEM,
            timeout=timeout,
            retry=retry,
            client=client,
            sleep=sleep,
            concurrency=1,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self._http.base_url!r})"

    def metrics(self) -> dict[str, int]:
        out = {
            k: 0
            for k in ("corrections", "tool_calls", "malformed", "format_retries", "no_correction")
        }
        out.update(self._counts)
        out.update({f"http_{k}": v for k, v in self._http.metrics().items()})
        return out

    def messages(
        self, observation: Observation, thought: str | None, action: str | None, info: Mapping
    ) -> list[dict[str, Any]]:
        from odyssey_core.policy.openai_backend import encode_image_data_url

        lines = [f"Task: {observation.text}"]
        if info.get("game") in FORMULA_GAMES:
            lines.append(f"Current formula: '{info.get('formula', '')}'")
            lines.append(f"Target value: {info.get('target')}")
        lines += [
            f"Agent's thought: {thought or '(none)'}",
            f"Agent's action: {action}",
            _QUESTIONS,
        ]
        image = {
            "type": "image_url",
            "image_url": {"url": encode_image_data_url(observation.image)},
        }
        return [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": [image, {"type": "text", "text": "\n".join(lines)}]},
        ]

    def correct(
        self,
        observation: Observation,
        thought: str | None,
        action: str | None,
        info: Mapping[str, Any],
    ) -> Correction:
        self._counts["corrections"] += 1
        messages = self.messages(observation, thought, action, info)
        ops = tuple(info.get("operators", ALL_OPERATORS))
        tools = self.use_tools and info.get("game") in FORMULA_GAMES
        data = None
        for attempt in range(2):  # the first answer, then one retry with a reminder
            content = self._ask(messages, tools, ops)
            data = parse_correction_json(content)
            if data is not None:
                break
            self._counts["malformed"] += 1
            if attempt == 0:
                self._counts["format_retries"] += 1
                messages += [
                    {"role": "assistant", "content": content or ""},
                    {"role": "user", "content": _REMINDER},
                ]
        if data is None:
            self._counts["no_correction"] += 1
            return Correction(
                evaluation="",
                corrected_thought="",
                solvable=None,
                agrees=True,  # no grounds to overrule the agent; trainers skip invalid ones
                source=self.source,
                valid=False,
            )
        corrected = data["corrected_thought"]
        parsed = parse_gtr_response(corrected, info.get("legal_actions", ()))
        return Correction(
            evaluation=data["evaluation"],
            corrected_thought=(parsed.thought or corrected) if parsed.valid else corrected,
            solvable=_as_bool(data.get("solvable")),
            agrees=_judged_correct(data),
            source=self.source,
            action=parsed.action,
            target_formula=data.get("target_formula") or claimed_formula(corrected),
            details={"raw": data},
        )

    def _ask(self, messages: list[dict[str, Any]], tools: bool, ops: Sequence[str]) -> str | None:
        """One model answer, running any ``solve24`` calls it makes along the way."""
        kwargs: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        for round_ in range(self.max_tool_rounds + 1):
            allow = tools and round_ < self.max_tool_rounds
            call_kwargs = {**kwargs, "tools": [SOLVE24_TOOL]} if allow else kwargs
            # Reuse the policy backend's retry loop rather than a second copy of it.
            response = self._http._create_with_retries(messages, call_kwargs)
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


CORRECTORS: Registry[Callable[..., Corrector]] = Registry("corrector")
CORRECTORS.register("programmatic", ProgrammaticCorrector)
CORRECTORS.register("openai", OpenAICorrector)
CORRECTORS.register("alfworld", "odyssey_core.recipes.gtr.alfworld_corrector:AlfWorldCorrector")


def make_corrector(name: str = "programmatic", **kwargs: Any) -> Corrector:
    """Build a registered corrector (``programmatic`` needs no arguments)."""
    return CORRECTORS.get(name)(**kwargs)
