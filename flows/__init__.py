"""Prefect flows: what users run with `prefect deployment run <flow>/<deployment>`."""
