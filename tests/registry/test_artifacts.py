"""The artifact store, on a local folder and on a real moto S3 server over HTTP."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pydantic import SecretStr

from odyssey_core.registry.artifacts import (
    MANIFEST_NAME,
    ArtifactNotFoundError,
    ArtifactStore,
    ChecksumMismatchError,
    IncompleteArtifactError,
    LocalArtifactStore,
    S3ArtifactStore,
    is_transient_s3_error,
    normalize_key,
    open_store,
    run_prefix,
)
from odyssey_core.registry.settings import MIB, RegistrySettings, S3Credentials, S3Settings

if TYPE_CHECKING:
    from tests.s3_fixtures import FaultProxy

pytest_plugins = ["tests.s3_fixtures"]  # the moto server, proxy and MLflow fixtures


def new_bucket_name() -> str:
    return f"odyssey-test-{uuid.uuid4().hex[:12]}"


class Boom(RuntimeError):
    pass


def _write(path: Path, size: int, seed: int = 0) -> Path:
    """``size`` bytes of reproducible, incompressible-looking data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    with open(path, "wb") as out:
        left = size
        counter = 0
        while left > 0:
            chunk = hashlib.sha256(block + counter.to_bytes(8, "little")).digest() + block
            out.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
            counter += 1
    return path


