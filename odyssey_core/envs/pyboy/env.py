"""A Game Boy platformer as a turn-based environment, with the Odysseus turn semantics.

A turn presses at most two buttons, holds them ``jump_hold_frames`` (15) frames when ``a`` is
among them and ``hold_frames`` (5) otherwise, releases them and runs ``settle_frames`` (1)
more frame, the last of which is rendered as the next observation. The reward is
``reward_scale`` (10) times the progress gained on a turn where no life is lost, 0 on a turn
that loses one; the episode terminates on a death or at the goal, and is truncated after
``max_turns`` turns.

With ``malformed_penalty`` set, a model answer that cannot be read is not played: the
emulator is not stepped, the turn's reward is the penalty, the turn still counts towards
``max_turns``, and the next observation's text starts with :data:`MALFORMED_NOTE`.

Every level start sets the DIV timer register (``timer_div``), which games read as their
randomness: drawn from the episode seed by default, so the same seed gives a byte-identical
start and different seeds start the game's own randomness differently; or a fixed byte. The
cached level start is made once, before the draw, so caching never fixes the DIV.
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from pyboy import PyBoy

from odyssey_core.config import GameBoyEnvConfig
from odyssey_core.envs.base import Observation, StepResult, TurnEnv
from odyssey_core.envs.pyboy.game import GameBoyGame, GameSnapshot
from odyssey_core.protocol import (
    GAMEBOY_SPACE,
    ParsedResponse,
    build_turn_text,
    parse_response,
    resolve_action,
)

SCREEN_SHAPE = (144, 160, 3)
LCDC = 0xFF40  # LCD control register; bit 7 = display on
DIV = 0xFF04  # the divider timer register, which games read as a source of randomness
LCD_WARMUP_FRAMES = 60
_STATE_MAGIC = b"ODYSSEY-GBSTATE1"
#: what the next prompt says after a malformed answer (with ``malformed_penalty`` set)
MALFORMED_NOTE = (
    "Your last answer could not be read, so no button was pressed and it cost a penalty. "
    "Answer in the required format."
)


def new_emulator(rom_path: str) -> PyBoy:
    """A headless, silent, full-speed emulator."""
    pyboy = PyBoy(rom_path, window="null", sound_emulated=False, cgb=False, log_level="ERROR")
    pyboy.set_emulation_speed(0)
    # PyBoy's renderer starts its window-line counter at 0 but leaves it at -1 after every
    # frame rendered with the LCD on, and save states do not carry it. Render until the boot
    # ROM has the LCD on, so the first observation of a fresh emulator draws the window (the
    # HUD) like every later one.
    for _ in range(LCD_WARMUP_FRAMES):
        pyboy.tick(1, True)
        if pyboy.memory[LCDC] & 0x80:
            pyboy.tick(1, True)
            break
    return pyboy


def set_timer_div(pyboy: PyBoy, value: int) -> None:
    """Set the DIV timer register (0xFF04) to ``value`` and keep its sub-step counter.

    A write to 0xFF04 from the bus resets DIV to 0 on the hardware, so the value goes in
    through PyBoy's game-wrapper hook, the one PyBoy offers for this."""
    if not 0 <= value <= 255:
        raise ValueError(f"DIV is one byte (0..255), got {value}")
    pyboy.game_wrapper._set_timer_div(value)


def timer_div(pyboy: PyBoy) -> int:
    """The DIV timer register as the game reads it."""
    return pyboy.memory[DIV]


def emulator_state(pyboy: PyBoy) -> bytes:
    buffer = io.BytesIO()
    pyboy.save_state(buffer)
    return buffer.getvalue()


def screen_rgb(pyboy: PyBoy) -> np.ndarray:
    """A copy of the last rendered frame, uint8 [144, 160, 3]."""
    rgba = pyboy.screen.ndarray
    rgb = np.empty(SCREEN_SHAPE, dtype=np.uint8)
    # Channel by channel is several times faster than copying the strided [:, :, :3] view.
    for channel in range(3):
        rgb[:, :, channel] = rgba[:, :, channel]
    return rgb


