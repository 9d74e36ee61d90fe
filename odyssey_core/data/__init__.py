"""Data curation for the light-SFT stage: walkthroughs -> frames -> teacher answers -> dataset.

Submodules: ``walkthroughs`` (record/import videos), ``sampling`` (uniform sampling, pHash
dedup), ``teachers`` (programmatic and OpenAI-compatible annotators), ``validation`` (Great
Expectations), ``dataset`` (the folder contract and local I/O) and ``cli`` (the pipeline and
``odyssey curate``). Names are imported lazily so ``import odyssey_core.data`` stays cheap.
"""

from __future__ import annotations

from odyssey_core.common.lazy import lazy_exports

_LAZY = lazy_exports(
    __name__,
    {
        "odyssey_core.data.dataset": ("CuratedDataset", "load_dataset", "write_dataset"),
        "odyssey_core.data.walkthroughs": ("Walkthrough", "record_walkthrough", "import_video"),
        "odyssey_core.data.sampling": ("sample_frames", "dct_phash"),
        "odyssey_core.data.teachers": ("TEACHERS", "make_teacher"),
        "odyssey_core.data.validation": ("validate_annotations",),
        "odyssey_core.data.cli": ("CurateConfig", "curate", "load_curate_config"),
    },
)

__all__ = _LAZY.names
__getattr__, __dir__ = _LAZY.getattr, _LAZY.dir
