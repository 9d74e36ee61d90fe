"""Reinforcement learning: advantage estimators (more of the RL core lands with its issue)."""
