"""Policies: backends that turn observations into sampled, scored answers.

``BACKENDS`` maps names to backend classes lazily (``"hf"`` runs a local transformers
checkpoint); importing this package does not import torch.
"""

from odyssey_core.policy.base import (
    BACKENDS,
    Generation,
    GenerationParams,
    PolicyBackend,
    make_policy,
)

__all__ = [
    "BACKENDS",
    "Generation",
    "GenerationParams",
    "PolicyBackend",
    "make_policy",
]
