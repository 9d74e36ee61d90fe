"""Weight folders a client may ask the server to load, read so that nothing can escape the
weights root, block the process, or poison the served model.

* **Inside the root only.** A requested path (relative to the root, or absolute) is resolved
  with every symlink followed; a folder, or a weight file in it, that resolves outside the
  root is refused with the same answer whether or not it exists, and errors name files only
  by their path inside the root, so the answers say nothing about the rest of the machine.
* **Regular files only, never blocking.** Each ``*.safetensors`` file is opened with
  ``O_NONBLOCK | O_NOFOLLOW`` and checked with ``fstat`` before a byte is read: a FIFO, a
  socket or a device named ``*.safetensors`` is refused at once instead of hanging an
  ``open`` that holds the interpreter (safetensors' own reader opens by path, holding the
  GIL). Every folder on the way is opened from the root down without following a symlink,
  so a folder swapped for a link between the check and the open cannot lead outside. The
  file is then memory-mapped and its header parsed here, with every offset checked
  against the file's size.
* **Checked before any copy.** Every name and shape must match the served model, and every
  floating-point tensor must be finite in the served dtype (a finite float32 can overflow
  float16), before the first value is copied; a refused folder leaves the model as it was.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import torch

from odyssey_core.policy.weight_sync import export_weights

__all__ = [
    "CheckedWeights",
    "WeightFolderError",
    "WeightsOutsideRoot",
    "WeightsRoot",
    "check_weights",
    "open_safetensors",
]

_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, attr)
    for name, attr in {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U64": "uint64",
        "U32": "uint32",
        "U16": "uint16",
        "U8": "uint8",
        "BOOL": "bool",
    }.items()
    if hasattr(torch, attr)
}
MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own reader refuses larger headers too
_FINITE_CHUNK = 2**24  # elements checked at a time, so the check allocates little


class WeightFolderError(ValueError):
    """A folder that cannot be loaded; the message names paths inside the root only."""


class WeightsOutsideRoot(WeightFolderError):
    """The path, or a file in it, resolves outside the weights root."""


class WeightsRoot:
    """The one folder under which weight reloads may read."""

    def __init__(self, root: str | Path) -> None:
        path = Path(root)
        try:
            self.path = path.resolve(strict=True)
        except (OSError, RuntimeError) as error:
            raise ValueError(f"the weights root {path} does not exist: {error}") from None
        if not self.path.is_dir():
            raise ValueError(f"the weights root {path} is not a folder")

    def display(self, path: Path) -> str:
        """``path`` (inside the root) as the client may see it: relative to the root."""
        relative = path.relative_to(self.path).as_posix()
        return relative if relative != "." else "."

    def folder(self, requested: str) -> Path:
        """The folder ``requested`` names, resolved, inside the root."""
        if "\x00" in requested:
            raise WeightFolderError("the path holds a NUL byte")
        candidate = Path(requested)
        if not candidate.is_absolute():
            candidate = self.path / candidate
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError):  # a symlink loop, a name too long
            raise self._outside() from None
        if not resolved.is_relative_to(self.path):
            raise self._outside()
        try:
            is_dir = resolved.is_dir()
        except OSError:
            raise WeightFolderError(f"{self.display(resolved)!r} cannot be read") from None
        if not is_dir:
            raise WeightFolderError(
                f"there is no folder {self.display(resolved)!r} in the weights root"
            )
        return resolved

    def weight_files(self, folder: Path) -> list[Path]:
        """The ``*.safetensors`` files of ``folder``, resolved and each inside the root."""
        try:
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".safetensors"))
        except OSError:
            raise WeightFolderError(f"{self.display(folder)!r} cannot be listed") from None
        if not names:
            raise WeightFolderError(f"no *.safetensors files in {self.display(folder)!r}")
        files = []
        for name in names:
            try:
                resolved = (folder / name).resolve()
            except (OSError, RuntimeError):  # a symlink loop
                raise WeightFolderError(
                    f"{self.display(folder / name)!r} cannot be resolved"
                ) from None
            if not resolved.is_relative_to(self.path):
                raise WeightsOutsideRoot(
                    f"{self.display(folder / name)!r} leads outside the weights root"
                )
            files.append(resolved)
        return files

    def open_inside(self, path: Path, flags: int) -> int:
        """Open ``path`` (resolved, inside the root) one component at a time from the root,
        following no symlink on the way. :meth:`folder` and :meth:`weight_files` check a path
        when it is asked for; a folder on it swapped for a symlink after that check fails here
        (``ELOOP`` / ``ENOTDIR``) instead of leading outside the root."""
        parts = path.relative_to(self.path).parts
        if not parts:
            raise WeightFolderError("the weights root itself is not a file")
        walk = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        folder_fd = os.open(self.path, walk)
        try:
            for part in parts[:-1]:
                inner = os.open(part, walk, dir_fd=folder_fd)
                os.close(folder_fd)
                folder_fd = inner
            return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=folder_fd)
        finally:
            os.close(folder_fd)

    @staticmethod
    def _outside() -> WeightsOutsideRoot:
        return WeightsOutsideRoot(
            "weights may only be loaded from a folder inside the server's weights root "
            "(odyssey serve --weights-root); give a path relative to it"
        )


@dataclass
class SafetensorsFile:
    """An opened, memory-mapped safetensors file; ``tensors`` are views of the map."""

    display: str
    tensors: dict[str, torch.Tensor]
    _map: mmap.mmap | None = field(repr=False)

    def close(self) -> None:
        self.tensors.clear()
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a view still alive: the GC closes it
                self._map.close()


def open_safetensors(path: Path, display: str, root: WeightsRoot | None = None) -> SafetensorsFile:
    """Open ``path`` (already resolved) without blocking or following a symlink, refuse
    anything but a regular file, and parse its header into tensor views. With ``root``, no
    folder on the way is followed either (:meth:`WeightsRoot.open_inside`)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = root.open_inside(path, flags) if root is not None else os.open(path, flags)
    except OSError:
        raise WeightFolderError(f"{display!r} cannot be opened") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise WeightFolderError(f"{display!r} is not a regular file")
        size = info.st_size
        if size < 8:
            raise WeightFolderError(f"{display!r} is too short to be a safetensors file")
        # A private copy-on-write map: writable views for torch, the file never changes.
        mapped = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)
    try:
        tensors = _parse(mapped, size, display)
    except Exception:
        mapped.close()
        raise
    return SafetensorsFile(display, tensors, mapped)


