"""Reading and checking Game Boy ROM headers, so a wrong file fails early and clearly."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

HEADER_END = 0x150
TITLE_SLICE = slice(0x134, 0x144)
CARTRIDGE_TYPE = 0x147
HEADER_CHECKSUM = 0x14D


class RomError(ValueError):
    """A ROM that is missing, unreadable, or not the game that was asked for."""


@dataclass(frozen=True)
class RomHeader:
    path: Path
    title: str
    cartridge_type: int
    header_checksum: int
    computed_header_checksum: int
    size: int
    sha256: str

    @property
    def checksum_ok(self) -> bool:
        return self.header_checksum == self.computed_header_checksum


def header_checksum(data: bytes) -> int:
    """The Game Boy boot ROM's check over bytes 0x134..0x14C."""
    value = 0
    for byte in data[0x134:0x14D]:
        value = (value - byte - 1) & 0xFF
    return value


def read_rom_header(path: str | Path, *, what: str = "Game Boy") -> RomHeader:
    """Read and sanity-check a ROM file; raise :class:`RomError` naming the path and the problem."""
    rom_path = Path(path).expanduser()
    if not rom_path.exists():
        raise RomError(
            f"{what} ROM not found: {rom_path} does not exist. Give the path to a .gb file."
        )
    if rom_path.is_dir():
        raise RomError(f"{what} ROM path {rom_path} is a directory; expected a .gb file.")
    try:
        data = rom_path.read_bytes()
    except OSError as err:
        raise RomError(f"{what} ROM {rom_path} cannot be read ({err.strerror or err}).") from err
    if not data:
        raise RomError(f"{what} ROM {rom_path} is empty (0 bytes); expected a Game Boy ROM.")
    if len(data) < HEADER_END or len(data) % 0x4000:
        raise RomError(
            f"{what} ROM {rom_path} has {len(data)} bytes; a Game Boy ROM is a multiple of "
            "16384 bytes "
            "with a header at 0x100-0x14F. The file is truncated or not a ROM."
        )
    raw_title = data[TITLE_SLICE]
    title = raw_title.split(b"\x00", 1)[0].decode("ascii", errors="replace").strip()
    return RomHeader(
        path=rom_path,
        title=title,
        cartridge_type=data[CARTRIDGE_TYPE],
        header_checksum=data[HEADER_CHECKSUM],
        computed_header_checksum=header_checksum(data),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def validate_rom(path: str | Path, *, expected_title: str, what: str) -> RomHeader:
    """Check that ``path`` is an intact ROM of the game whose header title is ``expected_title``."""
    header = read_rom_header(path, what=what)
    if not header.checksum_ok:
        raise RomError(
            f"{what} ROM {header.path} has a bad header checksum "
            f"(stored 0x{header.header_checksum:02X}, "
            f"computed 0x{header.computed_header_checksum:02X}); the file is corrupt or patched."
        )
    if header.title != expected_title:
        raise RomError(
            f"{header.path} is not the {what} ROM: its header title is {header.title!r}, "
            f"expected {expected_title!r}."
        )
    return header
