"""Data curation for the light-SFT stage: walkthroughs -> frames -> teacher answers -> dataset.

Submodules: ``walkthroughs`` (record/import videos), ``sampling`` (uniform sampling, pHash
dedup), ``teachers`` (programmatic and OpenAI-compatible annotators), ``validation`` (Great
Expectations), ``dataset`` (the folder contract and local I/O) and ``cli`` (the pipeline and
``odyssey curate``). Names are imported lazily so ``import odyssey_core.data`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CuratedDataset": "dataset",
    "load_dataset": "dataset",
    "write_dataset": "dataset",
    "Walkthrough": "walkthroughs",
    "record_walkthrough": "walkthroughs",
    "import_video": "walkthroughs",
    "sample_frames": "sampling",
    "dct_phash": "sampling",
    "TEACHERS": "teachers",
    "make_teacher": "teachers",
    "validate_annotations": "validation",
    "CurateConfig": "cli",
    "curate": "cli",
    "load_curate_config": "cli",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'odyssey_core.data' has no attribute {name!r}")
    return getattr(importlib.import_module(f"odyssey_core.data.{_EXPORTS[name]}"), name)
