"""Tests of odyssey_core.recipes.espo."""
