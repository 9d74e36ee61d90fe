"""``python -m odyssey_core.envs.alfworld OUT_DIR --count N``: write generated games to disk."""

from odyssey_core.envs.alfworld.generate import main

main()