def _parse(mapped: mmap.mmap, size: int, display: str) -> dict[str, torch.Tensor]:
    header_size = int.from_bytes(mapped[:8], "little")
    if header_size > min(MAX_HEADER_BYTES, size - 8):
        raise WeightFolderError(f"{display!r} has a header longer than the file")
    try:
        header = json.loads(bytes(mapped[8 : 8 + header_size]))
    except (UnicodeDecodeError, ValueError):
        raise WeightFolderError(f"{display!r} has a header that is not JSON") from None
    if not isinstance(header, dict):
        raise WeightFolderError(f"{display!r} has a header that is not a JSON object")
    header.pop("__metadata__", None)
    data_start, data_size = 8 + header_size, size - 8 - header_size
    tensors: dict[str, torch.Tensor] = {}
    for name, entry in header.items():
        try:
            dtype = _DTYPES[entry["dtype"]]
            shape = [int(s) for s in entry["shape"]]
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise WeightFolderError(
                f"{display!r}: tensor {name!r} has a malformed or unsupported header entry"
            ) from None
        numel = 1
        for dim in shape:
            if dim < 0:
                raise WeightFolderError(f"{display!r}: tensor {name!r} has a negative shape")
            numel *= dim
        itemsize = torch.empty((), dtype=dtype).element_size()
        if not 0 <= begin <= end <= data_size or end - begin != numel * itemsize:
            raise WeightFolderError(
                f"{display!r}: tensor {name!r} has data offsets that do not fit the file"
            )
        if numel == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
            continue
        offset = data_start + begin
        if offset % itemsize:  # unaligned: copy, so no op sees a misaligned pointer
            raw = bytearray(mapped[offset : offset + numel * itemsize])
            tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(shape)
        else:
            flat = torch.frombuffer(mapped, dtype=dtype, count=numel, offset=offset)
            tensors[name] = flat.reshape(shape)
    return tensors


