"""The recipes: each configures the engine, plugs its hooks into it and runs its pipeline."""
