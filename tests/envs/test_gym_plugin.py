"""Gymnasium conventions, each checked in a fresh Python process that never imported Odyssey.

- The package declares Gymnasium's plugin entry point (group ``gymnasium.envs``, name =
  namespace ``odyssey``); running it the way Gymnasium's plugin loader does (inside
  ``registration.namespace(name)``) registers every env family, and ``gymnasium.make`` then
  builds odland, cards and ALFWorld envs; mario fails only for the missing ROM.
- Gymnasium 1.x's own zero-import form, ``gymnasium.make("odyssey_core.envs:odyssey/<name>")``.
- Envs close what they open: a few resets, steps and a close (and ``check_env``) with
  ``ResourceWarning`` turned into an error under ``python -X dev``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

FAMILIES = ("odland-1-1", "cards-points24", "cards-blackjack", "alfworld")


def _run(code: str, arg: object = None, *, timeout: float = 240) -> dict:
    """Run ``code`` in a fresh interpreter (ResourceWarning = error); return its last JSON line.

    ``arg`` reaches the code as ``json.loads(sys.argv[1])``.
    """
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false", "PYTHONWARNINGS": ""}
    env.pop("ODYSSEY_SML_ROM", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "dev",
            "-W",
            "error::ResourceWarning",
            "-c",
            textwrap.dedent(code),
            json.dumps(arg),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # An unraisable ResourceWarning (a file closed by the GC) is printed, not raised.
    assert "ResourceWarning" not in proc.stderr, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plugin_entry_point_registers_every_family_without_importing_odyssey() -> None:
    result = _run(
        """
        import json, sys
        from importlib.metadata import entry_points
        import gymnasium
        from gymnasium.envs.registration import namespace

        assert "odyssey_core" not in sys.modules
        plugins = [ep for ep in entry_points(group="gymnasium.envs") if ep.name == "odyssey"]
        assert len(plugins) == 1, plugins
        value = plugins[0].value
        # What Gymnasium's plugin loader does with an entry point of its group.
        with namespace(plugins[0].name):
            ids = plugins[0].load()()
        made = {}
        for name in json.loads(sys.argv[1]):
            env = gymnasium.make(f"odyssey/{name}")
            obs, info = env.reset(seed=0)
            made[name] = sorted(obs)
            env.close()
        try:
            gymnasium.make("odyssey/mario-1-1")
            mario = "made"
        except Exception as exc:
            mario = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"value": value, "ids": ids, "made": made, "mario": mario}))
        """,
        FAMILIES,
    )
    assert result["value"] == "odyssey_core.envs.registry:register_gym_envs"
    ids = set(result["ids"])
    for family in ("odland-", "mario-", "cards-", "alfworld"):
        assert any(i.startswith(f"odyssey/{family}") for i in ids), family
    assert {"odyssey/odland-1-1", "odyssey/mario-1-1", "odyssey/alfworld"} <= ids
    assert result["made"] == {name: ["image", "text"] for name in FAMILIES}
    assert result["mario"].startswith("RomError: Super Mario Land needs your own ROM")
    assert "ODYSSEY_SML_ROM" in result["mario"]


def test_register_gym_envs_is_idempotent_and_warns_about_no_override() -> None:
    result = _run(
        """
        import json, warnings
        import gymnasium
        from odyssey_core.envs.registry import register_gym_envs
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = register_gym_envs()
            second = register_gym_envs()
        print(json.dumps({"same": first == second, "n": len(first),
                          "warnings": [str(w.message) for w in caught]}))
        """
    )
    assert result["same"] and result["n"] >= 20
    assert not [w for w in result["warnings"] if "Overriding" in w]


def test_module_qualified_id_makes_each_family_in_a_fresh_process() -> None:
    result = _run(
        """
        import json, sys
        import gymnasium
        assert "odyssey_core" not in sys.modules
        made = {}
        for name in json.loads(sys.argv[1]):
            env = gymnasium.make(f"odyssey_core.envs:odyssey/{name}")
            env.reset(seed=1)
            made[name] = env.spec.id
            env.close()
        print(json.dumps(made))
        """,
        FAMILIES,
    )
    assert result == {name: f"odyssey/{name}" for name in FAMILIES}


@pytest.mark.parametrize("name", FAMILIES)
def test_env_closes_what_it_opens_under_resets_steps_close_and_check_env(name: str) -> None:
    result = _run(
        """
        import gc, json, sys, warnings
        warnings.simplefilter("error", ResourceWarning)
        import gymnasium
        import odyssey_core.envs  # noqa: F401
        from gymnasium.utils.env_checker import check_env

        name = json.loads(sys.argv[1])
        env = gymnasium.make(f"odyssey/{name}")
        with warnings.catch_warnings():
            # check_env's advice to pass the unwrapped env is not what this test is about.
            warnings.filterwarnings("ignore", message=".*different from the unwrapped.*")
            check_env(env, skip_render_check=True)
        legal = []
        for seed in range(3):
            obs, info = env.reset(seed=seed)
            legal = info.get("legal_actions") or ["noop"]
            env.step(legal[0])
        env.close()
        del env
        gc.collect()
        print(json.dumps({"ok": True}))
        """,
        name,
    )
    assert result == {"ok": True}
