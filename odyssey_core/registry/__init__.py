"""Artifact store (file:// and s3://), MLflow tracking, and the model registry with its
promotion gate. MLflow, boto3 and scipy are imported lazily, inside the functions that use them,
so importing this package stays cheap."""

from odyssey_core.registry.artifacts import (
    ArtifactError,
    ArtifactNotFoundError,
    ArtifactStore,
    ChecksumMismatchError,
    IncompleteArtifactError,
    LocalArtifactStore,
    Manifest,
    ManifestEntry,
    S3ArtifactStore,
    open_store,
    run_prefix,
)
from odyssey_core.registry.models import (
    CANDIDATE,
    CHAMPION,
    PREVIOUS_CHAMPION,
    GateResult,
    ModelRegistry,
    PromotionDecision,
    RegistryError,
    RollbackResult,
    SampleStats,
    welch_gate,
)
from odyssey_core.registry.settings import (
    PromotionSettings,
    RegistrySettings,
    S3Credentials,
    S3Settings,
    TrackingSettings,
)
from odyssey_core.registry.tracking import TrackedRun, Tracker, flatten_params

__all__ = [
    "CANDIDATE",
    "CHAMPION",
    "PREVIOUS_CHAMPION",
    "ArtifactError",
    "ArtifactNotFoundError",
    "ArtifactStore",
    "ChecksumMismatchError",
    "GateResult",
    "IncompleteArtifactError",
    "LocalArtifactStore",
    "Manifest",
    "ManifestEntry",
    "ModelRegistry",
    "PromotionDecision",
    "PromotionSettings",
    "RegistryError",
    "RegistrySettings",
    "RollbackResult",
    "S3ArtifactStore",
    "S3Credentials",
    "S3Settings",
    "SampleStats",
    "TrackedRun",
    "Tracker",
    "TrackingSettings",
    "flatten_params",
    "open_store",
    "run_prefix",
    "welch_gate",
]
