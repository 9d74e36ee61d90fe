"""A republish that fails part-way (after the new files are staged, while they go in) leaves the
previous publication readable, manifest and files, on both backends, and says so truthfully."""

from __future__ import annotations

import errno
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odyssey_core.registry.artifacts import (
    ArtifactStore,
    ArtifactWriteError,
    IncompleteArtifactError,
    LocalArtifactStore,
    S3ArtifactStore,
    open_store,
)
from odyssey_core.registry.settings import S3Settings

pytest_plugins = ["tests.s3_fixtures"]  # the moto server


@pytest.fixture(params=["file", "s3"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, moto_endpoint: str, aws_env: None
) -> Iterator[ArtifactStore]:
    if request.param == "file":
        yield open_store((tmp_path / "store").as_uri())
    else:
        settings = S3Settings(endpoint_url=moto_endpoint, region="us-east-1")
        bucket = f"odyssey-test-{uuid.uuid4().hex[:12]}"
        yield S3ArtifactStore(bucket, "odyssey", settings=settings, create_bucket=True)


def _folder(path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def _fetched(store: ArtifactStore, key: str, dest: Path) -> dict[str, str]:
    store.get_dir(key, dest)  # every file checked against the manifest's sha256
    return {p.relative_to(dest).as_posix(): p.read_text() for p in dest.rglob("*") if p.is_file()}


def _raw_keys(store: ArtifactStore) -> list[str]:
    """Every object or file under the store root, internal ones included."""
    if isinstance(store, S3ArtifactStore):
        response = store.client.list_objects_v2(Bucket=store.bucket)
        return sorted(item["Key"] for item in response.get("Contents", []))
    assert isinstance(store, LocalArtifactStore)
    files = [p for p in store.root.rglob("*") if p.is_file()]
    return sorted(p.relative_to(store.root).as_posix() for p in files)


OLD = {"weights.bin": "old weights", "config.json": json.dumps({"v": 1}), "sub/a.txt": "a"}
NEW = {"weights.bin": "new weights, longer", "config.json": json.dumps({"v": 2}), "extra.txt": "x"}


@pytest.mark.parametrize("fail_at", ["second file", "manifest"])
def test_a_failed_republish_keeps_the_previous_publication_readable(
    store: ArtifactStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: str
) -> None:
    old = _folder(tmp_path / "old", OLD)
    new = _folder(tmp_path / "new", NEW)
    store.put_dir(old, "models/m")
    listed = store.list("models/m")

    # what a full disk does once the files are staged: a write fails while they go in
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    calls = {"publish": 0}
    real_publish, real_write = type(store)._publish, type(store)._write_bytes

    def publish(self, tmp_key: str, key: str, sha256: str) -> None:
        if not key.startswith(".tmp/"):  # a new file going in (S3 also copies the old aside)
            calls["publish"] += 1
            if fail_at == "second file" and calls["publish"] == 2:
                raise full
        real_publish(self, tmp_key, key, sha256)

    def write_bytes(self, key: str, data: bytes) -> None:
        if fail_at == "manifest" and key.endswith("_MANIFEST.json"):
            raise full
        real_write(self, key, data)

    monkeypatch.setattr(type(store), "_publish", publish)
    monkeypatch.setattr(type(store), "_write_bytes", write_bytes)
    with pytest.raises(ArtifactWriteError) as info:
        store.put_dir(new, "models/m")
    message = str(info.value)
    assert info.value.errno == errno.ENOSPC and store.uri_for("models/m") in message
    assert "the version published there before is back in place" in message
    assert "readable as before" in message and "publish again" in message
    monkeypatch.undo()

    assert _fetched(store, "models/m", tmp_path / "fetched-old") == OLD
    assert store.list("models/m") == listed  # none of the new files is left beside them
    assert not [k for k in _raw_keys(store) if ".tmp/" in k]  # the staged and set-aside ones

    store.put_dir(new, "models/m")  # the disk has room again
    assert _fetched(store, "models/m", tmp_path / "fetched-new") == NEW


def test_when_restoring_fails_too_the_message_says_the_key_is_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    store.put_dir(_folder(tmp_path / "old", OLD), "models/m")
    real_move = LocalArtifactStore._move
    moves = {"n": 0}

    def move(self, key: str, dest_key: str, sha256: str | None) -> bool:
        moves["n"] += 1
        if dest_key == "models/m/_MANIFEST.json":  # putting the old manifest back
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_move(self, key, dest_key, sha256)

    def full(self, key: str, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(LocalArtifactStore, "_move", move)
    monkeypatch.setattr(LocalArtifactStore, "_write_bytes", full)
    with pytest.raises(ArtifactWriteError, match="left incomplete") as info:
        store.put_dir(_folder(tmp_path / "new", NEW), "models/m")
    assert "back in place" not in str(info.value) and moves["n"] > 1
    monkeypatch.undo()
    with pytest.raises(IncompleteArtifactError):  # what the message said
        store.get_dir("models/m", tmp_path / "fetched")
