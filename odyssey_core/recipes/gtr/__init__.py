"""GTR (Points24, Numberline, ALFWorld): PPO with a corrector and thought cloning -> evaluate ->
register and gate."""
