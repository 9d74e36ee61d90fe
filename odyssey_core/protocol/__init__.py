"""The agent protocol: legal actions, the tagged answer format, and the prompts that ask for it."""

from odyssey_core.protocol.actions import (
    GAMEBOY_BUTTONS,
    GAMEBOY_SPACE,
    ActionSpace,
    FallbackPolicy,
    resolve_action,
)
from odyssey_core.protocol.parsing import ParsedResponse, format_response, parse_response
from odyssey_core.protocol.prompts import (
    PROMPTS,
    PromptExample,
    PromptSpec,
    build_turn_text,
    get_system_prompt,
)

__all__ = [
    "GAMEBOY_BUTTONS",
    "GAMEBOY_SPACE",
    "PROMPTS",
    "ActionSpace",
    "FallbackPolicy",
    "ParsedResponse",
    "PromptExample",
    "PromptSpec",
    "build_turn_text",
    "format_response",
    "get_system_prompt",
    "parse_response",
    "resolve_action",
]
