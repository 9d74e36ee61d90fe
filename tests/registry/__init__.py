"""Tests of odyssey_core.registry."""
