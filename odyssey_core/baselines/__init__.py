"""Classical deep-RL baselines (paper Appendix D): CNN policies trained from scratch.

Importing this package is cheap; Stable-Baselines3 loads only when a run starts.
"""

from odyssey_core.baselines.sb3_ppo import (
    ENGINEERED_ACTIONS,
    ClassicalRLEnv,
    LevelProgress,
    SB3PPOSettings,
    evaluate_sb3,
    load_sb3_ppo_settings,
    make_classical_env,
    task_settings,
    train_sb3_ppo,
)

__all__ = [
    "ENGINEERED_ACTIONS",
    "ClassicalRLEnv",
    "LevelProgress",
    "SB3PPOSettings",
    "evaluate_sb3",
    "load_sb3_ppo_settings",
    "make_classical_env",
    "task_settings",
    "train_sb3_ppo",
]
