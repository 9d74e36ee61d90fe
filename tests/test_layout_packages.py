"""The package layers, checked with import-linter's contracts (``[tool.importlinter]`` in
pyproject.toml), beside the module-level checks of ``tests/test_layout.py``.

* ``odyssey-layers``: every package of ``odyssey_core`` imports only the layers below it
  (``cli`` on top, then ``fidelity``, ``baselines``, ``recipes``, ``stages | eval | data``, ...,
  ``common`` at the bottom; ``a | b`` are independent siblings), and every package is in a layer
  (``exhaustive``). So no module under ``registry/``, ``eval/``, ``stages.py``, ``launch.py``,
  ``rl/``, ``rollout/``, ``policy/``, ``envs/`` or ``protocol/`` imports ``odyssey_core.recipes``;
  those layers find a recipe by name in :data:`odyssey_core.recipe.RECIPES`;
* ``orchestration-on-top``: ``flows -> tasks -> odyssey_core``;
* ``no-package-cycles``: no two sibling packages, at any depth, import each other.

Imports inside functions count, and so do those under ``if TYPE_CHECKING:``. The contracts are
also run on a throwaway copy of the package tree with one bad import planted, so each test below
is seen to fail on the import it is about.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
BELOW_RECIPES = (
    "registry",
    "eval",
    "stages",
    "launch",
    "rl",
    "rollout",
    "policy",
    "envs",
    "protocol",
)


def lint_imports(cwd: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts, the packages found from ``cwd`` first."""
    args = [str(LINT_IMPORTS), str(CONFIG), "--no-cache", "--no-logo"]
    for contract in contracts:
        args += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_package_contracts_hold() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_the_layers_put_recipes_above_every_package_that_must_not_import_them() -> None:
    import tomllib

    contracts = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["id"] == "odyssey-layers"]
    names = [[n.strip() for n in layer.split("|")] for layer in layers]
    recipes = next(i for i, layer in enumerate(names) if "recipes" in layer)
    below = {n for layer in names[recipes + 1 :] for n in layer}
    assert set(BELOW_RECIPES) <= below


# -- the contracts catch what they are for ---------------------------------------------------------


@pytest.fixture
def package_tree(tmp_path: Path) -> Path:
    """Empty stand-ins for every top-level module and package of ``odyssey_core``, ``tasks``
    and ``flows`` (what the contracts name), in a folder that shadows the real ones."""
    for package in ("odyssey_core", "tasks", "flows"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for child in (ROOT / "odyssey_core").iterdir():
        if child.is_dir() and (child / "__init__.py").is_file():
            (tmp_path / "odyssey_core" / child.name).mkdir()
            (tmp_path / "odyssey_core" / child.name / "__init__.py").write_text("")
        elif child.suffix == ".py" and child.name != "__init__.py":
            (tmp_path / "odyssey_core" / child.name).write_text("")
    return tmp_path


def plant(tree: Path, module: str, source: str) -> None:
    path = tree.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(tree).parents:
        if parent != Path(".") and not (tree / parent / "__init__.py").exists():
            (tree / parent / "__init__.py").write_text("")
    path.write_text(textwrap.dedent(source))


def test_the_stand_in_tree_keeps_every_contract(package_tree: Path) -> None:
    done = lint_imports(package_tree)
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.parametrize("below", BELOW_RECIPES)
def test_a_deferred_import_of_recipes_from_below_breaks_the_layers(
    package_tree: Path, below: str
) -> None:
    module = f"odyssey_core.{below}" if below in ("stages", "launch") else f"odyssey_core.{below}.x"
    plant(package_tree, "odyssey_core.recipes.gtr.recipe", "RECIPE = None\n")
    plant(
        package_tree,
        module,
        """
        def recipe():
            from odyssey_core.recipes.gtr.recipe import RECIPE

            return RECIPE
        """,
    )
    done = lint_imports(package_tree, "odyssey-layers")
    assert done.returncode == 1
    assert f"odyssey_core.{below} is not allowed to import odyssey_core.recipes" in done.stdout
    assert f"{module} -> odyssey_core.recipes.gtr.recipe" in done.stdout


def test_a_type_checking_import_counts_too(package_tree: Path) -> None:
    plant(
        package_tree,
        "odyssey_core.protocol.x",
        """
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            import odyssey_core.envs
        """,
    )
    done = lint_imports(package_tree, "odyssey-layers")
    assert done.returncode == 1
    assert "odyssey_core.protocol is not allowed to import odyssey_core.envs" in done.stdout


def test_a_cycle_between_two_recipes_breaks_the_acyclic_contract(package_tree: Path) -> None:
    """Sibling packages that the layers do not order (two recipes) may not import each other
    either: the cycle is found through imports deferred into functions on both sides."""
    plant(
        package_tree,
        "odyssey_core.recipes.gtr.a",
        "def f():\n    import odyssey_core.recipes.espo.b\n",
    )
    plant(
        package_tree,
        "odyssey_core.recipes.espo.b",
        "def g():\n    import odyssey_core.recipes.gtr.a\n",
    )
    assert lint_imports(package_tree, "odyssey-layers").returncode == 0
    done = lint_imports(package_tree, "no-package-cycles")
    assert done.returncode == 1
    assert "No cycles are allowed in odyssey_core.recipes." in done.stdout, done.stdout


def test_a_package_in_no_layer_breaks_the_layers(package_tree: Path) -> None:
    plant(package_tree, "odyssey_core.newcomer.x", "X = 1\n")
    done = lint_imports(package_tree, "odyssey-layers")
    assert done.returncode != 0
    assert "odyssey_core.newcomer" in done.stdout + done.stderr
