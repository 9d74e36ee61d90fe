"""Supervised fine-tuning (the paper's light SFT stage, Section 6.1 and Table 8).

Names are imported lazily so that ``import odyssey_core.sft`` (e.g. by the CLI) stays cheap.
"""

from __future__ import annotations

from odyssey_core.common.lazy import lazy_exports

_EXPORTS = {
    "SFTSettings": "odyssey_core.sft.settings",
    "load_sft_settings": "odyssey_core.sft.settings",
    "SFTDataset": "odyssey_core.sft.data",
    "SFTCollator": "odyssey_core.sft.data",
    "SFTSample": "odyssey_core.sft.data",
    "PromptBuilder": "odyssey_core.sft.data",
    "IGNORE_INDEX": "odyssey_core.sft.data",
    "SFTTrainer": "odyssey_core.sft.trainer",
    "SFTResult": "odyssey_core.sft.trainer",
    "latest_checkpoint": "odyssey_core.sft.trainer",
    "run_sft": "odyssey_core.sft.trainer",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
