"""The agent protocol: legal actions, answer formats (parsing and token masks), and prompts.

``RESPONSE_FORMATS`` maps a recipe's format name (``odysseus``, ``gtr``) to a
:class:`ResponseFormat` with ``parse(text, info)`` and
``token_masks(text, response_ids, tokenizer, info)``.
"""

from odyssey_core.protocol.actions import (
    GAMEBOY_BUTTONS,
    GAMEBOY_SPACE,
    ActionSpace,
    FallbackPolicy,
    resolve_action,
)
from odyssey_core.protocol.formats import (
    RESPONSE_FORMATS,
    GTRFormat,
    OdysseusFormat,
    ResponseFormat,
)
from odyssey_core.protocol.masks import token_char_offsets
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
    "RESPONSE_FORMATS",
    "ActionSpace",
    "FallbackPolicy",
    "GTRFormat",
    "OdysseusFormat",
    "ParsedResponse",
    "PromptExample",
    "PromptSpec",
    "ResponseFormat",
    "build_turn_text",
    "format_response",
    "get_system_prompt",
    "parse_response",
    "resolve_action",
    "token_char_offsets",
]
