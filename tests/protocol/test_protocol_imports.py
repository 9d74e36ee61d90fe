"""The protocol is the bottom of the agent stack: importing it, in a fresh interpreter, loads
neither gymnasium nor any package above it (envs, agents, rollout, rl, recipes)."""

from __future__ import annotations

import json
import subprocess
import sys

ABOVE = ("envs", "agents", "rollout", "rl", "recipes")


def _modules_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(done.stdout))


def test_importing_the_protocol_loads_no_env_and_no_gymnasium() -> None:
    for statement in (
        "import odyssey_core.protocol",
        "from odyssey_core.protocol.formats import RESPONSE_FORMATS",
        "from odyssey_core.protocol.gui import parse_gui_answer",
    ):
        loaded = _modules_after(statement)
        assert "odyssey_core.protocol.gui" in loaded, statement
        assert "gymnasium" not in loaded, statement
        above = sorted(m for m in loaded if any(m.startswith(f"odyssey_core.{p}") for p in ABOVE))
        assert above == [], (statement, above)


def test_the_espo_format_parses_in_that_light_process() -> None:
    statement = (
        "from odyssey_core.protocol import RESPONSE_FORMATS\n"
        "parsed = RESPONSE_FORMATS.get('espo').parse("
        '\'<think>t</think><answer>{"action": "click", "point": [1e999, 5]}</answer>\')\n'
        "assert parsed.action is None and not parsed.valid, parsed"
    )
    assert "gymnasium" not in _modules_after(statement)
