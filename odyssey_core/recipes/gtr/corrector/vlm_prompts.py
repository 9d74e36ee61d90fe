"""What the ``openai`` corrector asks, one prompt per game (GTR App. C gives Points24's and
ALFWorld's; the others follow the same shape), written for this project.

Each game's prompt has a system part (the game's rules and moves, from the env's own legal
actions and target) and a query (the step's state, the agent's thought and action, the
questions that judge them, and the JSON reply the parser reads: ``answer1``..., ``evaluation``
YES or NO, ``correction`` as a thought in the agent's own format, ``action``). The thought
formats are the agents' (:mod:`odyssey_core.recipes.gtr.prompts`,
:data:`~odyssey_core.recipes.gtr.corrector.alfworld.ALFWORLD_SYSTEM_PROMPT`), so a cloned
correction reads like the agent's own answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odyssey_core.recipes.gtr.corrector.base import StepToCorrect

__all__ = [
    "CORRECTOR_GAMES",
    "CORRECTOR_ROLE",
    "NOT_DETERMINED",
    "CorrectorPrompt",
    "StepQuery",
    "corrector_prompt",
    "corrector_query",
    "corrector_system_prompt",
]

NOT_DETERMINED = "NOT DETERMINED"

CORRECTOR_ROLE = (
    "You check and correct the reasoning of an agent that acts from pictures: judge its "
    "thought and action, then write the thought it should have had."
)

# The query lines of one step; the str is the target formula the corrections steer toward.
StepQuery = Callable[[StepToCorrect, str | None], list[str]]

_TITLES = {"points24": "Points24 (the 24-point card game)", "ezpoints": "EZPoints"}


def _quoted(actions: Sequence[str]) -> str:
    return ", ".join(f"'{a}'" for a in actions)


def _legal(info: Mapping[str, Any]) -> list[str]:
    return [str(a) for a in info.get("legal_actions", ())]


def _reply(answers: int, extra: str, correction: str, action: str) -> str:
    keys = ", ".join(f'"answer{i}": "..."' for i in range(1, answers + 1))
    return (
        "Answer briefly, then judge. Reply with one JSON object and nothing else:\n"
        f'{{{keys}, "evaluation": "YES if the thought is correct, else NO", {extra}'
        f'"correction": <null if the thought is correct, else the correct thought as a JSON '
        f'object: {correction}>, "action": "<{action}; null if the thought is correct>"}}'
    )


# -- formula games: Points24 and EZPoints (App. C's Points24 prompt) --------------------------


def _formula_system(info: Mapping[str, Any]) -> str:
    game = str(info.get("game"))
    n = len(info.get("cards", ())) or "the"
    return (
        f"You are an expert player of {_TITLES.get(game, game)}. You observe {n} playing cards "
        "in the image and the current formula. The goal is a formula that evaluates to "
        f"{info.get('target')} and uses each card's number exactly once. Each step appends one "
        f"of [{_quoted(_legal(info))}] to the current formula, toward a correct target "
        "formula. 'J', 'Q' and 'K' count as '10', 'A' as '1'."
    )


_FORMULA_QUESTIONS = (
    "The player's thought may be wrong. Judge it by these questions:\n"
    "(1) Which cards does the picture show? If the target formula is NOT DETERMINED, call "
    "solve24 with their values to get every correct formula (keep the list to yourself).\n"
    "(2) Which card ranks does the thought name? Do they match yours, in any order?\n"
    "(3) Which formula does the thought aim for? Is it the target formula or, when that is NOT "
    "DETERMINED, one of the correct formulas, and can the current formula still become it?\n"
    "(4) Does the action append the next token of that formula (or is it '=' once the formula "
    "is complete)?\n"
    "If the thought is wrong, pick the next single token to append and write the thought the "
    "player should have had. "
    + _reply(
        4,
        '"possible_solution": <true or false: can the current formula still reach the target; '
        'null if the thought is correct>, "target_formula": "<the target formula if one is '
        "given; the thought's formula if the thought is correct; else a correct formula that "
        'extends the current formula>", ',
        '{"cards": [...], "formula": "<the target formula>", "thoughts": "<the next token and '
        'why>"}',
        "the next token to append",
    )
)


def _formula_query(step: StepToCorrect, target: str | None) -> list[str]:
    return [
        f"Task: {step.observation.text}",
        f"[Current Formula] '{step.info.get('formula', '')}'",
        f"[Thought] {step.thought or '(none)'}",
        f"[Action] {step.action}",
        f"[Target Formula] {target or NOT_DETERMINED}",
        _FORMULA_QUESTIONS,
    ]


# -- Numberline ---------------------------------------------------------------------------------


def _numberline_system(info: Mapping[str, Any]) -> str:
    plus, minus = [*_legal(info), "+", "-"][:2]
    return (
        "You are an expert player of Numberline. The image shows two numbers, 'Target' and "
        f"'Current'. Each step is '{plus}' (the current number goes up by one) or '{minus}' "
        "(it goes down by one); the game is won when the current number equals the target, "
        "and a step away from the target is penalised."
    )


_NUMBERLINE_QUESTIONS = (
    "The player's thought may be wrong. Judge it by these questions:\n"
    "(1) Which target number and which current number does the image show?\n"
    "(2) Does the thought read both numbers right?\n"
    "(3) Does the action move the current number one step toward the target (up when it is "
    "below the target, down when above), and does it follow from the thought?\n"
    "If the thought is wrong, write the thought the player should have had. "
    + _reply(
        3,
        "",
        '{"target": <n>, "current": <n>, "thoughts": "<which way to move and why>"}',
        "the right step",
    )
)


def _plain_query(questions: str) -> StepQuery:
    def query(step: StepToCorrect, target: str | None) -> list[str]:
        return [
            f"Task: {step.observation.text}",
            f"[Thought] {step.thought or '(none)'}",
            f"[Action] {step.action}",
            questions,
        ]

    return query


# -- Blackjack ----------------------------------------------------------------------------------


def _blackjack_system(info: Mapping[str, Any]) -> str:
    return (
        "You are an expert Blackjack player. The image shows the dealer's two cards, one face "
        "down, and all of the player's cards. Each step is one of "
        f"[{_quoted(_legal(info) or ['stand', 'hit'])}]: 'hit' draws another card, 'stand' "
        "ends the player's turn and the dealer then draws to 17 or more. The player wins with "
        "a total nearer 21 than the dealer's without going over 21. J, Q and K count 10; an "
        "ace counts 11 unless that takes the total over 21, then 1."
    )


_BLACKJACK_QUESTIONS = (
    "The player's thought may be wrong. Judge it by these questions:\n"
    "(1) Which card does the dealer show face up, which cards does the player hold, and what "
    "is the player's total?\n"
    "(2) Does the thought read the dealer's card, the player's cards and the total right?\n"
    "(3) Is the action the better move for that total against the dealer's card (a card "
    "cannot bust a total of 11 or less; a high total risks going over, while a low total "
    "rarely beats a strong dealer card), and does it follow from the thought?\n"
    "If the thought is wrong, write the thought the player should have had. "
    + _reply(
        3,
        "",
        '{"dealer": "<rank>", "player": [...], "total": <n>, "thoughts": "<hit or stand and why>"}',
        "'hit' or 'stand'",
    )
)


# -- ALFWorld (App. C's ALFWorld prompt) --------------------------------------------------------


def _alfworld_system(info: Mapping[str, Any]) -> str:
    return (
        "You are an expert in ALFWorld's household tasks, done by a robot that sees the room "
        "as a picture (no text describes the scene). To finish a task the robot moves between "
        "furniture and appliances, finds and takes the object the task names, cleans it in a "
        "sink, heats it in a microwave, cools it in a fridge or looks at it under a lamp it "
        "switches on when the task asks for that, and puts it where the task says. In the "
        "picture the place the robot stands at has a yellow frame and shows its contents when "
        "open; the top bar shows what the robot holds."
    )


_ALFWORLD_QUESTIONS = (
    "The robot's thought may be wrong. Judge it by these questions:\n"
    "(1) What does the picture show: where does the robot stand, which objects are in sight, "
    "and what does it hold? Does the thought see the same?\n"
    "(2) From the task and the actions so far, what is the robot's next sub-goal (first take "
    "the object; then clean, heat or cool it or switch on the lamp if the task says so; last "
    "put it in place)? Does the thought aim at that sub-goal?\n"
    "(3) Is the action one of the admissible actions and a step toward that sub-goal, and not "
    "a repeat of an action that changed nothing? When the object is not in sight, going to a "
    "place not searched yet is the right step.\n"
    "If the thought is wrong, choose the one admissible action that best moves the task on "
    "and write the thought the robot should have had. "
    + _reply(
        3,
        "",
        '{"location": "<where the robot stands>", "holding": "<what it holds or nothing>", '
        '"subgoal": "<the next sub-goal>", "thoughts": "<the next action and why>"}',
        "one admissible action",
    )
)


def _alfworld_query(step: StepToCorrect, target: str | None) -> list[str]:
    history = [str(a) for a in step.info.get("history", ())]
    done = "; ".join(f"{i + 1}. {a}" for i, a in enumerate(history)) or "none yet"
    return [
        f"[Task] {step.info.get('task') or step.observation.text}",
        f"[Previous Actions] {done}",
        f"[Admissible Actions] {', '.join(_legal(step.info))}",
        f"[Thought] {step.thought or '(none)'}",
        f"[Action] {step.action}",
        _ALFWORLD_QUESTIONS,
    ]


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorrectorPrompt:
    """One game's corrector prompt: its system part and the query of one step."""

    system: Callable[[Mapping[str, Any]], str]
    query: StepQuery


