"""Game Boy platformers on PyBoy: odland (ours, open) and Super Mario Land (the user's ROM).

Importing this package does not load the emulator; ``factory.make_gameboy_env`` does.
"""

import warnings

# PyBoy's SDL binding announces which SDL it found at import; headless runs never use SDL.
warnings.filterwarnings("ignore", message="Using SDL2 binaries", category=UserWarning)
