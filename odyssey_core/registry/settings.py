"""Settings of the artifact store, MLflow tracking and the promotion gate.

Everything here is plain data (pydantic, frozen) so a preset section or a Prefect task can build
it; ``RegistrySettings.from_env()`` reads the environment variables documented on each field.

Credentials are never settings fields that get printed: S3 keys come from the standard AWS
chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
instance roles) or are handed in as an ``S3Credentials`` object whose secrets are ``SecretStr``
(a Prefect task loads them from an ``AwsCredentials`` block and passes them down; the library
itself never imports Prefect):

    block = AwsCredentials.load("odyssey-s3")          # prefect_aws, in tasks/ only
    store = open_store("s3://odyssey/artifacts", credentials=S3Credentials(
        access_key_id=SecretStr(block.aws_access_key_id),
        secret_access_key=block.aws_secret_access_key,  # already a SecretStr
    ))

Neither path puts a key in a URI, a repr or a log line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, SecretStr

from odyssey_core.config import StrictModel

MIB = 1024 * 1024


class S3Credentials(StrictModel):
    """Explicit S3 credentials; secrets stay masked in reprs, logs and ``model_dump``."""

    access_key_id: SecretStr
    secret_access_key: SecretStr
    session_token: SecretStr | None = None


class S3Settings(StrictModel):
    """How the S3 client talks to AWS, MinIO or moto."""

    endpoint_url: str | None = Field(
        default=None,
        description="custom endpoint (MinIO, moto); env ODYSSEY_S3_ENDPOINT_URL, then "
        "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL; None: AWS",
    )
    region: str | None = Field(
        default=None, description="env ODYSSEY_S3_REGION, then AWS_DEFAULT_REGION"
    )
    addressing_style: Literal["auto", "path", "virtual"] = Field(
        default="auto",
        description="'path' for MinIO and most self-hosted endpoints; 'auto' picks path when an "
        "endpoint is set",
    )
    max_attempts: int = Field(
        default=8, ge=1, description="botocore attempts per request (standard retry mode)"
    )
    op_attempts: int = Field(
        default=4,
        ge=1,
        description="attempts of a whole store operation (a transfer, a copy) on transient "
        "errors that survive botocore's own retries",
    )
    backoff_base_s: float = Field(default=0.5, gt=0, description="first backoff delay")
    backoff_max_s: float = Field(default=20.0, gt=0, description="largest backoff delay")
    multipart_threshold: int = Field(
        default=64 * MIB, ge=5 * MIB, description="bytes from which uploads go multipart"
    )
    multipart_chunksize: int = Field(
        default=16 * MIB, ge=5 * MIB, description="part size (S3 needs 5 MiB at least)"
    )
    max_concurrency: int = Field(default=4, ge=1, description="parallel parts per transfer")
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=120.0, gt=0)
    checksum_calculation: Literal["when_required", "when_supported"] = Field(
        default="when_required",
        description="botocore's own request checksums; 'when_required' keeps older MinIO and "
        "other S3-compatibles working (the store verifies sha256 itself either way)",
    )


class TrackingSettings(StrictModel):
    tracking_uri: str = Field(
        default="sqlite:///out/mlflow/mlflow.db", description="env MLFLOW_TRACKING_URI"
    )
    registry_uri: str | None = Field(
        default=None, description="env MLFLOW_REGISTRY_URI; None: the tracking URI"
    )
    artifact_location: str | None = Field(
        default=None,
        description="artifact root for new experiments (file:// or s3://); env "
        "ODYSSEY_MLFLOW_ARTIFACT_LOCATION; None: MLflow's default",
    )
    model_prefix: str = Field(
        default="odysseus", description="registered models are named '<prefix>-<game>'"
    )


class PromotionSettings(StrictModel):
    margin: float = Field(
        default=0.0,
        ge=0,
        description="the candidate's mean progress must exceed the reference's by more than "
        "this (progress units); env ODYSSEY_PROMOTION_MARGIN",
    )
    alpha: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="one-sided Welch t-test level; env ODYSSEY_PROMOTION_ALPHA",
    )
    min_samples: int = Field(
        default=2, ge=2, description="episodes each side needs before a test is attempted"
    )


class RegistrySettings(StrictModel):
    artifact_uri: str = Field(
        default="file://./out/artifacts",
        description="root of the artifact store, file:///path or s3://bucket/prefix; env "
        "ODYSSEY_ARTIFACT_URI",
    )
    s3: S3Settings = S3Settings()
    tracking: TrackingSettings = TrackingSettings()
    promotion: PromotionSettings = PromotionSettings()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RegistrySettings:
        """Defaults overridden by the environment variables named in the field docs."""
        env = os.environ if env is None else env
        s3: dict[str, object] = {}
        endpoint = (
            env.get("ODYSSEY_S3_ENDPOINT_URL")
            or env.get("AWS_ENDPOINT_URL_S3")
            or env.get("AWS_ENDPOINT_URL")
        )
        if endpoint:
            s3["endpoint_url"] = endpoint
        region = env.get("ODYSSEY_S3_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            s3["region"] = region
        tracking: dict[str, object] = {}
        for key, var in (
            ("tracking_uri", "MLFLOW_TRACKING_URI"),
            ("registry_uri", "MLFLOW_REGISTRY_URI"),
            ("artifact_location", "ODYSSEY_MLFLOW_ARTIFACT_LOCATION"),
        ):
            if env.get(var):
                tracking[key] = env[var]
        promotion: dict[str, object] = {}
        if env.get("ODYSSEY_PROMOTION_MARGIN"):
            promotion["margin"] = float(env["ODYSSEY_PROMOTION_MARGIN"])
        if env.get("ODYSSEY_PROMOTION_ALPHA"):
            promotion["alpha"] = float(env["ODYSSEY_PROMOTION_ALPHA"])
        data: dict[str, object] = {"s3": s3, "tracking": tracking, "promotion": promotion}
        if env.get("ODYSSEY_ARTIFACT_URI"):
            data["artifact_uri"] = env["ODYSSEY_ARTIFACT_URI"]
        return cls.model_validate(data)
