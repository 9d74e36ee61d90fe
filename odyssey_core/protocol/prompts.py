"""System prompts and per-turn task text for the Game Boy platformer agents.

Each game gets a ``PromptSpec``: plain data (goal, button meanings, tips, a worked example)
that ``render`` turns into the system prompt. The output-format section and the example are
generated from the same code the parser uses (``format_response``), so the prompt can never
drift from what ``parse_response`` accepts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from odyssey_core.protocol.actions import ActionSpace
from odyssey_core.protocol.parsing import format_response

__all__ = ["PROMPTS", "PromptExample", "PromptSpec", "build_turn_text", "get_system_prompt"]


class PromptExample(BaseModel):
    """One worked turn shown in the prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    perception: str
    reasoning: str
    buttons: tuple[str, ...]


class PromptSpec(BaseModel):
    """Everything that varies between games in the system prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    game: str = Field(description="registry key, e.g. 'mario'")
    title: str = Field(description="name shown to the model")
    intro: str
    goal: str
    buttons: dict[str, str] = Field(description="button name -> what it does, in prompt order")
    # Presets use the Game Boy names from actions.GAMEBOY_BUTTONS.
    tips: list[str] = Field(default_factory=list)
    max_buttons: int = 2
    example: PromptExample

    @model_validator(mode="after")
    def _check(self) -> PromptSpec:
        # The prompt must describe exactly the buttons the parser accepts, and its example must
        # itself be a legal answer.
        space = self.action_space()  # validates names, "noop" and max_buttons
        action = space.normalize(self.example.buttons)
        if not space.is_legal(action):
            raise ValueError(f"example action {action!r} is not legal")
        return self

    def action_space(self) -> ActionSpace:
        return ActionSpace(buttons=tuple(self.buttons), max_buttons=self.max_buttons)

    def format_section(self) -> str:
        """The output-format instructions (shared wording across games)."""
        words = {1: "one", 2: "two", 3: "three", 4: "four"}
        count = words.get(self.max_buttons, str(self.max_buttons))
        noun = "button" if self.max_buttons == 1 else "buttons"
        names = ", ".join(self.buttons)
        return "\n".join(
            [
                "Answer every turn with exactly three tagged parts, in this order:",
                "<perception>what you see on the screen: your character, enemies, gaps, "
                "platforms, items</perception>",
                "<reasoning>what you will do next and why</reasoning>",
                "<answer>the buttons to press, as a list such as ['a', 'right']</answer>",
                f"You may press at most {count} {noun} at once (at least one; use noop to "
                f"wait). Choose from: {names}. "
                "Write the names exactly as given, in lowercase, with nothing else inside "
                "the answer tags. Do not write anything outside the three parts.",
            ]
        )

    def render(self) -> str:
        """The full system prompt text."""
        space = self.action_space()
        example = format_response(
            self.example.perception,
            self.example.reasoning,
            self.example.buttons,
            space=space,
        )
        button_lines = [f"- {name}: {text}" for name, text in self.buttons.items()]
        sections = [
            self.intro,
            f"Goal: {self.goal}",
            "Each turn you are shown the current screen. You choose which buttons to hold "
            "down until your next turn.",
            "Buttons:\n" + "\n".join(button_lines),
        ]
        if self.tips:
            sections.append("Tips:\n" + "\n".join(f"- {tip}" for tip in self.tips))
        sections.append(self.format_section())
        sections.append("Example answer:\n" + example)
        return "\n\n".join(sections)


def _buttons(hero: str) -> dict[str, str]:
    return {
        "a": f"jump. The longer it stays held (for example over consecutive turns), the "
        f"higher {hero} jumps.",
        "b": "run: hold it together with left or right to move faster and jump farther.",
        "up": "rarely useful; does nothing in most places.",
        "down": "rarely useful; crouch or enter a pipe where that is possible.",
        "left": "walk left (back toward the start).",
        "right": "walk right, toward the goal.",
        "noop": "press nothing and wait, e.g. to let an enemy pass or a platform arrive.",
    }


PROMPTS: dict[str, PromptSpec] = {
    "odland": PromptSpec(
        game="odland",
        title="odland",
        intro="You control the hero of odland, an open side-scrolling platformer for the "
        "Game Boy. The level scrolls as you move to the right.",
        goal="travel right through the level and reach the goal at its far end without "
        "losing a life.",
        buttons=_buttons("the hero"),
        tips=[
            "Enemies hurt you if you walk into them; landing on top of one defeats it.",
            "Falling into a gap or pit costs a life: jump across, ideally while moving right.",
            "If you have been stuck in the same spot for several turns, try something "
            "different, such as a longer jump or running first.",
        ],
        example=PromptExample(
            perception="The hero stands on flat ground. A gap opens a short distance ahead "
            "and an enemy walks toward me on the far side.",
            reasoning="I will jump forward now to clear the gap and aim to land on the enemy.",
            buttons=("a", "right"),
        ),
    ),
    "mario": PromptSpec(
        game="mario",
        title="Super Mario Land",
        intro="You are playing Super Mario Land on the Game Boy: a side-scrolling "
        "platformer where you control Mario. The screen follows Mario as he moves right.",
        goal="move Mario right through the level and reach the exit at its end before "
        "the timer runs out, without losing a life.",
        buttons=_buttons("Mario"),
        tips=[
            "Landing on top of an enemy such as a Goomba defeats it; touching one from the "
            "side hurts Mario.",
            "Falling into a gap or pit loses a life: jump across it while moving right.",
            "Jumping up into a block from below can release coins or a power-up; collecting "
            "coins is nice but reaching the exit matters most.",
            "Pipes and walls block the way: jump over them.",
            "If Mario has not moved for several turns, try something different, such as a "
            "higher jump or a running start.",
        ],
        example=PromptExample(
            perception="Mario is on the ground near the left edge. A Goomba is walking "
            "toward him and a pipe stands further right.",
            reasoning="Jumping while moving right lets Mario stomp the Goomba and keep "
            "going toward the pipe.",
            buttons=("a", "right"),
        ),
    ),
}


def get_system_prompt(game: str, overrides: dict[str, Any] | None = None) -> str:
    """The rendered system prompt for ``game`` (case-insensitive), with optional field overrides.

    ``overrides`` replaces ``PromptSpec`` fields (e.g. ``{"tips": []}``) and is validated like
    the presets; unknown games or fields raise ``ValueError``.
    """
    key = str(game).strip().lower()
    if key not in PROMPTS:
        raise ValueError(f"unknown game {game!r}; known games: {', '.join(sorted(PROMPTS))}")
    spec = PROMPTS[key]
    if overrides:
        # Re-validate so a bad override fails here, not as a confusing prompt at train time.
        spec = PromptSpec.model_validate({**spec.model_dump(), **overrides})
    return spec.render()


def build_turn_text(level: str, turn: int | None = None) -> str:
    """The short user message that accompanies each screenshot."""
    where = f"Level {level}" if turn is None else f"Level {level}, turn {turn}"
    return f"{where}. Look at the screen and choose the buttons to press next."
