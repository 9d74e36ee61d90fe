"""Data curation for the light-SFT stage: walkthroughs -> frames -> teacher answers -> dataset.

Submodules: ``walkthroughs`` (record/import videos), ``sampling`` (uniform sampling, pHash
dedup), ``teachers`` (programmatic and OpenAI-compatible annotators), ``validation`` (Great
Expectations), ``dataset`` (the folder contract and local I/O) and ``cli`` (the pipeline and
``odyssey curate``). Names are imported lazily so ``import odyssey_core.data`` stays cheap.
"""

from __future__ import annotations

from odyssey_core.common.lazy import lazy_exports

_EXPORTS = {
    "CuratedDataset": "odyssey_core.data.dataset",
    "load_dataset": "odyssey_core.data.dataset",
    "write_dataset": "odyssey_core.data.dataset",
    "Walkthrough": "odyssey_core.data.walkthroughs",
    "record_walkthrough": "odyssey_core.data.walkthroughs",
    "import_video": "odyssey_core.data.walkthroughs",
    "sample_frames": "odyssey_core.data.sampling",
    "dct_phash": "odyssey_core.data.sampling",
    "TEACHERS": "odyssey_core.data.teachers",
    "make_teacher": "odyssey_core.data.teachers",
    "validate_annotations": "odyssey_core.data.validation",
    "CurateConfig": "odyssey_core.data.cli",
    "curate": "odyssey_core.data.cli",
    "load_curate_config": "odyssey_core.data.cli",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
