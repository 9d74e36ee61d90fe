"""Tests of odyssey_core.recipes.gtr."""
