"""Game Boy button sets, the space of legal button combinations, and invalid-answer fallbacks.

An *action* is a tuple of button names pressed together for one agent turn. The agent may
press at most ``max_buttons`` buttons at once; ``"noop"`` is the null action (press nothing)
and never appears together with a real button.

Two orders matter here:

* ``normalize`` keeps the order the model wrote (first-seen), so a parsed answer can be
  written back out unchanged;
* ``canonical`` sorts by the order of ``ActionSpace.buttons``, which is the order used by
  ``legal_actions``; use it to compare, count or index actions.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, Protocol

GAMEBOY_BUTTONS: tuple[str, ...] = ("a", "b", "up", "down", "left", "right", "noop")


@dataclass(frozen=True)
class ActionSpace:
    """The legal buttons and how many may be pressed together in one turn."""

    buttons: tuple[str, ...] = GAMEBOY_BUTTONS
    max_buttons: int = 2
    null: str = "noop"

    def __post_init__(self) -> None:
        # Accept any iterable of names but store a tuple so the space stays hashable.
        names = tuple(self.buttons)
        object.__setattr__(self, "buttons", names)
        if not names:
            raise ValueError("an action space needs at least one button")
        for name in names:
            if not isinstance(name, str) or not name or name != name.strip().lower():
                raise ValueError(f"button names must be non-empty lowercase strings: {name!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate button names in {names!r}")
        if self.null not in names:
            raise ValueError(f"null button {self.null!r} is not one of {names!r}")
        if not isinstance(self.max_buttons, int) or self.max_buttons < 1:
            raise ValueError(f"max_buttons must be a positive int, got {self.max_buttons!r}")

    @cached_property
    def _legal(self) -> tuple[tuple[str, ...], ...]:
        # Computed once per space: the null action first, then combinations by size, each in
        # button order, so the listing is deterministic and indexable.
        real = [b for b in self.buttons if b != self.null]
        combos: list[tuple[str, ...]] = [(self.null,)]
        for size in range(1, self.max_buttons + 1):
            combos.extend(itertools.combinations(real, size))
        return tuple(combos)

    @cached_property
    def _legal_sets(self) -> frozenset[frozenset[str]]:
        return frozenset(frozenset(combo) for combo in self._legal)

    def legal_actions(self) -> list[tuple[str, ...]]:
        """Every legal combination, in canonical order: ``(null,)`` then sizes 1..max_buttons."""
        return list(self._legal)

    def normalize(self, buttons: Iterable[str] | str) -> tuple[str, ...]:
        """Lowercase, deduplicate (first-seen order), drop the null button next to real ones.

        An empty input becomes ``(null,)``. Unknown names raise ``ValueError``; the number of
        buttons is *not* checked here (see ``is_legal``).
        """
        if isinstance(buttons, str):  # a lone name, not an iterable of characters
            buttons = (buttons,)
        seen: list[str] = []
        for raw in buttons:
            name = str(raw).strip().lower()
            if name not in self.buttons:
                raise ValueError(f"unknown button {raw!r}; legal: {', '.join(self.buttons)}")
            if name not in seen:
                seen.append(name)
        real = [name for name in seen if name != self.null]
        if real:
            return tuple(real)
        return (self.null,)

    def canonical(self, buttons: Iterable[str] | str) -> tuple[str, ...]:
        """``normalize`` then sort by the order of ``self.buttons`` (matches ``legal_actions``)."""
        order = {name: i for i, name in enumerate(self.buttons)}
        return tuple(sorted(self.normalize(buttons), key=order.__getitem__))

    def is_legal(self, buttons: Iterable[str] | str) -> bool:
        """Whether these buttons, as written (no normalization), form a legal action."""
        if isinstance(buttons, str):
            buttons = (buttons,)
        names = tuple(buttons)
        if len(set(names)) != len(names):
            return False
        return frozenset(names) in self._legal_sets

    def random_action(self, rng: Any) -> tuple[str, ...]:
        """A uniformly random legal action.

        ``rng`` is a ``random.Random`` or a ``numpy.random.Generator``; passing it explicitly
        keeps rollouts reproducible.
        """
        n = len(self._legal)
        if hasattr(rng, "integers"):  # numpy Generator
            index = int(rng.integers(n))
        elif hasattr(rng, "randrange"):  # random.Random (or the random module itself)
            index = rng.randrange(n)
        else:
            raise TypeError(f"rng must be random.Random or numpy Generator, got {type(rng)!r}")
        return self._legal[index]


GAMEBOY_SPACE = ActionSpace()


class FallbackPolicy(StrEnum):
    """What to press when the model's answer cannot be used."""

    NOOP = "noop"
    RANDOM = "random"


class _HasButtons(Protocol):
    # Structural type so this module need not import the parser (which imports it).
    @property
    def valid(self) -> bool: ...

    @property
    def buttons(self) -> tuple[str, ...]: ...


def resolve_action(
    parsed: _HasButtons | None,
    space: ActionSpace = GAMEBOY_SPACE,
    fallback: FallbackPolicy | str = FallbackPolicy.NOOP,
    rng: random.Random | Any | None = None,
) -> tuple[tuple[str, ...], bool]:
    """Turn a parsed answer into buttons to press: ``(buttons, used_fallback)``.

    A valid answer whose buttons are legal in ``space`` is pressed as written (normalized).
    Anything else (invalid answer, ``None``, buttons from another space) falls back to the
    null action or to a uniformly random legal action, and the flag is ``True`` so the
    trainer can penalize or log it. The random policy requires ``rng``.
    """
    policy = FallbackPolicy(fallback)  # raises ValueError on an unknown policy name
    if parsed is not None and getattr(parsed, "valid", False):
        buttons = tuple(getattr(parsed, "buttons", ()) or ())
        if buttons and space.is_legal(buttons):
            return space.normalize(buttons), False
    if policy is FallbackPolicy.RANDOM:
        if rng is None:
            raise ValueError("the 'random' fallback needs an rng for reproducibility")
        return space.random_action(rng), True
    return (space.null,), True
