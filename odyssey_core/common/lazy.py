"""Lazy package exports: a package names the modules it exports from and the names each one
defines, and a module is imported on first access to one of its names, so
``import odyssey_core.models`` (the CLI does) does not pull in transformers or torch.

In a package's ``__init__.py``::

    _LAZY = lazy_exports(__name__, {"odyssey_core.models.loading": ("load_model", ...)})
    __all__ = _LAZY.names
    __getattr__, __dir__ = _LAZY.getattr, _LAZY.dir

A resolved name is stored in the package's namespace, so the next access is a plain lookup.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["LazyExports", "lazy_exports"]


class LazyExports(NamedTuple):
    """A package's exported ``names`` (sorted) and the ``getattr`` / ``dir`` that serve them."""

    names: list[str]
    getattr: Callable[[str], Any]
    dir: Callable[[], list[str]]


def lazy_exports(package: str, modules: Mapping[str, Sequence[str]]) -> LazyExports:
    """The lazy exports of ``package``: ``modules`` maps each absolute dotted module to the
    names it defines and the package exports under the same names."""
    table: dict[str, str] = {}
    for module, names in modules.items():
        if module.startswith("."):
            raise ValueError(f"{package}: give {module!r} as an absolute dotted module name")
        for name in names:
            if name in table:
                raise ValueError(f"{package}: {name!r} is exported from {table[name]} and {module}")
            table[name] = module

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name]), name)
        setattr(sys.modules[package], name, value)  # the next access skips this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return LazyExports(sorted(table), __getattr__, __dir__)
