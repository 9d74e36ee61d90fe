"""docs/paper_map.md names, per paper element, the code and the test that pins it: every test it
names exists, and every code path it names is in the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "paper_map.md"
TICKED = re.compile(r"`([^`]+)`")


def rows() -> list[list[str]]:
    lines = [ln for ln in PAGE.read_text().splitlines() if ln.startswith("| ")]
    table = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    return [r for r in table if r[0] not in {"element", "---"} and not r[0].startswith("---")]


def defined_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def test_every_pinning_test_exists() -> None:
    checked = 0
    for row in rows():
        current: Path | None = None
        for ref in TICKED.findall(row[3]):
            file, _, name = ref.partition("::")
            if file:
                current = REPO / "tests" / file
                assert current.is_file(), f"{row[0]}: no test file {file}"
            assert current is not None, f"{row[0]}: {ref!r} names no file"
            if name:  # a bare file: the whole file pins the element
                assert name in defined_functions(current), f"{row[0]}: no {name} in {current.name}"
            checked += 1
    assert checked >= 40


def test_every_code_path_exists() -> None:
    for row in rows():
        for ref in TICKED.findall(row[2]):
            path = ref.split("::")[0].split(" ")[0]
            if not path.endswith((".py", ".yaml", "/")):
                continue  # a name in the file named before it
            candidates = [REPO / path, REPO / "odyssey_core" / path]
            assert any(c.exists() for c in candidates), f"{row[0]}: no {path}"