CORRECTOR_GAMES: dict[str, CorrectorPrompt] = {
    "points24": CorrectorPrompt(_formula_system, _formula_query),
    "ezpoints": CorrectorPrompt(_formula_system, _formula_query),
    "numberline": CorrectorPrompt(_numberline_system, _plain_query(_NUMBERLINE_QUESTIONS)),
    "blackjack": CorrectorPrompt(_blackjack_system, _plain_query(_BLACKJACK_QUESTIONS)),
    "alfworld": CorrectorPrompt(_alfworld_system, _alfworld_query),
}


def corrector_prompt(info: Mapping[str, Any]) -> CorrectorPrompt:
    """The prompt of the game ``info["game"]`` names; an unknown game is an error."""
    game = str(info.get("game"))
    if game not in CORRECTOR_GAMES:
        known = ", ".join(sorted(CORRECTOR_GAMES))
        raise ValueError(
            f"the openai corrector has no prompt for game {game!r} (info['game']); it knows "
            f"{known}: add one to CORRECTOR_GAMES, or use another corrector"
        )
    return CORRECTOR_GAMES[game]


def corrector_system_prompt(info: Mapping[str, Any]) -> str:
    """The corrector's system prompt for the game in ``info`` (rules and moves)."""
    return corrector_prompt(info).system(info)


def corrector_query(step: StepToCorrect, target_formula: str | None = None) -> str:
    """The query of one step: its state, the agent's thought and action, the questions and
    the reply format."""
    return "\n".join(corrector_prompt(step.info).query(step, target_formula))
