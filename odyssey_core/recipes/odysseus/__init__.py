"""Odysseus (Super Mario Land, odland): curate -> SFT -> PPO with a turn-level critic -> evaluate
-> promote."""
