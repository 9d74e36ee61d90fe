"""Lazy package exports: a package names what it exports and where each name lives, and the
defining module is imported on first access, so ``import odyssey_core.models`` (the CLI does)
does not pull in transformers or torch.

In a package's ``__init__.py``::

    _EXPORTS = {"load_model": "odyssey_core.models.loading", ...}
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

A resolved name is stored in the package's namespace, so the next access is a plain lookup.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, which exports ``exports``: each
    name maps to the absolute dotted module that defines it under the same name."""
    relative = sorted(name for name, module in exports.items() if module.startswith("."))
    if relative:
        raise ValueError(
            f"{package}: give the modules of {relative} as absolute dotted names "
            f"(e.g. {package}.<module>)"
        )
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name]), name)
        setattr(sys.modules[package], name, value)  # the next access skips this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
