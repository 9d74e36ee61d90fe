"""ROM checks and the Super Mario Land code path, without the commercial ROM."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from odyssey_core.envs import make_env
from odyssey_core.envs.pyboy.mario import DEATH_ADDRESS, ROM_ENV_VAR, SuperMarioLand
from odyssey_core.envs.pyboy.rom import RomError, header_checksum, read_rom_header, validate_rom


def fake_rom(path: Path, title: str, *, size: int = 0x8000, fix_checksum: bool = True) -> Path:
    data = bytearray(size)
    data[0x134 : 0x134 + len(title)] = title.encode()
    if fix_checksum:
        data[0x14D] = header_checksum(bytes(data))
    path.write_bytes(bytes(data))
    return path


def test_packaged_odland_rom_has_a_valid_header(odland_rom: Path) -> None:
    header = read_rom_header(odland_rom)
    assert header.title == "ODLAND"
    assert header.checksum_ok
    assert header.size % 0x4000 == 0


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d / "nope.gb", "not found"),
        (lambda d: d, "is a directory"),
        (lambda d: write(d / "empty.gb", b""), "is empty"),
        (lambda d: write(d / "short.gb", b"\x00" * 100), "truncated"),
    ],
)
def test_unusable_files_fail_naming_path_and_problem(tmp_path: Path, setup, message) -> None:
    path = setup(tmp_path)
    with pytest.raises(RomError, match=message) as err:
        validate_rom(path, expected_title="SUPER MARIOLAND", what="Super Mario Land")
    assert str(path) in str(err.value)


def test_wrong_title_says_what_was_found_and_expected(odland_rom: Path) -> None:
    with pytest.raises(RomError, match="header title is 'ODLAND', expected 'SUPER MARIOLAND'"):
        validate_rom(odland_rom, expected_title="SUPER MARIOLAND", what="Super Mario Land")


def test_bad_header_checksum_is_reported(tmp_path: Path) -> None:
    rom = fake_rom(tmp_path / "bad.gb", "SUPER MARIOLAND", fix_checksum=False)
    with pytest.raises(RomError, match="bad header checksum"):
        validate_rom(rom, expected_title="SUPER MARIOLAND", what="Super Mario Land")


def test_unreadable_rom(tmp_path: Path, monkeypatch) -> None:
    rom = fake_rom(tmp_path / "locked.gb", "SUPER MARIOLAND")

    def refuse(self: Path) -> bytes:  # root reads any file, so simulate what chmod 000 does
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(RomError, match="cannot be read"):
        validate_rom(rom, expected_title="SUPER MARIOLAND", what="Super Mario Land")


def test_mario_without_a_rom_explains_where_to_put_it(monkeypatch) -> None:
    monkeypatch.delenv(ROM_ENV_VAR, raising=False)
    with pytest.raises(RomError, match=ROM_ENV_VAR):
        make_env("mario-1-1")


def test_mario_env_fails_at_make_time_for_the_wrong_game(monkeypatch, odland_rom: Path) -> None:
    monkeypatch.setenv(ROM_ENV_VAR, str(odland_rom))
    with pytest.raises(RomError, match=f"{odland_rom}.*'ODLAND'"):
        make_env("mario-1-1")


def test_mario_accepts_a_rom_with_the_right_header(monkeypatch, tmp_path: Path) -> None:
    rom = fake_rom(tmp_path / "sml.gb", "SUPER MARIOLAND", size=0x10000)
    monkeypatch.setenv(ROM_ENV_VAR, str(rom))
    env = make_env("mario-1-1", max_turns=5)
    assert env.rom_path == str(rom)
    assert env.level == "1-1"
    with pytest.raises(ValueError, match="no level '2-3'"):
        make_env("mario-1-1", level="2-3")


class FakeWrapper(SimpleNamespace):
    def game_over(self) -> bool:
        return self.over


def fake_mario(death_byte: int, world=(1, 1), over=False, lives=2, progress=300):
    wrapper = FakeWrapper(
        over=over, world=world, lives_left=lives, level_progress=progress, time_left=350
    )
    return SimpleNamespace(game_wrapper=wrapper, memory={DEATH_ADDRESS: death_byte})


@pytest.mark.parametrize(
    ("death_byte", "world", "over", "dead", "goal"),
    [
        (0x00, (1, 1), False, False, False),
        (0x80, (1, 1), False, False, False),  # the threshold itself is still alive
        (0x81, (1, 1), False, True, False),
        (0x00, (1, 1), True, True, False),
        (0x00, (1, 2), False, False, True),  # the world moved on: goal passed
    ],
)
def test_mario_ram_reading(tmp_path: Path, death_byte, world, over, dead, goal) -> None:
    game = SuperMarioLand(rom_path=tmp_path / "unused.gb")
    snapshot = game.read(fake_mario(death_byte, world, over), "1-1")
    assert (snapshot.dead, snapshot.goal_reached, snapshot.game_over) == (dead, goal, over)
    assert snapshot.progress == 300 and snapshot.lives == 2


@pytest.mark.needs_sml
def test_real_mario_level_start_and_progress(sml_rom: Path) -> None:
    env = make_env("mario-1-1", rom_path=sml_rom, max_turns=30)
    try:
        _, info = env.reset(seed=0)
        start = info["progress"]
        total = 0.0
        for _ in range(10):
            _, reward, terminated, truncated, info = env.step(("right",))
            total += reward
            if terminated or truncated:
                break
        assert info["progress"] > start
        assert total == pytest.approx(10 * (info["progress"] - start))
    finally:
        env.close()
