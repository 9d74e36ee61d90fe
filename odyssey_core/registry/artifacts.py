"""The artifact store: where every stage puts its outputs (checkpoints, datasets, reports) and
from which later stages read them back, by URI.

Two backends behind one interface, ``ArtifactStore``:

* ``file:///path`` (the default): a local folder.
* ``s3://bucket/prefix``: AWS S3, MinIO or moto through boto3, with a configurable endpoint.

Guarantees, on both:

* **Checksums.** Every file's sha256 is recorded when it is written (S3 object metadata
  ``x-amz-meta-sha256``; a ``.meta/`` sidecar locally) and checked when it is read; a mismatch
  raises ``ChecksumMismatchError`` and leaves no file at the destination.
* **Atomic publish.** Data is first written under ``.tmp/<uuid>/...`` and only moved (renamed,
  or server-side copied on S3) to the final key once complete, so a failed upload leaves
  nothing under the final key. A directory gets a manifest (``_MANIFEST.json``: paths, sizes,
  sha256) written LAST: a directory without one is incomplete and ``get_dir`` refuses it.
  Locally every file is synced before its rename and its folder after.
* **Republishing.** The version already under a key is moved aside (renamed locally, copied
  on S3) before the new one goes in, and moved back if publishing fails part-way: a failed
  republish leaves the previous publication (manifest and files) readable.
* **Run-scoped prefixes.** ``store.for_run(run_id, stage)`` writes under
  ``runs/<run_id>/<stage>/`` so concurrent runs never touch each other's keys.
* **Retries (S3).** botocore's standard retry mode handles 500/503 SlowDown, throttling and
  connection errors per request; a second loop here retries a whole operation (a transfer, a
  copy) when such an error still comes through, with jittered exponential backoff.

Credentials are never passed through URIs, settings dumps or logs; see ``settings``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import random
import re
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from odyssey_core.common.files import atomic_write, fsync_dir, replace_folder
from odyssey_core.common.redaction import redact_uri
from odyssey_core.registry.settings import RegistrySettings, S3Credentials, S3Settings

log = logging.getLogger(__name__)

MANIFEST_NAME = "_MANIFEST.json"
MANIFEST_FORMAT = "odyssey-manifest/1"
TMP_DIR = ".tmp"
META_DIR = ".meta"
_INTERNAL = {TMP_DIR, META_DIR}
_CHUNK = 1024 * 1024
_TMP_SUFFIX = ".odyssey-tmp-"
_LOCAL_TMP = re.compile(r"\.odyssey-tmp-[0-9a-f]{32}$")
_SEGMENT = re.compile(r"^[A-Za-z0-9._=+@-][A-Za-z0-9._=+@ -]*$")

ProgressCallback = Callable[[int], None]
"""Called with the number of bytes moved since the previous call (boto3's convention)."""

T = TypeVar("T")


class ArtifactError(Exception):
    """Base of the store's errors."""


class ArtifactWriteError(ArtifactError, OSError):
    """An upload failed on the store's side (a full disk, a quota, a read-only folder).

    Keeps the ``errno`` of the failed write. The message says what is left under the key:
    nothing new, and the version published there before (if any) readable as before, unless
    restoring it failed too, which the message then says."""


def _upload_error(
    error: OSError,
    what: str,
    uri: str,
    where: str,
    *,
    left: str | None = None,
) -> ArtifactWriteError:
    import errno

    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        cause, fix = "the store's disk is full", f"free space on {where}"
    else:
        cause, fix = error.strerror or type(error).__name__, f"make {where} writable"
    return ArtifactWriteError(
        error.errno or errno.EIO,
        f"could not upload {what} to {uri}: {cause} ({error}). "
        f"{left or f'Nothing was published under {uri}'}; {fix} and publish again.",
    )


class _Replacement:
    """One publish that replaces what is under some keys: the old objects are moved aside
    into their own batch before the new ones go in, and moved back by :meth:`roll_back`."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self.batch = store._new_batch()
        self.aside: list[tuple[str, str, str | None]] = []  # (key, where it went, sha256)
        self.published: list[str] = []
        self.restore_error: BaseException | None = None

    def set_aside(self, key: str, sha256: str | None) -> None:
        backup = f"{self.batch}/{key}"
        if self.store._move(key, backup, sha256):
            self.aside.append((key, backup, sha256))

    def publish(self, tmp_key: str, key: str, sha256: str) -> None:
        self.published.append(key)  # before: a publish that fails part-way is undone too
        self.store._publish(tmp_key, key, sha256)

    def roll_back(self) -> None:
        """Remove what was published, put back what was set aside (the manifest, set aside
        first, goes back last); an error doing so is kept in ``restore_error``."""
        try:
            old = {key for key, _, _ in self.aside}
            self.store._delete([key for key in self.published if key not in old])
            for key, backup, sha256 in reversed(self.aside):
                self.store._move(backup, key, sha256)
        except Exception as error:  # reported by the caller, with the error that started it
            log.error("could not restore the previous version: %s", error)
            self.restore_error = error

    def outcome(self, uri: str) -> str:
        """What a failed publish left under ``uri``, after :meth:`roll_back`."""
        if self.restore_error is not None:
            return (
                f"Nothing new is readable under {uri}, and putting back the version published "
                f"there before failed too ({self.restore_error}): it is left incomplete "
                "(get_dir refuses it)"
            )
        if self.aside:
            return (
                f"Nothing was published under {uri}: the version published there before is "
                "back in place, readable as before, and other artifacts are unchanged"
            )
        return f"Nothing was published under {uri} and the artifacts published before are unchanged"

    def discard(self) -> None:
        self.store._discard(self.batch)


class ArtifactNotFoundError(ArtifactError, FileNotFoundError):
    pass


class ChecksumMismatchError(ArtifactError):
    pass


class IncompleteArtifactError(ArtifactError):
    """A directory without its manifest: still being written, or its writer failed."""


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[ManifestEntry, ...]
    created_at: str

    @property
    def total_size(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": MANIFEST_FORMAT,
                "created_at": self.created_at,
                "total_size": self.total_size,
                "files": [asdict(entry) for entry in self.files],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        data = json.loads(text)
        if data.get("format") != MANIFEST_FORMAT:
            raise ArtifactError(f"unknown manifest format {data.get('format')!r}")
        files = tuple(ManifestEntry(**entry) for entry in data["files"])
        return cls(files=files, created_at=data["created_at"])


def normalize_key(key: str) -> str:
    """A clean relative key: '/'-separated, no empty, '.', '..' or internal segments."""
    parts = [p for p in key.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        raise ValueError(f"empty artifact key {key!r}")
    for part in parts:
        if part == ".." or part in _INTERNAL or not _SEGMENT.match(part):
            raise ValueError(f"invalid segment {part!r} in artifact key {key!r}")
    return "/".join(parts)


def run_prefix(run_id: str, stage: str) -> str:
    """``runs/<run_id>/<stage>``: the key prefix one stage of one run owns."""
    return normalize_key(f"runs/{normalize_key(run_id)}/{normalize_key(stage)}")


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _walk_files(root: Path) -> list[tuple[str, Path]]:
    """(relative key, path) of every regular file under ``root``, sorted for stable manifests."""
    found = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file():
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


@dataclass(frozen=True)
class _ObjectInfo:
    size: int
    sha256: str | None


class ArtifactStore(ABC):
    """Keys are relative, '/'-separated; every method also accepts a full URI under the store."""

    def __init__(self) -> None:
        self._scope = ""

    # -- the public interface -------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The URI of this store's root (including a scope from ``scoped``)."""
        return self._root_uri() + (f"/{self._scope}" if self._scope else "")

    def uri_for(self, key: str) -> str:
        return f"{self._root_uri()}/{self._full(key)}"

    def scoped(self, prefix: str) -> ArtifactStore:
        """The same store seen from ``prefix``: keys are relative to it (shares the client)."""
        clone = copy.copy(self)
        clone._scope = self._full(prefix)
        return clone

    def for_run(self, run_id: str, stage: str) -> ArtifactStore:
        return self.scoped(run_prefix(run_id, stage))

    def put_file(
        self, local: str | os.PathLike[str], key: str, *, progress: ProgressCallback | None = None
    ) -> str:
        """Upload one file; returns its URI. Nothing appears under ``key`` unless it succeeds."""
        local = Path(local)
        if not local.is_file():
            raise FileNotFoundError(f"not a file: {local}")
        full = self._full(key)
        batch = self._new_batch()
        try:
            digest = sha256_file(local)
            tmp = f"{batch}/{full}"
            self._upload(local, tmp, digest, progress)
            self._publish(tmp, full, digest)  # one object: replaced whole, or not at all
        except OSError as error:
            if isinstance(error, ArtifactError) or not self._is_write_error(error):
                raise
            raise _upload_error(error, str(local), self.uri_for(key), self._root_uri()) from error
        finally:
            self._discard(batch)
        return self.uri_for(key)

    def put_dir(
        self,
        local_dir: str | os.PathLike[str],
        key: str,
        *,
        progress: ProgressCallback | None = None,
    ) -> str:
        """Upload a folder; returns its URI. The manifest is written last, after every file."""
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise NotADirectoryError(f"not a directory: {local_dir}")
        full = self._full(key)
        files = _walk_files(local_dir)
        for rel, _ in files:
            normalize_key(rel)  # reject names the store cannot hold before uploading anything
            if rel == MANIFEST_NAME:
                raise ValueError(f"{local_dir} holds a file named {MANIFEST_NAME}, reserved")
        manifest_key = f"{full}/{MANIFEST_NAME}"
        batch = self._new_batch()
        replacement = _Replacement(self)
        entries = []
        try:
            staged = []
            for rel, path in files:
                digest = sha256_file(path)
                tmp = f"{batch}/{full}/{rel}"
                self._upload(path, tmp, digest, progress)
                staged.append((tmp, f"{full}/{rel}", digest))
                entries.append(ManifestEntry(rel, path.stat().st_size, digest))
            # Every file is staged: only now is an earlier version at this key touched.
            manifest = Manifest(tuple(entries), datetime.now(UTC).isoformat())
            self._replace_dir(staged, replacement, manifest_key, manifest.to_json().encode())
        except OSError as error:
            if isinstance(error, ArtifactError) or not self._is_write_error(error):
                raise
            uri = self.uri_for(key)
            left = replacement.outcome(uri)
            raise _upload_error(error, str(local_dir), uri, self._root_uri(), left=left) from error
        finally:
            self._discard(batch)
            replacement.discard()
        return self.uri_for(key)

    def _replace_dir(
        self,
        staged: list[tuple[str, str, str]],
        replacement: _Replacement,
        manifest_key: str,
        manifest: bytes,
    ) -> None:
        """Publish the staged ``(tmp key, key, sha256)`` files of a folder, then its
        ``manifest``. The version published there before (its manifest first, so readers see
        "incomplete", never a mix) is set aside and, if anything fails, put back."""
        try:
            previous = self._previous_manifest(manifest_key)
            if previous is not None:
                raw, old = previous
                replacement.set_aside(manifest_key, hashlib.sha256(raw).hexdigest())
                folder = manifest_key.rsplit("/", 1)[0]
                for entry in old.files:
                    replacement.set_aside(f"{folder}/{entry.path}", entry.sha256)
            for tmp, key, digest in staged:
                replacement.publish(tmp, key, digest)
            self._write_bytes(manifest_key, manifest)
        except BaseException as error:
            replacement.roll_back()
            if replacement.restore_error is not None:  # the caller's message says it otherwise
                folder_uri = self._uri_of_full(manifest_key.rsplit("/", 1)[0])
                error.add_note(replacement.outcome(folder_uri))
            raise

    def _previous_manifest(self, manifest_key: str) -> tuple[bytes, Manifest] | None:
        """The manifest published under ``manifest_key`` (raw and parsed), or None."""
        try:
            raw = self._read_bytes(manifest_key)
        except ArtifactNotFoundError:
            return None
        try:
            return raw, Manifest.from_json(raw)
        except (ArtifactError, ValueError, KeyError, TypeError):
            log.warning("%s: unreadable manifest, replaced", self._uri_of_full(manifest_key))
            return None

    @staticmethod
    def _is_write_error(error: OSError) -> bool:
        """A failure of the store's own storage, not a missing or unreadable local file."""
        import errno

        return error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO)

    def get_file(
        self,
        key: str,
        dest: str | os.PathLike[str],
        *,
        progress: ProgressCallback | None = None,
    ) -> Path:
        """Download one file to ``dest`` (a file path, or an existing folder), verified."""
        full = self._full(key)
        info = self._head(full)
        dest = Path(dest)
        if dest.is_dir():
            dest = dest / full.rsplit("/", 1)[-1]
        self._fetch_verified(full, dest, info.sha256, info.size, progress)
        return dest

    def read_manifest(self, key: str) -> Manifest:
        full = self._full(key)
        try:
            raw = self._read_bytes(f"{full}/{MANIFEST_NAME}")
        except ArtifactNotFoundError:
            raise IncompleteArtifactError(
                f"{self.uri_for(key)} has no {MANIFEST_NAME}: it is incomplete or absent"
            ) from None
        return Manifest.from_json(raw)

    def get_dir(
        self,
        key: str,
        dest: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        progress: ProgressCallback | None = None,
    ) -> Path:
        """Download a complete folder (per its manifest) to ``dest``; every file is verified.
        The files land in a staging folder first, so ``dest`` appears whole or not at all."""
        manifest = self.read_manifest(key)
        full = self._full(key)
        dest = Path(dest)
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())) and not overwrite:
            raise FileExistsError(f"{dest} exists and is not empty (pass overwrite=True)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = dest.parent / f".{dest.name}.part-{uuid.uuid4().hex}"
        try:
            for entry in manifest.files:
                target = staging / entry.path
                target.parent.mkdir(parents=True, exist_ok=True)
                self._fetch_verified(
                    f"{full}/{entry.path}", target, entry.sha256, entry.size, progress
                )
            staging.mkdir(parents=True, exist_ok=True)  # an empty manifest still makes a folder
            if dest.exists() and not dest.is_dir():
                dest.unlink()
            replace_folder(staging, dest)  # swapped in: never a moment without ``dest``
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return dest

    def exists(self, key: str) -> bool:
        """True for a stored file, or for a COMPLETE folder (one with its manifest)."""
        full = self._full(key)
        return self._exists(full) or self._exists(f"{full}/{MANIFEST_NAME}")

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix`` (relative to this store), internal staging excluded."""
        base = self._full(prefix) if prefix else self._scope
        cut = len(self._scope) + 1 if self._scope else 0
        keys = []
        for full in self._list_keys(base):
            if base and not (full == base or full.startswith(base + "/")):
                continue  # "runs/a" must not list "runs/ab/..."
            if _INTERNAL.intersection(full.split("/")):
                continue
            keys.append(full[cut:])
        return sorted(keys)

    def key_for(self, uri_or_key: str) -> str:
        """The key (relative to this store) of a URI under it, or a key unchanged."""
        return self._relative(uri_or_key)

    # -- shared helpers -------------------------------------------------------------------

    def _relative(self, key: str) -> str:
        root = self.uri
        if "://" in key:
            if not key.startswith(root + "/"):
                raise ValueError(f"{key} is not under this store ({root})")
            key = key[len(root) + 1 :]
        return normalize_key(key)

    def _full(self, key: str) -> str:
        rel = self._relative(key)
        return f"{self._scope}/{rel}" if self._scope else rel

    @staticmethod
    def _new_batch() -> str:
        return f"{TMP_DIR}/{uuid.uuid4().hex}"

    def _fetch_verified(
        self,
        full: str,
        dest: Path,
        expected: str | None,
        size: int | None,
        progress: ProgressCallback | None,
    ) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.parent / f".{dest.name}.part-{uuid.uuid4().hex}"
        try:
            self._download(full, part, progress)
            actual = sha256_file(part)
            if expected is not None and actual != expected:
                raise ChecksumMismatchError(
                    f"sha256 mismatch for {self._uri_of_full(full)}: recorded {expected}, "
                    f"downloaded {actual} ({part.stat().st_size} bytes); nothing was written "
                    f"to {dest}"
                )
            if expected is None:
                log.debug("no recorded sha256 for %s; not verified", full)
            if size is not None and part.stat().st_size != size:
                raise ChecksumMismatchError(
                    f"size mismatch for {self._uri_of_full(full)}: expected {size}, got "
                    f"{part.stat().st_size}"
                )
            os.replace(part, dest)
        finally:
            part.unlink(missing_ok=True)

    def _uri_of_full(self, full: str) -> str:
        return f"{self._root_uri()}/{full}"

    # -- what a backend provides (keys are full keys relative to the backend root) -------

    @abstractmethod
    def _root_uri(self) -> str: ...

    @abstractmethod
    def _upload(
        self, local: Path, key: str, sha256: str, progress: ProgressCallback | None
    ) -> None: ...

    @abstractmethod
    def _publish(self, tmp_key: str, key: str, sha256: str) -> None:
        """Move a completely written temporary object to its final key."""

    @abstractmethod
    def _move(self, key: str, dest_key: str, sha256: str | None) -> bool:
        """Put the object at ``key`` (with its checksum) at ``dest_key``; False, doing nothing,
        when there is no object at ``key``. Locally a rename of the file and its checksum
        (nothing is written, so a full disk cannot stop it; ``key`` is gone after); on S3 a
        server-side copy."""

    @abstractmethod
    def _discard(self, batch: str) -> None:
        """Remove whatever is left under a ``.tmp/<uuid>`` batch (best effort)."""

    @abstractmethod
    def _head(self, key: str) -> _ObjectInfo: ...

    @abstractmethod
    def _download(self, key: str, dest: Path, progress: ProgressCallback | None) -> None: ...

    @abstractmethod
    def _write_bytes(self, key: str, data: bytes) -> None:
        """Write small data (a manifest) so that readers see all of it or none."""

    @abstractmethod
    def _read_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _list_keys(self, prefix: str) -> Iterator[str]: ...

    @abstractmethod
    def _delete(self, keys: list[str]) -> None: ...


# ---------------------------------------------------------------------------------------------
# file://


class LocalArtifactStore(ArtifactStore):
    """A folder. Renames within one filesystem are atomic, which gives the publish step."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalArtifactStore({self.uri!r})"

    def _root_uri(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _meta_path(self, key: str) -> Path:
        return self.root.joinpath(META_DIR, *key.split("/")).with_name(
            key.rsplit("/", 1)[-1] + ".json"
        )

    def _upload(
        self, local: Path, key: str, sha256: str, progress: ProgressCallback | None
    ) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "rb") as src, open(target, "wb") as out:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                if progress is not None:
                    progress(len(chunk))
            out.flush()
            os.fsync(out.fileno())

    def _publish(self, tmp_key: str, key: str, sha256: str) -> None:
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        size = self._path(tmp_key).stat().st_size
        # The checksum lands first: a reader racing the rename at worst sees a mismatch error,
        # never unverified data.
        meta = self._meta_path(key)
        before = meta.read_bytes() if meta.is_file() else None
        self._atomic_write(meta, json.dumps({"sha256": sha256, "size": size}))
        try:
            os.replace(self._path(tmp_key), final)  # the data was synced when it was staged
        except OSError:
            with contextlib.suppress(OSError):  # the old file keeps its own checksum
                if before is None:
                    meta.unlink(missing_ok=True)
                else:
                    self._atomic_write(meta, before)
            raise
        fsync_dir(final.parent)

    def _move(self, key: str, dest_key: str, sha256: str | None) -> bool:
        source, dest = self._path(key), self._path(dest_key)
        if not source.is_file():
            return False
        meta, dest_meta = self._meta_path(key), self._meta_path(dest_key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest_meta.parent.mkdir(parents=True, exist_ok=True)
        if meta.is_file():  # the checksum first, as in _publish
            os.replace(meta, dest_meta)
        else:
            dest_meta.unlink(missing_ok=True)
        os.replace(source, dest)
        fsync_dir(dest_meta.parent)
        fsync_dir(dest.parent)
        return True

    def _discard(self, batch: str) -> None:
        shutil.rmtree(self._path(batch), ignore_errors=True)
        # the checksums of what a republish set aside
        shutil.rmtree(self.root.joinpath(META_DIR, *batch.split("/")), ignore_errors=True)

    def _head(self, key: str) -> _ObjectInfo:
        path = self._path(key)
        if not path.is_file():
            raise ArtifactNotFoundError(f"no artifact at {self._uri_of_full(key)}")
        meta_path = self._meta_path(key)
        sha = None
        if meta_path.is_file():
            sha = json.loads(meta_path.read_text()).get("sha256")
        return _ObjectInfo(size=path.stat().st_size, sha256=sha)

    def _download(self, key: str, dest: Path, progress: ProgressCallback | None) -> None:
        src_path = self._path(key)
        if not src_path.is_file():
            raise ArtifactNotFoundError(f"no artifact at {self._uri_of_full(key)}")
        with open(src_path, "rb") as src, open(dest, "wb") as out:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                if progress is not None:
                    progress(len(chunk))

    @staticmethod
    def _atomic_write(path: Path, text: str | bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a unique temp name: concurrent writers of one key must not share a temp file
        atomic_write(path, text, path.with_name(f".{path.name}{_TMP_SUFFIX}{uuid.uuid4().hex}"))

    def _write_bytes(self, key: str, data: bytes) -> None:
        sha = hashlib.sha256(data).hexdigest()
        self._atomic_write(self._meta_path(key), json.dumps({"sha256": sha, "size": len(data)}))
        self._atomic_write(self._path(key), data)

    def _read_bytes(self, key: str) -> bytes:
        path = self._path(key)
        if not path.is_file():
            raise ArtifactNotFoundError(f"no artifact at {self._uri_of_full(key)}")
        return path.read_bytes()

    def _exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _list_keys(self, prefix: str) -> Iterator[str]:
        # List from the deepest folder the prefix names; the caller filters exact matches.
        base = self._path(prefix) if prefix else self.root
        if base.is_file():
            yield prefix
            return
        if not base.is_dir():
            return
        for rel, _path in _walk_files(base):
            full = f"{prefix}/{rel}" if prefix else rel
            if not _LOCAL_TMP.search(full):  # skip in-flight temporaries
                yield full

    def _delete(self, keys: list[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)
            self._meta_path(key).unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# s3://

_TRANSIENT_CODES = {
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeoutException",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "500",
    "502",
    "503",
    "504",
}


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_transient_s3_error(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is a throttle, a 5xx or a connection problem."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError
    from s3transfer.exceptions import RetriesExceededError

    for err in _exception_chain(exc):
        if isinstance(err, ClientError):
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _TRANSIENT_CODES or status in (500, 502, 503, 504):
                return True
        elif isinstance(err, ConnectionError | HTTPClientError | RetriesExceededError):
            return True
    return False


class S3ArtifactStore(ArtifactStore):
    """``s3://bucket/prefix`` through boto3. Temporary objects live under
    ``<prefix>/.tmp/<uuid>/`` and are copied server-side to their final key when complete."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        settings: S3Settings | None = None,
        credentials: S3Credentials | None = None,
        create_bucket: bool = False,
    ) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        super().__init__()
        self.bucket = bucket
        self.prefix = normalize_key(prefix) if prefix.strip("/") else ""
        self.settings = settings or S3Settings()
        s = self.settings
        addressing = s.addressing_style
        if addressing == "auto" and s.endpoint_url:
            addressing = "path"  # custom endpoints (MinIO, moto) rarely resolve bucket hosts
        config = Config(
            retries={"total_max_attempts": s.max_attempts, "mode": "standard"},
            s3={"addressing_style": addressing},
            connect_timeout=s.connect_timeout_s,
            read_timeout=s.read_timeout_s,
            max_pool_connections=max(10, s.max_concurrency * 2),
            request_checksum_calculation=s.checksum_calculation,
            response_checksum_validation="when_required",
        )
        session_kwargs: dict[str, Any] = {}
        if credentials is not None:
            session_kwargs = {
                "aws_access_key_id": credentials.access_key_id.get_secret_value(),
                "aws_secret_access_key": credentials.secret_access_key.get_secret_value(),
                "aws_session_token": (
                    credentials.session_token.get_secret_value()
                    if credentials.session_token
                    else None
                ),
            }
        session = boto3.session.Session(region_name=s.region, **session_kwargs)
        self.client = session.client("s3", endpoint_url=s.endpoint_url, config=config)
        self.transfer_config = TransferConfig(
            multipart_threshold=s.multipart_threshold,
            multipart_chunksize=s.multipart_chunksize,
            max_concurrency=s.max_concurrency,
            use_threads=True,
            preferred_transfer_client="classic",
        )
        if create_bucket:
            self.ensure_bucket()

    def __repr__(self) -> str:
        # Never the client or credentials: only where the data lives.
        endpoint = self.settings.endpoint_url or "aws"
        return f"S3ArtifactStore({self.uri!r}, endpoint={redact_uri(endpoint)!r})"

    def ensure_bucket(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self._retry("head bucket", lambda: self.client.head_bucket(Bucket=self.bucket))
        except ClientError as err:
            if err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
                raise
            with contextlib.suppress(
                self.client.exceptions.BucketAlreadyOwnedByYou,
                self.client.exceptions.BucketAlreadyExists,
            ):
                self._retry("create bucket", lambda: self.client.create_bucket(Bucket=self.bucket))

    # -- retries --------------------------------------------------------------------------

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        attempts = self.settings.op_attempts
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except Exception as err:
                if attempt >= attempts or not is_transient_s3_error(err):
                    raise
                delay = min(
                    self.settings.backoff_max_s, self.settings.backoff_base_s * 2 ** (attempt - 1)
                )
                delay *= 0.5 + random.random() / 2  # jitter: concurrent writers spread out
                log.warning(
                    "transient S3 error on %s (attempt %d/%d): %s; retrying in %.2fs",
                    what,
                    attempt,
                    attempts,
                    type(err).__name__,
                    delay,
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    # -- backend --------------------------------------------------------------------------

    def _root_uri(self) -> str:
        return f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def _obj(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _upload(
        self, local: Path, key: str, sha256: str, progress: ProgressCallback | None
    ) -> None:
        self._retry(
            f"upload {key}",
            lambda: self.client.upload_file(
                str(local),
                self.bucket,
                self._obj(key),
                ExtraArgs={"Metadata": {"sha256": sha256}},
                Config=self.transfer_config,
                Callback=progress,
            ),
        )

    def _publish(self, tmp_key: str, key: str, sha256: str) -> None:
        # Managed copy: server-side, multipart for large objects; metadata is set explicitly
        # because a multipart copy does not carry it over.
        self._retry(
            f"publish {key}",
            lambda: self.client.copy(
                {"Bucket": self.bucket, "Key": self._obj(tmp_key)},
                self.bucket,
                self._obj(key),
                ExtraArgs={"Metadata": {"sha256": sha256}, "MetadataDirective": "REPLACE"},
                Config=self.transfer_config,
            ),
        )

    def _move(self, key: str, dest_key: str, sha256: str | None) -> bool:
        if not self._exists(key):
            return False
        if sha256 is None:  # keep whatever metadata the object has
            self._retry(
                f"copy {key}",
                lambda: self.client.copy_object(
                    CopySource={"Bucket": self.bucket, "Key": self._obj(key)},
                    Bucket=self.bucket,
                    Key=self._obj(dest_key),
                    MetadataDirective="COPY",
                ),
            )
        else:
            self._publish(key, dest_key, sha256)
        return True

    def _discard(self, batch: str) -> None:
        try:
            keys = list(self._list_keys(batch + "/"))
            self._delete(keys)
            prefix = self._obj(batch) + "/"
            uploads = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix)
            for upload in uploads.get("Uploads", []):
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
        except Exception as err:  # cleanup must not mask the real error
            log.warning("could not clean up %s: %s", batch, err)

    def _is_missing(self, err: BaseException) -> bool:
        from botocore.exceptions import ClientError

        if not isinstance(err, ClientError):
            return False
        code = str(err.response.get("Error", {}).get("Code", ""))
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code in ("404", "NoSuchKey", "NotFound") or status == 404

    def _retry_existing(self, what: str, key: str, call: Callable[[], T]) -> T:
        """``call`` on the object at ``key`` with :meth:`_retry`; when there is no such object,
        an :class:`ArtifactNotFoundError` naming its URI."""
        try:
            return self._retry(f"{what} {key}", call)
        except Exception as err:
            if self._is_missing(err):
                raise ArtifactNotFoundError(f"no artifact at {self._uri_of_full(key)}") from None
            raise

    def _head(self, key: str) -> _ObjectInfo:
        head = self._retry_existing(
            "head",
            key,
            lambda: self.client.head_object(Bucket=self.bucket, Key=self._obj(key)),
        )
        return _ObjectInfo(
            size=int(head["ContentLength"]), sha256=head.get("Metadata", {}).get("sha256")
        )

    def _download(self, key: str, dest: Path, progress: ProgressCallback | None) -> None:
        self._retry_existing(
            "download",
            key,
            lambda: self.client.download_file(
                self.bucket,
                self._obj(key),
                str(dest),
                Config=self.transfer_config,
                Callback=progress,
            ),
        )

    def _write_bytes(self, key: str, data: bytes) -> None:
        sha = hashlib.sha256(data).hexdigest()
        # One PUT is atomic on S3: readers see the whole object or none.
        self._retry(
            f"put {key}",
            lambda: self.client.put_object(
                Bucket=self.bucket,
                Key=self._obj(key),
                Body=data,
                Metadata={"sha256": sha},
                ContentType="application/json",
            ),
        )

    def _read_bytes(self, key: str) -> bytes:
        response = self._retry_existing(
            "get",
            key,
            lambda: self.client.get_object(Bucket=self.bucket, Key=self._obj(key)),
        )
        data = response["Body"].read()
        expected = response.get("Metadata", {}).get("sha256")
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise ChecksumMismatchError(f"sha256 mismatch for {self._uri_of_full(key)}")
        return data

    def _exists(self, key: str) -> bool:
        try:
            self._head(key)
        except ArtifactNotFoundError:
            return False
        return True

    def _list_keys(self, prefix: str) -> Iterator[str]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        root = f"{self.prefix}/" if self.prefix else ""
        wanted = self._obj(prefix) if prefix else root
        paginator = self.client.get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self.bucket, Prefix=wanted)
        for page in pages:
            for item in page.get("Contents", []):
                yield item["Key"][cut:]

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            if not batch:
                continue
            self._retry(
                "delete",
                lambda batch=batch: self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self._obj(k)} for k in batch], "Quiet": True},
                ),
            )


# ---------------------------------------------------------------------------------------------


def open_store(
    uri: str | None = None,
    *,
    settings: RegistrySettings | None = None,
    credentials: S3Credentials | None = None,
    create_bucket: bool = False,
) -> ArtifactStore:
    """The store at ``uri`` (``file:///path``, a plain path, or ``s3://bucket/prefix``);
    without a URI, the settings' ``artifact_uri`` (env ``ODYSSEY_ARTIFACT_URI``)."""
    settings = settings or RegistrySettings.from_env()
    uri = uri or settings.artifact_uri
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"s3 URI without a bucket: {uri!r}")
        return S3ArtifactStore(
            parsed.netloc,
            parsed.path.strip("/"),
            settings=settings.s3,
            credentials=credentials,
            create_bucket=create_bucket,
        )
    if parsed.scheme == "file":
        # file:///abs/path, or file://./relative (netloc '.') for the project's default
        path = unquote(parsed.netloc + parsed.path) if parsed.netloc else unquote(parsed.path)
        return LocalArtifactStore(path)
    if parsed.scheme == "":
        return LocalArtifactStore(uri)
    raise ValueError(f"unsupported artifact store URI {uri!r} (use file:// or s3://)")
