"""The package layout, checked statically: every module of ``odyssey_core``, ``tasks`` and
``flows`` is parsed with ``ast`` (nothing is imported).

* no module uses a private name (one starting with ``_``, dunders aside) of another
  first-party module: ``from x import _y``, ``import x._y``, or ``x._y`` on an imported module;
* no import cycles among ``odyssey_core`` modules. Imports inside functions count (a deferred
  import that points back up a cycle is still a cycle); imports under ``if TYPE_CHECKING:``
  do not, and neither does the implicit import of a parent package (``import a.b.c`` runs
  ``a/b/__init__.py``, which is how packages work, not a cycle);
* ``odyssey_core`` never imports prefect (nor a ``prefect_*`` integration);
* the env packages (``envs/cards``, ``envs/alfworld``, ``envs/pyboy``) never import the env
  registry or the ``odyssey_core.envs`` package: their specs are data the registry reads.
"""

from __future__ import annotations

import ast
import itertools
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("odyssey_core", "tasks", "flows")
ENV_PACKAGES = ("odyssey_core.envs.cards", "odyssey_core.envs.alfworld", "odyssey_core.envs.pyboy")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@dataclass(frozen=True)
class Import:
    importer: str
    line: int
    target: str  # the absolute dotted module named by the statement
    names: tuple[str, ...]  # ``from target import names``; () for ``import target``
    asnames: tuple[str | None, ...]  # one per name (``from``) or one for ``import target``
    deferred: bool  # inside a function body
    type_only: bool  # under ``if TYPE_CHECKING:``

    @property
    def where(self) -> str:
        return f"{self.importer}:{self.line}"


@dataclass(frozen=True)
class Edge:
    line: int
    deferred: bool


