"""GTR (Points24, Numberline, ALFWorld): SFT on corrector-annotated episodes -> PPO with a
corrector and thought cloning -> evaluate -> register and gate."""
