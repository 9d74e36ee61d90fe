"""Prefect tasks: thin wrappers over odyssey_core with retries, timeouts and cache keys."""
