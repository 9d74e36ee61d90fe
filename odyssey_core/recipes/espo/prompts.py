"""The system prompt of the personalized GUI agent, written for this project.

It names exactly the action types :func:`~odyssey_core.protocol.gui.parse_gui_answer`
accepts and shows an answer made by :func:`~odyssey_core.protocol.gui.format_gui_answer`,
so the prompt cannot drift from the parser. The turn text (the user's request, the actions so
far, the screen size) comes from the environment's observation.
"""

from __future__ import annotations

from odyssey_core.protocol.gui import NO_TEXT, GuiAction, format_gui_answer

__all__ = ["ESPO_SYSTEM_PROMPT", "espo_system_prompt"]


def espo_system_prompt() -> str:
    """What the agent is told once per turn, before the screenshot and the turn text."""
    example = format_gui_answer(
        GuiAction("click", (112, 96), NO_TEXT),
        "The search form is open and the request names a city: tap the city field.",
    )
    return "\n".join(
        [
            "You operate a phone app for a user whose short request hides what they really "
            "want; the actions so far and the screen show it.",
            "Search: 'click' or 'type' at a point, 'scroll up/down/left/right', 'exit' "
            "(close a pop-up, go back), until the results fit the user.",
            "Pool: 'pool_found', input_text a short summary of what the user wants.",
            "Recommend: 'recommendation', input_text 'Yes' or 'No' for the candidate shown.",
            "One action per turn: <think>your reasoning</think> then <answer>{'action': ..., "
            "'point': [x, y], 'input_text': ...}</answer>. Points are screenshot pixels from "
            f"the top-left; no point: [-100, -100]; no text: '{NO_TEXT}'.",
            f"Example: {example}",
        ]
    )


ESPO_SYSTEM_PROMPT = espo_system_prompt()
