"""The curated SFT dataset folder (the contract the SFT trainer reads) and the local file I/O.

Layout of a dataset folder::

    data.parquet        one row per sample (columns: DATASET_SCHEMA, in that order)
    frames/<hash>.png   the frames; ``frame`` in a row is this path relative to the folder
    manifest.json       counts per level and split, sha256 of data.parquet, config, created time
    validation.json     the Great Expectations result; validation.html, its Data Docs page
    quarantine.parquet  rows that failed validation (only when some did)

The split is a pure function of the frame hash (:func:`split_of`), so re-curating never moves
a frame between train and val.

Every read and write of the curation stages goes through the small helpers at the top of this
module (tables, JSON, bytes, file copies), so swapping local files for an artifact store later
means changing this one module.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "ANNOTATION_SCHEMA",
    "DATASET_SCHEMA",
    "CuratedDataset",
    "copy_file",
    "file_sha256",
    "load_dataset",
    "read_json",
    "read_table",
    "split_of",
    "write_bytes_atomic",
    "write_dataset",
    "write_json",
    "write_table",
]

DATA_FILE = "data.parquet"
MANIFEST_FILE = "manifest.json"
FRAMES_DIR = "frames"
QUARANTINE_FILE = "quarantine.parquet"
VALIDATION_JSON = "validation.json"
VALIDATION_HTML = "validation.html"

# The contract: column names, types and order of data.parquet.
DATASET_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("frame", pa.string()),
        ("frame_hash", pa.string()),
        ("game", pa.string()),
        ("level", pa.string()),
        ("turn_text", pa.string()),
        ("response", pa.string()),
        ("buttons", pa.list_(pa.string())),
        ("source", pa.string()),
        ("frame_index", pa.int64()),
        ("timestamp_s", pa.float64()),
        ("teacher", pa.string()),
        ("split", pa.string()),
    ]
)
# What the annotate stage writes: the contract's columns before the split is assigned.
ANNOTATION_SCHEMA = pa.schema([f for f in DATASET_SCHEMA if f.name != "split"])


# --------------------------------------------------------------------------------- local I/O
def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write via a temp file in the same folder and rename, so a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, payload: Any) -> Path:
    text = json.dumps(payload, indent=2, sort_keys=True, default=str)
    return write_bytes_atomic(path, (text + "\n").encode())


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_table(
    path: str | Path, rows: pa.Table | Sequence[Mapping[str, Any]], schema: pa.Schema | None = None
) -> Path:
    """Write rows (dicts or an Arrow table) as Parquet, atomically."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows), schema=schema)
    if schema is not None and isinstance(rows, pa.Table):
        table = table.select(schema.names).cast(schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return write_bytes_atomic(path, sink.getvalue().to_pybytes())


def read_table(path: str | Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def copy_file(src: str | Path, dst: str | Path) -> Path:
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if Path(src).resolve() != dst.resolve():
        shutil.copyfile(src, dst)
    return dst


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------------- contract
def split_of(frame_hash: str, val_share: float) -> str:
    """'val' for a stable ``val_share`` of hashes, else 'train' (depends on the hash only)."""
    return "val" if int(frame_hash[:8], 16) % 1000 < round(val_share * 1000) else "train"


@dataclass(frozen=True)
class CuratedDataset:
    """A loaded dataset folder: its rows (dicts in the contract's columns) and manifest."""

    root: Path
    rows: list[dict[str, Any]]
    manifest: dict[str, Any]

    @property
    def data_path(self) -> Path:
        return self.root / DATA_FILE

    def frame_path(self, row: Mapping[str, Any]) -> Path:
        return self.root / row["frame"]

    def split(self, name: str) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["split"] == name]

    def __len__(self) -> int:
        return len(self.rows)


def write_dataset(
    out_dir: str | Path,
    rows: Iterable[Mapping[str, Any]],
    frames_root: str | Path,
    *,
    val_share: float = 0.1,
    config: Mapping[str, Any] | None = None,
    quarantine: Sequence[Mapping[str, Any]] = (),
    validation_files: Sequence[str | Path] = (),
    extra_manifest: Mapping[str, Any] | None = None,
) -> Path:
    """Write the dataset folder from annotated rows.

    ``rows`` carry every contract column except ``split`` (computed here); their ``frame`` is
    relative to ``frames_root``, and the image is copied to ``frames/<frame_hash>.png``.
    ``validation_files`` (validation.json/html) are copied next to the data.
    """
    if not 0.0 <= val_share < 1.0:
        raise ValueError(f"val_share must be in [0, 1), got {val_share}")
    out = Path(out_dir)
    (out / FRAMES_DIR).mkdir(parents=True, exist_ok=True)
    frames_root = Path(frames_root)
    records: list[dict[str, Any]] = []
    for row in rows:
        frame_hash = str(row["frame_hash"])
        relative = f"{FRAMES_DIR}/{frame_hash}.png"
        copy_file(frames_root / str(row["frame"]), out / relative)
        record = {name: row.get(name) for name in DATASET_SCHEMA.names}
        record.update(
            sample_id=frame_hash,
            frame=relative,
            buttons=[str(b) for b in row["buttons"]],
            frame_index=int(row["frame_index"]),
            timestamp_s=float(row["timestamp_s"]),
            split=split_of(frame_hash, val_share),
        )
        records.append(record)
    records.sort(key=lambda r: (r["level"], r["timestamp_s"], r["sample_id"]))
    write_table(out / DATA_FILE, records, schema=DATASET_SCHEMA)
    if quarantine:
        write_table(out / QUARANTINE_FILE, quarantine)
    else:  # a stale quarantine from an earlier build would mislead
        (out / QUARANTINE_FILE).unlink(missing_ok=True)
    for path in validation_files:
        copy_file(path, out / Path(path).name)
    per_level: dict[str, dict[str, int]] = {}
    for record in records:
        counts = per_level.setdefault(record["level"], {"train": 0, "val": 0})
        counts[record["split"]] += 1
    manifest = {
        "format": "odyssey-sft-v1",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "num_samples": len(records),
        "num_quarantined": len(quarantine),
        "splits": dict(Counter(r["split"] for r in records)),
        "levels": per_level,
        "val_share": val_share,
        "files": {DATA_FILE: file_sha256(out / DATA_FILE)},
        "config": dict(config or {}),
        **dict(extra_manifest or {}),
    }
    write_json(out / MANIFEST_FILE, manifest)
    return out


def load_dataset(root: str | Path, *, verify: bool = True) -> CuratedDataset:
    """Read a dataset folder; ``verify`` checks data.parquet against the manifest's hash."""
    root = Path(root)
    manifest = read_json(root / MANIFEST_FILE)
    if verify:
        expected = manifest.get("files", {}).get(DATA_FILE)
        actual = file_sha256(root / DATA_FILE)
        if expected != actual:
            raise ValueError(f"{root / DATA_FILE} does not match its manifest hash")
    table = pq.read_table(root / DATA_FILE)
    if table.schema.names != DATASET_SCHEMA.names:
        raise ValueError(f"unexpected columns in {root / DATA_FILE}: {table.schema.names}")
    return CuratedDataset(root=root, rows=table.to_pylist(), manifest=manifest)
