"""The one lazy-export helper: a name's module is imported on first access and the name is
then cached; an unknown name is an AttributeError naming the package; ``dir()`` lists the
exports. The four packages that use it export exactly what they list."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odyssey_core.common.lazy import lazy_exports

PACKAGES = ("odyssey_core.data", "odyssey_core.models", "odyssey_core.serve", "odyssey_core.sft")


@pytest.fixture
def lazy_package(tmp_path: Path) -> Iterator[str]:
    """A package ``lazypkg`` exporting ``heavy_value`` from its submodule ``heavy``."""
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text(
        "from odyssey_core.common.lazy import lazy_exports\n"
        "LIGHT = 1\n"
        "_LAZY = lazy_exports(__name__, {'lazypkg.heavy': ('heavy_value',)})\n"
        "__all__ = ['LIGHT', *_LAZY.names]\n"
        "__getattr__, __dir__ = _LAZY.getattr, _LAZY.dir\n"
    )
    (root / "heavy.py").write_text("heavy_value = object()\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield "lazypkg"
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("lazypkg", "lazypkg.heavy"):
            sys.modules.pop(name, None)


def test_an_export_is_imported_on_first_access_and_then_cached(lazy_package: str) -> None:
    package = importlib.import_module(lazy_package)
    assert "lazypkg.heavy" not in sys.modules
    value = package.heavy_value
    assert value is sys.modules["lazypkg.heavy"].heavy_value
    assert vars(package)["heavy_value"] is value  # later lookups skip __getattr__


def test_an_unknown_name_is_an_attribute_error_naming_the_package(lazy_package: str) -> None:
    package = importlib.import_module(lazy_package)
    with pytest.raises(AttributeError, match=r"module 'lazypkg' has no attribute 'nope'"):
        _ = package.nope
    with pytest.raises(ImportError, match="nope"):
        exec("from lazypkg import nope", {})
    assert not hasattr(package, "nope")
    assert "lazypkg.heavy" not in sys.modules  # a miss imports nothing


def test_dir_lists_the_exports_before_and_after_they_are_loaded(lazy_package: str) -> None:
    package = importlib.import_module(lazy_package)
    listed = dir(package)
    assert {"LIGHT", "heavy_value"} <= set(listed) and listed == sorted(listed)
    _ = package.heavy_value
    assert dir(package).count("heavy_value") == 1


def test_relative_module_names_and_twice_exported_names_are_refused() -> None:
    with pytest.raises(ValueError, match=r"pkg: give '.loading' as an absolute dotted module"):
        lazy_exports("pkg", {".loading": ("load",)})
    with pytest.raises(ValueError, match=r"'load' is exported from pkg.a and pkg.b"):
        lazy_exports("pkg", {"pkg.a": ("load",), "pkg.b": ("load", "save")})
    assert lazy_exports("pkg", {"pkg.b": ("save", "load")}).names == ["load", "save"]


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_exports_what_it_lists(name: str) -> None:
    package = importlib.import_module(name)
    for export in package.__all__:
        assert getattr(package, export) is not None, export
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match=rf"module '{name}' has no attribute 'no_such_name'"):
        _ = package.no_such_name


def test_importing_the_packages_stays_cheap() -> None:
    """What laziness is for: none of the four packages imports torch or transformers."""
    probe = (
        f"import sys\nfor name in {PACKAGES!r}:\n    __import__(name)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'fastapi') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
