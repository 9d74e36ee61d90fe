"""Level names of the Game Boy games, importable without loading the emulator."""

ODLAND_LEVELS = ("1-1", "1-2", "1-3", "2-1", "2-2", "2-3")
# The paper's ten levels: all twelve but 2-3 and 4-3, whose controls differ (submarine, plane).
MARIO_LEVELS = ("1-1", "1-2", "1-3", "2-1", "2-2", "3-1", "3-2", "3-3", "4-1", "4-2")
