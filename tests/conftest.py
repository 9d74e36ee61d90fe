"""Shared test setup: no telemetry, a private Prefect home, and the packaged odland ROM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@pytest.fixture(autouse=True)
def _private_prefect_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect-home")))


@pytest.fixture(scope="session")
def odland_rom() -> Path:
    from odyssey_core.envs.pyboy.odland import packaged_rom

    rom = packaged_rom()
    assert rom.is_file(), f"packaged ROM missing at {rom}; run `make rom-update`"
    return rom


@pytest.fixture(scope="session")
def sml_rom() -> Path:
    path = os.environ.get("ODYSSEY_SML_ROM")
    if not path:
        pytest.skip("needs your Super Mario Land ROM: set ODYSSEY_SML_ROM to run this test")
    return Path(path)


@pytest.fixture(scope="module")
def prefect_server():
    """A temporary Prefect server for the flow tests of one module (Prefect's test harness)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
