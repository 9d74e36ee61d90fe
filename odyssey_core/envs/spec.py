"""What the registry knows about an environment: plain data, importable from anywhere.

Each env package lists its environments as a tuple of :class:`EnvSpec` in its own
``specs.py``; ``odyssey_core.envs.registry`` reads those tables and registers them. Neither
this module nor a ``specs.py`` imports the registry, so there is no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvSpec"]


@dataclass(frozen=True)
class EnvSpec:
    """One registered environment: ``entry_point`` (``"module:factory"``) is called with
    ``kwargs`` (and the caller's overrides) when the environment is made."""

    name: str
    entry_point: str  # "module:factory"
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