def pack_state(emulator: bytes, frame: np.ndarray, meta: dict[str, Any]) -> bytes:
    """An env state: the emulator's state plus the frame on screen and the episode counters."""
    header = json.dumps(meta, sort_keys=True).encode()
    pixels = zlib.compress(np.ascontiguousarray(frame).tobytes(), 1)
    return b"".join(
        (_STATE_MAGIC, struct.pack("<II", len(header), len(pixels)), header, pixels, emulator)
    )


def unpack_state(state: bytes) -> tuple[bytes, np.ndarray | None, dict[str, Any]]:
    """Inverse of :func:`pack_state`; a bare PyBoy state comes back with no frame and no meta."""
    if not state.startswith(_STATE_MAGIC):
        return state, None, {}
    offset = len(_STATE_MAGIC)
    header_len, pixels_len = struct.unpack_from("<II", state, offset)
    offset += 8
    meta = json.loads(state[offset : offset + header_len])
    offset += header_len
    frame = np.frombuffer(zlib.decompress(state[offset : offset + pixels_len]), dtype=np.uint8)
    offset += pixels_len
    return state[offset:], frame.reshape(SCREEN_SHAPE).copy(), meta


class GameBoyEnv(TurnEnv):
    """One level of a Game Boy platformer; see the module docstring for the turn semantics."""

    def __init__(self, game: GameBoyGame, config: GameBoyEnvConfig) -> None:
        self.game = game
        self.config = config
        self.level = game.check_level(config.level)
        self.env_id = f"{game.name}-{self.level}"
        self.rom_path = str(game.rom_path())  # fails here, at make time, for a bad ROM
        self.action_space_spec = GAMEBOY_SPACE
        self.legal_actions = self.action_space_spec.legal_actions()
        self.action_space = gymnasium.spaces.Discrete(len(self.legal_actions))
        self.observation_space = gymnasium.spaces.Box(0, 255, SCREEN_SHAPE, np.uint8)
        self._pyboy: PyBoy | None = None
        self._level_starts: dict[str, bytes] = {}
        self._frame: np.ndarray | None = None
        self._snapshot: GameSnapshot | None = None
        self._turn = 0
        self._fallbacks = 0
        self._last_malformed = False
        self._done = True

    # -- emulator plumbing -------------------------------------------------------------------

    @property
    def pyboy(self) -> PyBoy:
        if self._pyboy is None:
            self._pyboy = new_emulator(self.rom_path)
        return self._pyboy

    def _level_start_state(self, level: str) -> bytes:
        """The packed state at the level's first controllable frame, made once per level."""
        if level not in self._level_starts:
            scratch = new_emulator(self.rom_path)
            try:
                self.game.start_level(scratch, level)
                if self.config.start_lives is not None:
                    self._set_start_lives(scratch, self.config.start_lives)
                scratch.tick(1, True)
                self._level_starts[level] = pack_state(
                    emulator_state(scratch), screen_rgb(scratch), {"level": level, "turn": 0}
                )
            finally:
                scratch.stop(save=False)
        return self._level_starts[level]

    def _start_timer_div(self) -> int:
        """This episode's DIV: drawn from the generator ``reset(seed=...)`` just seeded, or
        the configured byte."""
        if self.config.timer_div == "seed":
            return int(self.np_random.integers(0, 256))
        return self.config.timer_div

    def _set_start_lives(self, pyboy: PyBoy, lives: int) -> None:
        setter = getattr(self.game, "set_lives", None)
        if setter is None:
            raise ValueError(f"{self.game.name} does not support start_lives")
        setter(pyboy, lives)

    def _restore(self, state: bytes) -> dict[str, Any]:
        emulator, frame, meta = unpack_state(state)
        self.pyboy.load_state(io.BytesIO(emulator))
        if frame is None:  # a bare emulator state carries no picture: render one frame
            self.pyboy.tick(1, True)
            frame = screen_rgb(self.pyboy)
        self._frame = frame
        self._snapshot = self.game.read(self.pyboy, self.level)
        return meta

    # -- the Gymnasium API ---------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode at the level start (its DIV as ``config.timer_div`` says), or from
        ``options["state"]`` (bytes, restored as they are).

        ``options["level"]`` switches the level for this and later episodes.
        """
        super().reset(seed=seed)
        options = options or {}
        if "level" in options:
            self.level = self.game.check_level(options["level"])
            self.env_id = f"{self.game.name}-{self.level}"
        state = options.get("state")
        if state is not None:  # a given state carries its own DIV and continues as it is
            meta = self._restore(state)
        else:
            meta = self._restore(self._level_start_state(self.level))
            set_timer_div(self.pyboy, self._start_timer_div())
        if "level" in meta and meta["level"] in self.game.levels:
            self.level = meta["level"]
        self._turn = 0
        self._fallbacks = 0
        self._last_malformed = False
        self._done = False
        return self._observation(), self._info(self._snapshot, buttons=(), invalid=False)

    def step(self, action: Any) -> StepResult:
        if self._done:
            raise RuntimeError(f"{self.env_id}: the episode has ended; call reset() before step()")
        buttons, invalid, parse_error = self._resolve(action)
        if invalid and self.config.malformed_penalty is not None:
            return self._skip_malformed(parse_error)
        self._last_malformed = False
        self._press(buttons)
        before, after = self._snapshot, self.game.read(self.pyboy, self.level)
        self._frame = screen_rgb(self.pyboy)
        self._snapshot = after
        self._turn += 1
        if invalid:
            self._fallbacks += 1

        life_lost = after.dead or after.game_over or after.lives < before.lives
        reward = 0.0 if life_lost else self.config.reward_scale * (after.progress - before.progress)
        terminated = life_lost or after.goal_reached
        truncated = not terminated and self._turn >= self.config.max_turns
        self._done = terminated or truncated
        info = self._info(after, buttons=buttons, invalid=invalid)
        info.update(life_lost=life_lost, parse_error=parse_error)
        return self._observation(), float(reward), terminated, truncated, info

    def _skip_malformed(self, parse_error: str | None) -> StepResult:
        """A malformed answer under ``malformed_penalty``: the game does not move, the turn
        counts and is penalised, and the next prompt says why."""
        assert self._snapshot is not None and self.config.malformed_penalty is not None
        self._turn += 1
        self._fallbacks += 1
        self._last_malformed = True
        truncated = self._turn >= self.config.max_turns
        self._done = truncated
        info = self._info(self._snapshot, buttons=(), invalid=True)
        info.update(life_lost=False, parse_error=parse_error)  # buttons (): nothing pressed
        reward = float(self.config.malformed_penalty)
        return self._observation(), reward, False, truncated, info

    def render(self) -> np.ndarray:  # type: ignore[override]
        if self._frame is None:
            raise RuntimeError(f"{self.env_id}: nothing to render before reset()")
        return self._frame.copy()

    def close(self) -> None:
        if self._pyboy is not None:
            self._pyboy.stop(save=False)
            self._pyboy = None

    # -- save states ---------------------------------------------------------------------------

    @property
    def supports_save_state(self) -> bool:
        return True

    def save_state(self) -> bytes:
        """The whole env state (emulator, frame on screen, turn and fallback counters)."""
        if self._frame is None:
            raise RuntimeError(f"{self.env_id}: nothing to save before reset()")
        meta = {
            "level": self.level,
            "turn": self._turn,
            "fallbacks": self._fallbacks,
            "done": self._done,
            "last_malformed": self._last_malformed,
        }
        return pack_state(emulator_state(self.pyboy), self._frame, meta)

    def load_state(self, state: bytes) -> None:
        """Continue the episode from ``state`` as if it had never left it."""
        meta = self._restore(state)
        self.level = meta.get("level", self.level)
        self._turn = int(meta.get("turn", 0))
        self._fallbacks = int(meta.get("fallbacks", 0))
        self._done = bool(meta.get("done", False))
        self._last_malformed = bool(meta.get("last_malformed", False))

    # -- helpers -------------------------------------------------------------------------------

    def _resolve(self, action: Any) -> tuple[tuple[str, ...], bool, str | None]:
        """Turn any accepted action form into buttons; model text may fall back, code may not."""
        space = self.action_space_spec
        if isinstance(action, str | ParsedResponse):
            parsed = action if isinstance(action, ParsedResponse) else parse_response(action, space)
            buttons, fell_back = resolve_action(
                parsed, space, self.config.invalid_action, self.np_random
            )
            return buttons, fell_back, parsed.error
        if isinstance(action, int | np.integer):
            if not 0 <= int(action) < len(self.legal_actions):
                raise ValueError(
                    f"action index {action} is out of range; there are {len(self.legal_actions)} "
                    "legal actions (see env.legal_actions)"
                )
            return self.legal_actions[int(action)], False, None
        if isinstance(action, Sequence):
            unknown = [b for b in action if b not in space.buttons]
            if unknown or not action:
                raise ValueError(
                    f"illegal buttons {list(action)!r}; use buttons from {space.buttons}"
                )
            buttons = space.normalize(action)
            if len(buttons) > self.config.max_code_buttons:
                raise ValueError(
                    f"at most {self.config.max_code_buttons} buttons per turn, got {buttons} "
                    "(env.max_code_buttons raises the limit for code, e.g. classical baselines)"
                )
            return buttons, False, None
        raise TypeError(
            f"unsupported action {action!r}: give model text, a ParsedResponse, button names "
            "or an index into env.legal_actions"
        )

    def _press(self, buttons: tuple[str, ...]) -> None:
        pyboy = self.pyboy
        pressed = [b for b in buttons if b != "noop"]
        hold = self.config.jump_hold_frames if "a" in pressed else self.config.hold_frames
        for button in pressed:
            pyboy.button_press(button)
        pyboy.tick(hold, False)
        for button in pressed:
            pyboy.button_release(button)
        pyboy.tick(self.config.settle_frames, True)

    def _observation(self) -> Observation:
        assert self._frame is not None
        text = build_turn_text(self.level, self._turn)
        if self._last_malformed:
            text = f"{MALFORMED_NOTE} {text}"
        return Observation(image=self._frame, text=text)

    def state_info(self) -> dict[str, Any]:
        """What ``info`` says about the current state, read when it was reached or restored:
        every key of the last ``reset``/``step`` info but the turn's own (``buttons``,
        ``invalid_action``, ``life_lost``, ``parse_error``). Right after ``load_state(s)`` it
        equals what it was when ``s`` was saved."""
        if self._snapshot is None:
            raise RuntimeError(f"{self.env_id}: no state before reset()")
        return self._state_info(self._snapshot)

    def _state_info(self, snapshot: GameSnapshot) -> dict[str, Any]:
        return {
            "game": self.game.name,
            "level": self.level,
            "progress": snapshot.progress,
            "max_progress": self.game.max_progress(self.level),
            "lives": snapshot.lives,
            "goal_reached": snapshot.goal_reached,
            "game_over": snapshot.game_over,
            "fallback_count": self._fallbacks,
            "turn": self._turn,
            **snapshot.extras,
        }

    def _info(
        self, snapshot: GameSnapshot | None, *, buttons: tuple[str, ...], invalid: bool
    ) -> dict[str, Any]:
        assert snapshot is not None
        return {**self._state_info(snapshot), "buttons": buttons, "invalid_action": invalid}
