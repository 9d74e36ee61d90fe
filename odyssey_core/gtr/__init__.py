"""GTR (Guided Thought Reinforcement): thought correctors, format reward, truncation."""

from odyssey_core.gtr.corrector import (
    CORRECTORS,
    Correction,
    Corrector,
    OpenAICorrector,
    ProgrammaticCorrector,
    make_corrector,
)
from odyssey_core.gtr.rewards import EpisodeGuard, GTRRewardConfig, GTRWrapper, format_reward

__all__ = [
    "CORRECTORS",
    "Correction",
    "Corrector",
    "EpisodeGuard",
    "GTRRewardConfig",
    "GTRWrapper",
    "OpenAICorrector",
    "ProgrammaticCorrector",
    "format_reward",
    "make_corrector",
]
