"""Rollouts: the TurnBatch (``rollout.batch``), the one collector that plays N envs in lockstep
(``rollout.collector``) and the rollout metrics (``rollout.metrics``)."""
