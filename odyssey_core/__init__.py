"""Odyssey: train vision-language-model agents with RL on long-horizon visual tasks.

The library never imports Prefect; flows and tasks sit on top of it.
"""

__version__ = "0.1.0"