@dataclass
class CheckedWeights:
    """A folder's tensors, checked against the model and ready to copy; ``close`` it."""

    display: str
    files: list[SafetensorsFile]
    named: dict[str, torch.Tensor]

    def copy_into(self, model: torch.nn.Module) -> int:
        """Copy every tensor into ``model`` (cast to each weight's dtype); returns the count."""
        targets = dict(export_weights(model))
        with torch.no_grad():
            for name, tensor in self.named.items():
                targets[name].copy_(tensor)
        return len(self.named)

    def close(self) -> None:
        self.named.clear()
        for file in self.files:
            file.close()


def _finite(tensor: torch.Tensor, dtype: torch.dtype) -> bool:
    flat = tensor.reshape(-1)
    for start in range(0, flat.numel(), _FINITE_CHUNK):
        piece = flat[start : start + _FINITE_CHUNK].to(dtype)
        if piece.dtype.itemsize == 1:  # float8: isfinite wants a wider type
            piece = piece.float()
        if not bool(torch.isfinite(piece).all()):
            return False
    return True


def check_weights(root: WeightsRoot, requested: str, model: torch.nn.Module) -> CheckedWeights:
    """Open the folder ``requested`` names under ``root`` and check it against ``model``:
    the same names and shapes, every floating-point value finite in the model's dtype.
    Raises :class:`WeightFolderError` (messages name paths inside the root only)."""
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        raise WeightFolderError("the served model holds LoRA adapters; it cannot be reloaded")
    folder = root.folder(requested)
    display = root.display(folder)
    files: list[SafetensorsFile] = []
    try:
        named: dict[str, torch.Tensor] = {}
        for path in root.weight_files(folder):
            file = open_safetensors(path, root.display(path), root)
            files.append(file)
            for name, tensor in file.tensors.items():
                if name in named:
                    raise WeightFolderError(f"tensor {name!r} appears twice in {display!r}")
                named[name] = tensor
        targets = {name: (t.shape, t.dtype) for name, t in export_weights(model)}
        missing = sorted(set(targets) - set(named))
        unexpected = sorted(set(named) - set(targets))
        if missing or unexpected:
            raise WeightFolderError(
                f"{display!r} does not match the served model: missing {_few(missing)}, "
                f"unexpected {_few(unexpected)}"
            )
        wrong = [n for n, t in named.items() if tuple(t.shape) != tuple(targets[n][0])]
        if wrong:
            name = wrong[0]
            raise WeightFolderError(
                f"{display!r}: {len(wrong)} tensors have another shape than the served "
                f"model's, e.g. {name!r} {list(named[name].shape)} vs {list(targets[name][0])}"
            )
        for name, tensor in named.items():
            served = targets[name][1]
            floating = served.is_floating_point and tensor.is_floating_point()
            if floating and not _finite(tensor, served):
                raise WeightFolderError(
                    f"{display!r}: tensor {name!r} holds NaN or infinite values (as "
                    f"{str(served).removeprefix('torch.')}); nothing was loaded"
                )
        return CheckedWeights(display, files, named)
    except BaseException:
        for file in files:
            file.close()
        raise


def _few(names: list[str]) -> str:
    return f"{names[:5]}{'...' if len(names) > 5 else ''}"