class Codebase:
    """Parsed first-party modules: ``sources`` maps a dotted module name to its source;
    ``packages`` are the names whose source is a package's ``__init__.py``."""

    def __init__(self, sources: Mapping[str, str], packages: set[str] | frozenset[str]) -> None:
        self.trees = {name: ast.parse(text, filename=name) for name, text in sources.items()}
        self.packages = frozenset(packages)
        self._imports: dict[str, tuple[Import, ...]] = {}

    @classmethod
    def from_disk(cls, root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> Codebase:
        sources: dict[str, str] = {}
        package_names: set[str] = set()
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                    package_names.add(".".join(parts))
                sources[".".join(parts)] = path.read_text(encoding="utf-8")
        return cls(sources, package_names)

    @staticmethod
    def first_party(name: str) -> bool:
        return name.split(".")[0] in PACKAGES

    def absolute(self, module: str, level: int, name: str | None) -> str:
        """The module of ``from <level dots><name> import ...`` written inside ``module``."""
        if level == 0:
            return name or ""
        base = module.split(".")
        if module not in self.packages:
            base.pop()
        base = base[: len(base) - (level - 1)]
        return ".".join([*base, name] if name else base)

    def imports(self, module: str) -> tuple[Import, ...]:
        """Every import statement of ``module``, in functions and ``TYPE_CHECKING`` too."""
        if module in self._imports:
            return self._imports[module]
        found: list[Import] = []

        def visit(node: ast.AST, deferred: bool, type_only: bool) -> None:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.append(
                        Import(
                            module,
                            node.lineno,
                            alias.name,
                            (),
                            (alias.asname,),
                            deferred,
                            type_only,
                        )
                    )
            elif isinstance(node, ast.ImportFrom):
                target = self.absolute(module, node.level, node.module)
                names = tuple(a.name for a in node.names)
                asnames = tuple(a.asname for a in node.names)
                found.append(
                    Import(module, node.lineno, target, names, asnames, deferred, type_only)
                )
            inner = deferred or isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                for child in node.body:
                    visit(child, inner, True)
                for child in node.orelse:
                    visit(child, inner, type_only)
                return
            for child in ast.iter_child_nodes(node):
                visit(child, inner, type_only)

        visit(self.trees[module], False, False)
        self._imports[module] = tuple(found)
        return self._imports[module]

    def targets(self, imp: Import) -> Iterator[str]:
        """The first-party modules an import statement runs (their parent packages aside)."""
        if imp.names:
            plain = False
            for name in imp.names:
                if f"{imp.target}.{name}" in self.trees:
                    yield f"{imp.target}.{name}"
                else:
                    plain = True
            if plain and imp.target in self.trees:
                yield imp.target
            return
        target = imp.target
        while target and target not in self.trees:
            target = target.rpartition(".")[0]
        if target:
            yield target

    # -- (a) private names

    def _module_bindings(self, module: str) -> tuple[dict[str, str], set[str]]:
        """Local names bound to first-party modules, and every first-party module imported."""
        bound: dict[str, str] = {}
        imported: set[str] = set()
        for imp in self.imports(module):
            if not imp.names:
                if not self.first_party(imp.target):
                    continue
                imported.add(imp.target)
                if imp.asnames[0]:
                    bound[imp.asnames[0]] = imp.target
                else:
                    top = imp.target.split(".")[0]
                    bound[top] = top
                continue
            for name, asname in zip(imp.names, imp.asnames, strict=True):
                full = f"{imp.target}.{name}"
                if full in self.trees:
                    imported.add(full)
                    bound[asname or name] = full
        return bound, imported

    def private_name_uses(self) -> list[str]:
        found: list[str] = []
        for module in self.trees:
            for imp in self.imports(module):
                if not self.first_party(imp.target):
                    continue
                if any(_is_private(part) for part in imp.target.split(".")):
                    found.append(f"{imp.where}: imports the private module {imp.target}")
                for name in imp.names:
                    if _is_private(name):
                        found.append(f"{imp.where}: from {imp.target} import {name}")
            bound, imported = self._module_bindings(module)
            inner: set[int] = set()
            for node in ast.walk(self.trees[module]):
                if not isinstance(node, ast.Attribute) or id(node) in inner:
                    continue
                chain = [node.attr]
                value = node.value
                while isinstance(value, ast.Attribute):
                    inner.add(id(value))
                    chain.append(value.attr)
                    value = value.value
                if not isinstance(value, ast.Name) or value.id not in bound:
                    continue
                chain = [value.id, *chain[::-1]]
                current = bound[value.id]
                for k, part in enumerate(chain[1:], start=1):
                    if f"{current}.{part}" in self.trees or f"{current}.{part}" in imported:
                        current = f"{current}.{part}"  # still a module
                        continue
                    if _is_private(part):
                        dotted = ".".join(chain[: k + 1])
                        found.append(f"{module}:{node.lineno}: {dotted} (private in {current})")
                    break
        return sorted(set(found))

    # -- (b) cycles

    @cached_property
    def graph(self) -> dict[str, dict[str, Edge]]:
        """odyssey_core module -> {odyssey_core module it imports: an edge}, TYPE_CHECKING
        aside; a module-level import wins over a deferred one."""
        graph: dict[str, dict[str, Edge]] = {}
        for module in self.trees:
            if not module.startswith("odyssey_core"):
                continue
            edges: dict[str, Edge] = {}
            for imp in self.imports(module):
                if imp.type_only:
                    continue
                for target in self.targets(imp):
                    if not target.startswith("odyssey_core") or target == module:
                        continue
                    old = edges.get(target)
                    if old is None or (old.deferred and not imp.deferred):
                        edges[target] = Edge(imp.line, imp.deferred)
            graph[module] = edges
        return graph

    def import_cycles(self) -> list[str]:
        return [
            f"{component}: " + " -> ".join(one_cycle(self.graph, component))
            for component in strongly_connected(self.graph)
        ]

    # -- (c), (d)

    def imports_of(self, prefixes: tuple[str, ...], top_level: tuple[str, ...]) -> list[str]:
        """Imports in modules under ``prefixes`` of modules whose first name is in
        ``top_level`` (or starts with one of them followed by ``_``)."""
        found = []
        for module in self.trees:
            if not module.startswith(prefixes):
                continue
            for imp in self.imports(module):
                top = imp.target.split(".")[0]
                if top in top_level or top.startswith(tuple(f"{t}_" for t in top_level)):
                    found.append(f"{imp.where}: imports {imp.target}")
        return found

    def env_registry_imports(self) -> list[str]:
        found = []
        for module in self.trees:
            if not module.startswith(ENV_PACKAGES):
                continue
            for imp in self.imports(module):
                for target in self.targets(imp):
                    if target in ("odyssey_core.envs", "odyssey_core.envs.registry"):
                        found.append(f"{imp.where}: imports {target}")
        return found


def strongly_connected(graph: Mapping[str, Mapping[str, Edge]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components of more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def one_cycle(graph: Mapping[str, Mapping[str, Edge]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, each step with its line."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    path = [*path[::-1], start]
                    steps = []
                    for a, b in itertools.pairwise(path):
                        edge = graph[a][b]
                        how = "in a function" if edge.deferred else "module level"
                        steps.append(f"{a}:{edge.line} ({how})")
                    return [*steps, start]
                if child not in previous and child != start:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component


@cache
def codebase() -> Codebase:
    return Codebase.from_disk()


# -- the checks on this repository ----------------------------------------------------------


def test_no_module_uses_another_modules_private_names() -> None:
    found = codebase().private_name_uses()
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_no_import_cycles_in_odyssey_core() -> None:
    cycles = codebase().import_cycles()
    assert not cycles, "import cycles among odyssey_core modules:\n" + "\n".join(cycles)


def test_odyssey_core_never_imports_prefect() -> None:
    found = codebase().imports_of(("odyssey_core",), ("prefect",))
    assert not found, "odyssey_core imports prefect:\n" + "\n".join(found)


def test_env_packages_never_import_the_env_registry() -> None:
    found = codebase().env_registry_imports()
    assert not found, "env specs must be data the registry reads:\n" + "\n".join(found)


def test_the_checks_see_every_package() -> None:
    code = codebase()
    assert "odyssey_core.envs.registry" in code.trees and "odyssey_core.protocol" in code.packages
    assert any(m.startswith("tasks") for m in code.trees)
    assert any(m.startswith("flows") for m in code.trees)
    assert "odyssey_core.envs.cards.specs" in code.graph["odyssey_core.envs.registry"]


# -- the checkers themselves, on made-up code -----------------------------------------------


def _fake(**modules: str) -> Codebase:
    """Modules named with ``__`` for dots; a trailing ``__init`` marks a package."""
    sources, packages = {}, set()
    for key, text in modules.items():
        name = key.replace("__", ".")
        if name.endswith(".init"):
            name = name.removesuffix(".init")
            packages.add(name)
        sources[name] = textwrap.dedent(text)
    return Codebase(sources, packages)


def test_the_private_name_check_sees_every_form() -> None:
    code = _fake(
        odyssey_core__init="",
        odyssey_core__a="def _helper(): ...\n_TABLE = {}\n",
        odyssey_core__b="""
            import odyssey_core.a
            import odyssey_core.a as alias
            from odyssey_core import a
            from odyssey_core.a import _helper
            from . import a as rel
            from .a import _TABLE as table
            from os import _exit
            import numpy as np

            def f(obj):
                from odyssey_core.a import __doc__
                odyssey_core.a._TABLE, alias._helper(), a._helper, rel._TABLE
                a.public, obj._private, np._NoValue
        """,
    )
    assert code.private_name_uses() == [
        "odyssey_core.b:13: a._helper (private in odyssey_core.a)",
        "odyssey_core.b:13: alias._helper (private in odyssey_core.a)",
        "odyssey_core.b:13: odyssey_core.a._TABLE (private in odyssey_core.a)",
        "odyssey_core.b:13: rel._TABLE (private in odyssey_core.a)",
        "odyssey_core.b:5: from odyssey_core.a import _helper",
        "odyssey_core.b:7: from odyssey_core.a import _TABLE",
    ]


def test_the_cycle_check_counts_deferred_imports_but_not_type_checking_or_parents() -> None:
    code = _fake(
        odyssey_core__init="",
        odyssey_core__pkg__init="from odyssey_core.pkg.low import thing\n",
        odyssey_core__pkg__low="from odyssey_core.pkg.spec import Spec\n",  # runs pkg/__init__
        odyssey_core__pkg__spec="",
        odyssey_core__a="import odyssey_core.b\n",
        odyssey_core__b="from odyssey_core import c\n",
        odyssey_core__c="def f():\n    from odyssey_core.a import x\n",
        odyssey_core__d="""
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                import odyssey_core.e
        """,
        odyssey_core__e="import odyssey_core.d\n",
    )
    assert code.import_cycles() == [
        "['odyssey_core.a', 'odyssey_core.b', 'odyssey_core.c']: odyssey_core.a:1 (module level)"
        " -> odyssey_core.b:1 (module level) -> odyssey_core.c:2 (in a function) -> odyssey_core.a"
    ]


def test_the_prefect_and_env_registry_checks() -> None:
    code = _fake(
        odyssey_core__init="",
        odyssey_core__x="def f():\n    import prefect_aws\n",
        odyssey_core__envs__init="from odyssey_core.envs.registry import make_env\n",
        odyssey_core__envs__registry="from odyssey_core.envs.cards.specs import SPECS\n",
        odyssey_core__envs__cards__init="",
        odyssey_core__envs__cards__specs="from odyssey_core.envs.spec import EnvSpec\n",
        odyssey_core__envs__cards__games="from odyssey_core.envs import make_env\n",
        odyssey_core__envs__spec="",
        tasks__t="import prefect\n",
    )
    assert code.imports_of(("odyssey_core",), ("prefect",)) == [
        "odyssey_core.x:2: imports prefect_aws"
    ]
    assert code.env_registry_imports() == [
        "odyssey_core.envs.cards.games:1: imports odyssey_core.envs"
    ]
