"""The comparisons run the way ``odyssey bench fidelity`` runs them: torch on one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odyssey_core.fidelity.run import one_torch_thread


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    with one_torch_thread():
        yield