def _s3_settings(endpoint: str, **overrides: object) -> S3Settings:
    base: dict[str, object] = {
        "endpoint_url": endpoint,
        "region": "us-east-1",
        "addressing_style": "path",
        "multipart_threshold": 5 * MIB,
        "multipart_chunksize": 5 * MIB,
        "max_concurrency": 2,
        "max_attempts": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    base.update(overrides)
    return S3Settings.model_validate(base)


def _s3_store(endpoint: str, **overrides: object) -> S3ArtifactStore:
    return S3ArtifactStore(
        new_bucket_name(),
        "odyssey",
        settings=_s3_settings(endpoint, **overrides),
        create_bucket=True,
    )


def _raw_keys(store: ArtifactStore) -> list[str]:
    """Every object or file under the store root, internal ones included."""
    if isinstance(store, S3ArtifactStore):
        response = store.client.list_objects_v2(Bucket=store.bucket)
        return sorted(item["Key"] for item in response.get("Contents", []))
    assert isinstance(store, LocalArtifactStore)
    return sorted(
        p.relative_to(store.root).as_posix() for p in store.root.rglob("*") if p.is_file()
    )


@pytest.fixture(params=["file", "s3"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, moto_endpoint: str, aws_env: None
) -> Iterator[ArtifactStore]:
    if request.param == "file":
        yield open_store((tmp_path / "store").as_uri())
    else:
        yield _s3_store(moto_endpoint)


# -- both backends ------------------------------------------------------------------------------


def test_put_get_file_roundtrip(store: ArtifactStore, tmp_path: Path) -> None:
    src = _write(tmp_path / "in" / "weights.bin", 300_000)
    uri = store.put_file(src, "ckpt/weights.bin")
    assert uri == store.uri_for("ckpt/weights.bin")
    assert uri.startswith(("file://", "s3://")) and uri.endswith("/ckpt/weights.bin")
    assert store.exists("ckpt/weights.bin") and not store.exists("ckpt/other.bin")
    assert store.list() == ["ckpt/weights.bin"]
    assert not any(".tmp/" in key for key in _raw_keys(store))

    out = store.get_file(uri, tmp_path / "out" / "w.bin")  # a full URI works as a key
    assert out.read_bytes() == src.read_bytes()
    into_dir = store.get_file("ckpt/weights.bin", tmp_path / "out")
    assert into_dir == tmp_path / "out" / "weights.bin"
    with pytest.raises(ArtifactNotFoundError):
        store.get_file("ckpt/missing.bin", tmp_path / "nope.bin")


def test_checksum_mismatch_raises_and_leaves_no_file(store: ArtifactStore, tmp_path: Path) -> None:
    src = _write(tmp_path / "a.bin", 100_000)
    store.put_file(src, "data/a.bin")
    # Corrupt the stored bytes behind the store's back, keeping the recorded checksum.
    if isinstance(store, S3ArtifactStore):
        key = f"{store.prefix}/data/a.bin"
        head = store.client.head_object(Bucket=store.bucket, Key=key)
        store.client.put_object(
            Bucket=store.bucket, Key=key, Body=b"x" * 100_000, Metadata=head["Metadata"]
        )
    else:
        assert isinstance(store, LocalArtifactStore)
        (store.root / "data" / "a.bin").write_bytes(b"x" * 100_000)
    dest = tmp_path / "out" / "a.bin"
    with pytest.raises(ChecksumMismatchError, match="sha256 mismatch"):
        store.get_file("data/a.bin", dest)
    assert not dest.exists()
    assert list((tmp_path / "out").iterdir()) == []  # no partial file either


def test_failure_mid_upload_leaves_nothing_under_the_final_key(
    store: ArtifactStore, tmp_path: Path
) -> None:
    # 12 MiB: multipart on S3 (threshold 5 MiB); the callback fails after some bytes went out.
    src = _write(tmp_path / "big.bin", 12 * MIB)
    sent = 0

    def explode_after_6_mib(n: int) -> None:
        nonlocal sent
        sent += n
        if sent > 6 * MIB:
            raise Boom("network died")

    with pytest.raises(Boom):
        store.put_file(src, "ckpt/big.bin", progress=explode_after_6_mib)
    assert sent > 6 * MIB
    assert not store.exists("ckpt/big.bin")
    assert store.list() == []
    assert _raw_keys(store) == []  # no temporary objects left behind either
    if isinstance(store, S3ArtifactStore):
        uploads = store.client.list_multipart_uploads(Bucket=store.bucket)
        assert uploads.get("Uploads", []) == []

    # A failed put_dir publishes nothing and no manifest.
    folder = tmp_path / "ckpt"
    _write(folder / "a.bin", 1000)
    _write(folder / "b.bin", 12 * MIB, seed=1)
    sent = 0
    with pytest.raises(Boom):
        store.put_dir(folder, "ckpt", progress=explode_after_6_mib)
    assert _raw_keys(store) == []
    with pytest.raises(IncompleteArtifactError):
        store.get_dir("ckpt", tmp_path / "restored")


def test_dir_manifest_is_written_last_and_required(store: ArtifactStore, tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    _write(folder / "model.safetensors", 200_000)
    _write(folder / "sub" / "critic.pt", 5_000, seed=2)
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (folder / "config.json").write_text(json.dumps({"step": 3}))

    uri = store.put_dir(folder, "runs/r1/rl/checkpoint")
    assert store.exists("runs/r1/rl/checkpoint")
    manifest = store.read_manifest(uri)
    assert [e.path for e in manifest.files] == [
        ".gitattributes",
        "config.json",
        "model.safetensors",
        "sub/critic.pt",
    ]
    by_path = {e.path: e for e in manifest.files}
    assert by_path["model.safetensors"].size == 200_000
    assert (
        by_path["sub/critic.pt"].sha256
        == hashlib.sha256((folder / "sub" / "critic.pt").read_bytes()).hexdigest()
    )
    assert f"runs/r1/rl/checkpoint/{MANIFEST_NAME}" in store.list("runs/r1")

    restored = store.get_dir("runs/r1/rl/checkpoint", tmp_path / "restored")
    for rel in by_path:
        assert (restored / rel).read_bytes() == (folder / rel).read_bytes()
    with pytest.raises(FileExistsError):
        store.get_dir("runs/r1/rl/checkpoint", restored)
    store.get_dir("runs/r1/rl/checkpoint", restored, overwrite=True)

    # Files without a manifest (a writer that died before the end) are "incomplete".
    store.put_file(folder / "config.json", "runs/r2/rl/checkpoint/config.json")
    assert not store.exists("runs/r2/rl/checkpoint")
    with pytest.raises(IncompleteArtifactError, match="incomplete"):
        store.get_dir("runs/r2/rl/checkpoint", tmp_path / "r2")
    assert not (tmp_path / "r2").exists()


def test_run_scoped_prefixes_keep_concurrent_runs_apart(
    store: ArtifactStore, tmp_path: Path
) -> None:
    errors: list[BaseException] = []

    def stage(run_id: str) -> None:
        try:
            folder = tmp_path / run_id
            (folder / "eval").mkdir(parents=True)
            (folder / "eval" / "report.json").write_text(json.dumps({"run": run_id}))
            scoped = store.for_run(run_id, "evaluate")
            assert scoped.uri == store.uri_for(f"runs/{run_id}/evaluate")
            for _ in range(3):  # same relative names in every run
                scoped.put_dir(folder / "eval", "report")
                scoped.put_file(folder / "eval" / "report.json", "summary.json")
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=stage, args=(f"run-{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for i in range(3):
        scoped = store.for_run(f"run-{i}", "evaluate")
        assert scoped.list() == ["report/_MANIFEST.json", "report/report.json", "summary.json"]
        got = scoped.get_file("summary.json", tmp_path / f"got-{i}.json")
        assert json.loads(got.read_text()) == {"run": f"run-{i}"}
    assert store.list("runs/run-1") == [
        "runs/run-1/evaluate/report/_MANIFEST.json",
        "runs/run-1/evaluate/report/report.json",
        "runs/run-1/evaluate/summary.json",
    ]


# -- S3 specifics --------------------------------------------------------------------------------


def test_s3_multipart_upload_and_verified_download(
    fault_proxy: FaultProxy, aws_env: None, tmp_path: Path
) -> None:
    store = _s3_store(fault_proxy.url)
    src = _write(tmp_path / "model.safetensors", 11 * MIB + 12345)
    moved = 0

    def count(n: int) -> None:
        nonlocal moved
        moved += n

    uri = store.put_file(src, "runs/r1/sft/model.safetensors", progress=count)
    assert uri == f"s3://{store.bucket}/odyssey/runs/r1/sft/model.safetensors"
    assert moved == src.stat().st_size
    part_puts = [p for m, p, s in fault_proxy.log if m == "PUT" and "partNumber=" in p]
    assert all(s == 200 for m, p, s in fault_proxy.log if m == "PUT")
    # 3 parts uploaded under .tmp/, then 3 server-side part copies to the final key.
    assert sum("/.tmp/" in p for p in part_puts) == 3
    assert sum("/.tmp/" not in p for p in part_puts) == 3
    head = store.client.head_object(Bucket=store.bucket, Key="odyssey/" + uri.split("/odyssey/")[1])
    assert head["Metadata"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert head["ContentLength"] == src.stat().st_size

    out = store.get_file(uri, tmp_path / "down" / "model.safetensors")
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()
    ranged = [p for m, p, s in fault_proxy.log if m == "GET" and "model.safetensors" in p]
    assert ranged  # the download went through the same HTTP endpoint


@pytest.mark.parametrize("size", [200_000, 11 * MIB], ids=["single-put", "multipart"])
def test_s3_injected_503_on_first_put_is_retried_by_botocore(
    fault_proxy: FaultProxy, aws_env: None, tmp_path: Path, size: int
) -> None:
    store = _s3_store(fault_proxy.url)
    src = _write(tmp_path / "x.bin", size)
    fault_proxy.fail_next("PUT", count=1, status=503, code="SlowDown")
    store.put_file(src, "runs/r/stage/x.bin")
    puts = [(p, s) for m, p, s in fault_proxy.log if m == "PUT" and "x.bin" in p]
    assert puts[0][1] == 503 and all(s == 200 for _, s in puts[1:])
    assert (puts[0][0], 200) in puts[1:]  # the same request, sent again
    out = store.get_file("runs/r/stage/x.bin", tmp_path / "y.bin")
    assert out.read_bytes() == src.read_bytes()


def test_s3_store_level_retry_when_botocore_gives_up(
    fault_proxy: FaultProxy, aws_env: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One botocore attempt per request: the store's own loop must retry the whole operation.
    store = _s3_store(fault_proxy.url, max_attempts=1, op_attempts=3)
    src = _write(tmp_path / "x.bin", 50_000)
    fault_proxy.fail_next("PUT", count=2, status=500, code="InternalError")
    with caplog.at_level(logging.WARNING, logger="odyssey_core.registry.artifacts"):
        store.put_file(src, "k/x.bin")
    assert [s for m, p, s in fault_proxy.log if m == "PUT" and "x.bin" in p][:3] == [500, 500, 200]
    assert caplog.text.count("transient S3 error") == 2
    assert store.get_file("k/x.bin", tmp_path / "y.bin").read_bytes() == src.read_bytes()

    # A permanent error (403) is not retried.
    fault_proxy.fail_next("PUT", count=1, status=403, code="AccessDenied")
    before = len(fault_proxy.log)
    with pytest.raises(Exception, match=r"AccessDenied|403"):
        store.put_file(src, "k/denied.bin")
    assert [s for m, _, s in fault_proxy.log[before:] if m == "PUT"] == [403]
    assert not store.exists("k/denied.bin")


def test_s3_secrets_never_logged_or_shown(
    moto_endpoint: str,
    aws_env: None,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "SeCrEt-value-that-must-not-leak-42"
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    creds = S3Credentials(
        access_key_id=SecretStr("AKIDEXAMPLE"), secret_access_key=SecretStr(secret)
    )
    with caplog.at_level(logging.DEBUG):
        store = S3ArtifactStore(
            new_bucket_name(),
            "p",
            settings=_s3_settings(moto_endpoint),
            credentials=creds,
            create_bucket=True,
        )
        src = _write(tmp_path / "f.bin", 10_000)
        store.put_file(src, "f.bin")
        store.get_file("f.bin", tmp_path / "g.bin")
        logging.getLogger("test").info("store=%r creds=%r settings=%s", store, creds, creds)
    shown = " ".join([caplog.text, repr(store), str(store), repr(creds), str(creds.model_dump())])
    assert secret not in shown
    assert "**********" in repr(creds)


# -- pure helpers -------------------------------------------------------------------------------


def test_keys_uris_and_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert normalize_key("/a//b/./c/") == "a/b/c"
    for bad in ("", "../x", "a/../b", "a/.tmp/b", ".meta/x", "a/b\x00"):
        with pytest.raises(ValueError):
            normalize_key(bad)
    assert run_prefix("abc123", "sft") == "runs/abc123/sft"
    with pytest.raises(ValueError):
        run_prefix("../other", "sft")

    local = open_store(str(tmp_path / "plain"))
    assert isinstance(local, LocalArtifactStore) and local.uri == (tmp_path / "plain").as_uri()
    assert open_store(f"file://{tmp_path}/x").uri == (tmp_path / "x").as_uri()
    with pytest.raises(ValueError, match="unsupported"):
        open_store("gs://bucket/x")
    with pytest.raises(ValueError, match="not under this store"):
        local.key_for("file:///elsewhere/x")
    assert local.scoped("runs/a").key_for(local.uri_for("runs/a/b/c")) == "b/c"

    monkeypatch.setenv("ODYSSEY_S3_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("ODYSSEY_ARTIFACT_URI", "s3://bucket/prefix")
    monkeypatch.setenv("ODYSSEY_PROMOTION_MARGIN", "1.5")
    settings = RegistrySettings.from_env()
    assert settings.s3.endpoint_url == "http://127.0.0.1:9000"
    assert settings.artifact_uri == "s3://bucket/prefix"
    assert settings.promotion.margin == 1.5
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value-9")
    s3 = open_store(settings=settings)
    assert isinstance(s3, S3ArtifactStore)
    assert s3.uri_for("runs/r/x") == "s3://bucket/prefix/runs/r/x"
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in repr(s3)


def test_transient_error_classification() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    def client_error(code: str, status: int) -> ClientError:
        response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(response, "PutObject")  # type: ignore[arg-type]

    assert is_transient_s3_error(client_error("SlowDown", 503))
    assert is_transient_s3_error(client_error("InternalError", 500))
    assert is_transient_s3_error(client_error("ThrottlingException", 400))
    assert is_transient_s3_error(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert is_transient_s3_error(ReadTimeoutError(endpoint_url="http://127.0.0.1:1"))
    assert not is_transient_s3_error(client_error("AccessDenied", 403))
    assert not is_transient_s3_error(client_error("NoSuchKey", 404))
    assert not is_transient_s3_error(ValueError("no"))
    # Wrapped, as boto3's S3UploadFailedError wraps the ClientError it caught.
    try:
        try:
            raise client_error("SlowDown", 503)
        except ClientError as inner:
            raise RuntimeError(f"Failed to upload: {inner}")  # noqa: B904
    except RuntimeError as outer:
        assert is_transient_s3_error(outer)
