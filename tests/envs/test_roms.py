"""ROM checks and the Super Mario Land code path, without the commercial ROM."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from odyssey_core.envs import make_env
from odyssey_core.envs.pyboy.levels import MARIO_LEVELS
from odyssey_core.envs.pyboy.mario import PAPER_MAX_PROGRESS, ROM_ENV_VAR, world_level
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


@pytest.mark.needs_sml
def test_real_mario_level_start_and_progress(sml_rom: Path) -> None:
    with closing(make_env("mario-1-1", rom_path=sml_rom, max_turns=30)) as env:
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


@pytest.mark.needs_sml
def test_all_ten_mario_levels_start(sml_rom: Path) -> None:
    with closing(make_env("mario-1-1", rom_path=sml_rom, max_turns=10)) as env:
        for level in MARIO_LEVELS:
            observation, info = env.reset(options={"level": level})
            assert info["level"] == level and level in observation.text
            assert info["world"] == world_level(level), f"{level} started in {info['world']}"
            assert info["lives"] >= 1 and not info["game_over"] and not info["goal_reached"]
            assert info["time_left"] > 0 and info["progress"] > 0
            assert info["max_progress"] == PAPER_MAX_PROGRESS.get(level)
            assert observation.image.std() > 0, f"{level}: blank first frame"
            _, reward, terminated, _, after = env.step(("right",))
            assert not terminated and after["world"] == world_level(level)
            assert reward == 10 * (after["progress"] - info["progress"]) and reward >= 0


@pytest.mark.needs_sml
def test_mario_ram_decoding_agrees_with_pyboy_after_a_tick(sml_rom: Path) -> None:
    """Right after a tick PyBoy's wrapper is fresh: our decoding must say what it says."""
    with closing(make_env("mario-1-1", rom_path=sml_rom, max_turns=60)) as env:
        env.reset(seed=0)
        for action in [("b", "right")] * 20 + [("a", "right"), ("left",), ("noop",)] * 3:
            _, _, terminated, truncated, info = env.step(action)
            wrapper = env.pyboy.game_wrapper
            assert info["progress"] == wrapper.level_progress
            assert info["lives"] == wrapper.lives_left
            assert info["world"] == tuple(wrapper.world)
            assert info["time_left"] == wrapper.time_left
            if terminated or truncated:
                break
