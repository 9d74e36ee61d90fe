"""ESPO (personalized GUI agents): stage-specific verifiable rewards of each step, the
chain-of-user-thought reward over an episode, and the episode-wise advantage."""
