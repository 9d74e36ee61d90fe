"""The papers' comparisons at CPU scale, with training seeds and error bars.

``odyssey bench fidelity`` runs one or more comparisons end to end; each writes one report
(:mod:`odyssey_core.fidelity.report`) that puts the paper's claim, our measurement across seeds
and a verdict (:mod:`odyssey_core.fidelity.stats`) side by side. A comparison is a function
``FidelityRun -> FidelityReport`` registered in :data:`COMPARISONS`.
"""

from __future__ import annotations

from collections.abc import Callable

from odyssey_core.common.registry import Registry
from odyssey_core.fidelity.report import FidelityReport, check_report, write_report
from odyssey_core.fidelity.run import FidelityRun

__all__ = [
    "COMPARISONS",
    "PAPERS",
    "FidelityReport",
    "FidelityRun",
    "check_report",
    "comparisons_of",
    "write_report",
]

COMPARISONS: Registry[Callable[[FidelityRun], FidelityReport]] = Registry("fidelity comparison")
COMPARISONS.register("odysseus-estimators", "odyssey_core.fidelity.odysseus:run_estimators")
COMPARISONS.register("odysseus-sb3", "odyssey_core.fidelity.odysseus:run_sb3")
COMPARISONS.register("gtr", "odyssey_core.fidelity.gtr:run_gtr")
COMPARISONS.register("espo", "odyssey_core.fidelity.espo:run_espo")

#: The comparisons of each paper, in the order ``--paper`` runs them.
PAPERS: dict[str, tuple[str, ...]] = {
    "odysseus": ("odysseus-estimators", "odysseus-sb3"),
    "gtr": ("gtr",),
    "espo": ("espo",),
}


def comparisons_of(paper: str | None, comparison: str | None = None) -> list[str]:
    """The comparisons to run: one by name, a paper's, or all of them (``paper`` None/"all")."""
    if comparison is not None:
        if comparison not in COMPARISONS:
            known = ", ".join(COMPARISONS.names())
            raise ValueError(f"unknown comparison {comparison!r}; known: {known}")
        return [comparison]
    if paper in (None, "all"):
        return [name for names in PAPERS.values() for name in names]
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; known: {', '.join(PAPERS)}, all")
    return list(PAPERS[paper])
