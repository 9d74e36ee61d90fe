"""Answer formats: how a recipe's response text is parsed, and which tokens are thought/action.

A :class:`ResponseFormat` is the one place that knows a recipe's answer format. Policy
backends return plain text and token ids; whoever needs the parsed answer (the collector, the
trainer, evaluation) looks the format up by name in :data:`RESPONSE_FORMATS` and calls

* ``fmt.parse(text, info)``: the parsed answer (never raises), and
* ``fmt.token_masks(text, response_ids, tokenizer, info)``: ``(thought_mask, action_mask)``,
  one bool per response token,

where ``info`` is the env's info dict at the start of the turn (GTR reads its
``legal_actions``). Entries:

``odysseus``
    ``<perception>...</perception><reasoning>...</reasoning><answer>[...]</answer>``, parsed by
    :func:`~odyssey_core.protocol.parsing.parse_response` into a ``ParsedResponse``. A token is
    thought (action) when its characters overlap the thought (answer) span; both masks are
    false for whitespace between blocks, the eos token and text outside the tags; a (rare)
    token straddling the end of the thought and the start of the answer is in both.
``gtr``
    A free-form thought, then ``"action": "<a>"``, parsed by
    :func:`~odyssey_core.protocol.gtr_format.parse_gtr_response` into a ``GTRParsed``. Tokens
    that start before the end of the thought are thought; the rest (the key, its value, the
    closing punctuation and the end-of-turn token) are action. With no action key at all,
    every token that starts inside the text is thought (the env then plays a random action,
    which the text did not choose); with a key but no thought, every token is action.
``espo``
    The personalized GUI agent's ``<think>...</think><answer>{...}</answer>``, parsed by
    :func:`~odyssey_core.protocol.gui.parse_gui_answer` into a ``ParsedGuiAnswer``.
    A token is thought (action) when its characters overlap the think (answer) block's
    contents; the tags themselves, whitespace around the blocks and the eos token are in
    neither mask unless a token also covers content.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from odyssey_core.common.registry import Registry
from odyssey_core.protocol.actions import GAMEBOY_SPACE, ActionSpace
from odyssey_core.protocol.gtr_format import GTRParsed, parse_gtr_response
from odyssey_core.protocol.gui import ParsedGuiAnswer, parse_gui_answer
from odyssey_core.protocol.masks import span_token_masks, token_char_offsets, token_start_offsets
from odyssey_core.protocol.parsing import ParsedResponse, coerce_text, parse_response

__all__ = [
    "RESPONSE_FORMATS",
    "EspoFormat",
    "GTRFormat",
    "OdysseusFormat",
    "ResponseFormat",
    "SpanFormat",
]

Masks = tuple[list[bool], list[bool]]


class ResponseFormat(ABC):
    """One recipe's answer format: parsing and the thought/action split of the tokens."""

    name: str = ""

    @abstractmethod
    def parse(self, text: Any, info: Mapping[str, Any] | None = None) -> Any:
        """The parsed answer for ``text`` (never raises); ``info``: the env's info dict at
        the start of the turn."""

    def token_masks(
        self,
        text: str,
        response_ids: Sequence[int],
        tokenizer: Any,
        info: Mapping[str, Any] | None = None,
        *,
        parsed: Any | None = None,
    ) -> Masks:
        """``(thought_mask, action_mask)``, one bool per token of ``response_ids``.

        ``text`` is the decoded response (special tokens removed); ``parsed``, when given,
        must be ``self.parse(text, info)`` (it saves parsing twice)."""
        if parsed is None:
            parsed = self.parse(text, info)
        return self.masks_of(parsed, text, response_ids, tokenizer)

    @abstractmethod
    def masks_of(
        self, parsed: Any, text: str, response_ids: Sequence[int], tokenizer: Any
    ) -> Masks:
        """The token masks of a parsed answer."""

    @abstractmethod
    def serving_action(self, parsed: Any, info: Mapping[str, Any] | None = None) -> str:
        """The action a served model answers for a parsed answer, as one string (the
        format's fallback when the answer did not parse); ``info`` as for :meth:`parse`."""


class SpanFormat(ResponseFormat):
    """A format whose parse gives the thought's and the answer's character spans
    (``thought_span``, ``answer_span``): a token is thought (action) when its characters
    overlap that span."""

    def masks_of(
        self, parsed: Any, text: str, response_ids: Sequence[int], tokenizer: Any
    ) -> Masks:
        offsets = token_char_offsets(text, response_ids, tokenizer)
        return span_token_masks(offsets, parsed.thought_span, parsed.answer_span)


class OdysseusFormat(SpanFormat):
    """``<perception>/<reasoning>/<answer>`` over an :class:`ActionSpace` of buttons."""

    name = "odysseus"

    def __init__(self, space: ActionSpace = GAMEBOY_SPACE) -> None:
        self.space = space

    def parse(self, text: Any, info: Mapping[str, Any] | None = None) -> ParsedResponse:
        return parse_response(text, self.space)

    def serving_action(self, parsed: ParsedResponse, info: Mapping[str, Any] | None = None) -> str:
        """The buttons as a JSON list; ``["noop"]`` when the answer did not parse."""
        return json.dumps(list(parsed.buttons) if parsed.valid else ["noop"])


class GTRFormat(ResponseFormat):
    """The GTR / RL4VLM format: a thought, then ``"action": "<a>"`` (a legal action)."""

    name = "gtr"

    def parse(self, text: Any, info: Mapping[str, Any] | None = None) -> GTRParsed:
        legal = () if info is None else info.get("legal_actions", ())
        return parse_gtr_response(text, legal)

    def serving_action(self, parsed: GTRParsed, info: Mapping[str, Any] | None = None) -> str:
        """The legal action answered; an unparsable answer plays the first legal action (GTR's
        configured fallback), or "" when the turn lists none."""
        legal = list(() if info is None else info.get("legal_actions", ()))
        if parsed.valid and parsed.action is not None:
            return str(parsed.action)
        return str(legal[0]) if legal else ""

    def masks_of(
        self, parsed: GTRParsed, text: str, response_ids: Sequence[int], tokenizer: Any
    ) -> Masks:
        # the spans do not depend on the legal actions
        if parsed.action_span is None:
            boundary = len(coerce_text(text))
        else:  # the thought ends where its span ends; with no thought, the answer is all action
            boundary = parsed.thought_span[1] if parsed.thought_span is not None else 0
        thought = [start < boundary for start in token_start_offsets(response_ids, tokenizer)]
        return thought, [not t for t in thought]


class EspoFormat(SpanFormat):
    """The GUI agent's ``<think>`` / ``<answer>{action, point, input_text}</answer>``."""

    name = "espo"

    def parse(self, text: Any, info: Mapping[str, Any] | None = None) -> ParsedGuiAnswer:
        return parse_gui_answer(text)

    def serving_action(self, parsed: ParsedGuiAnswer, info: Mapping[str, Any] | None = None) -> str:
        """The GUI action as JSON; "" when no action could be read."""
        return "" if parsed.action is None else json.dumps(parsed.action.to_json())


#: name -> format instance, e.g. ``RESPONSE_FORMATS.get("gtr").parse(text, info)``
RESPONSE_FORMATS: Registry[ResponseFormat] = Registry("response format")
RESPONSE_FORMATS.register(OdysseusFormat.name, OdysseusFormat())
RESPONSE_FORMATS.register(GTRFormat.name, GTRFormat())
RESPONSE_FORMATS.register(EspoFormat.name, EspoFormat())
