"""Supervised fine-tuning (the paper's light SFT stage, Section 6.1 and Table 8).

Names are imported lazily so that ``import odyssey_core.sft`` (e.g. by the CLI) stays cheap.
"""

from __future__ import annotations

from odyssey_core.common.lazy import lazy_exports

_LAZY = lazy_exports(
    __name__,
    {
        "odyssey_core.sft.settings": ("SFTSettings", "load_sft_settings"),
        "odyssey_core.sft.data": (
            "SFTDataset",
            "SFTCollator",
            "SFTSample",
            "PromptBuilder",
            "IGNORE_INDEX",
        ),
        "odyssey_core.sft.trainer": ("SFTTrainer", "SFTResult", "latest_checkpoint"),
    },
)

__all__ = _LAZY.names
__getattr__, __dir__ = _LAZY.getattr, _LAZY.dir
