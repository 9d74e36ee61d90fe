"""Fixtures the env tests share."""

from __future__ import annotations

import pytest

from odyssey_core.envs import make_env


@pytest.fixture()
def make_game_env(request, odland_rom):
    """Builds ``<game>-1-1`` envs (Super Mario Land from the user's ROM, skipping without one)
    and closes them after the test."""
    made = []

    def build(game: str, **kwargs):
        if game == "mario":
            kwargs["rom_path"] = request.getfixturevalue("sml_rom")  # skips without a ROM
        env = make_env(f"{game}-1-1", **kwargs)
        made.append(env)
        return env

    yield build
    for env in made:
        env.close()
