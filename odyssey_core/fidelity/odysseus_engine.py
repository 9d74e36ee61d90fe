"""The pieces of a CPU Odysseus RL run on the tiny random model: warm-up, settings, evaluation.

Shared by ``bench/learning_odland.py`` and the fidelity comparisons of
:mod:`odyssey_core.fidelity.odysseus`, so that both warm up, train and evaluate the same way.

* :func:`format_warmup`: the tiny random Qwen3-VL answers in the ``<answer>[...]</answer>``
  format only after a few hundred steps of cross-entropy on formatted answers whose buttons are
  drawn afresh from the search expert's eight actions on every visit of a frame; a label that is
  redrawn every time cannot be memorised, so the warm policy spreads over the eight actions and
  RL has something to choose between.
* :func:`evaluate`: sampled episodes from a fixed seed (and the scenario's start state, when the
  settings name one), summarised as mean progress at the last turn +- standard error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from odyssey_core.agents.expert import DEFAULT_ACTIONS
from odyssey_core.eval.stats import mean_se
from odyssey_core.protocol.formats import RESPONSE_FORMATS
from odyssey_core.recipes.odysseus.settings import RLTrainSettings
from odyssey_core.recipes.odysseus.train import build_vector_env, gameboy_info_extras
from odyssey_core.rollout.collector import Collector, EpisodeStart

MIX = DEFAULT_ACTIONS  # the expert's eight actions, normalised button order
EVAL_SEED = 12345
GENERATION = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16}


def mix_frames(
    level: str, episodes: int, turns: int, seed: int, state: bytes | None = None
) -> list[tuple[np.ndarray, str]]:
    """(frame, task text) of every turn of ``episodes`` episodes played uniformly from MIX,
    each from the save ``state`` when given (else from the level start)."""
    from odyssey_core.envs import make_env

    env = make_env(level, max_turns=turns)
    rng = np.random.default_rng(seed)
    options = {"state": state} if state is not None else None
    seen = []
    try:
        for _ in range(episodes):
            observation, _ = env.reset(seed=seed, options=options)
            for _ in range(turns):
                seen.append((np.array(observation.image), observation.text))
                action = MIX[rng.integers(len(MIX))]
                observation, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
    finally:
        env.close()
    return seen


def format_warmup(
    model_dir: Path,
    out_dir: Path,
    steps: int,
    lr: float,
    batch: int,
    seed: int,
    *,
    frames: list[tuple[np.ndarray, str]],
    log: Callable[[str], None] = print,
) -> tuple[Path, list[float]]:
    """Cross-entropy on formatted answers with freshly drawn MIX buttons on ``frames``; saves
    the warm model and processor to ``out_dir`` and returns it with the per-step losses."""
    from odyssey_core.envs.base import Observation
    from odyssey_core.policy.hf import END_OF_TURN, HFPolicy
    from odyssey_core.protocol import format_response

    policy = HFPolicy(model_dir)
    prompts = []
    for frame, text in frames:
        inputs, _ = policy.encode([Observation(image=frame, text=text)])
        prompts.append(inputs["input_ids"][0].tolist())
    answers = [
        policy.tokenizer(format_response(None, None, a) + END_OF_TURN, add_special_tokens=False)[
            "input_ids"
        ]
        for a in MIX
    ]
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    batch = min(batch, len(frames))
    losses = []
    for step in range(steps):
        pick = rng.choice(len(frames), size=batch, replace=False).tolist()
        labels = rng.integers(len(MIX), size=batch).tolist()
        logps = policy.score(
            [prompts[i] for i in pick],
            [answers[j] for j in labels],
            [frames[i][0] for i in pick],
            micro_batch_size=batch,
        )
        loss = -torch.cat(logps).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            log(f"  warm-up step {step:4d}  nll/token {loss.item():.3f}")
    out_dir.mkdir(parents=True, exist_ok=True)
    policy.model.save_pretrained(out_dir, safe_serialization=True)
    policy.processor.save_pretrained(out_dir)
    return out_dir, losses


def evaluate(policy: Any, settings: RLTrainSettings, seed: int = EVAL_SEED) -> dict[str, Any]:
    """``num_trajectories`` sampled episodes of at most ``max_turns`` turns on the first level,
    from its start state when ``rollout.start_states`` names one, env seeds from ``seed``.

    Returns the mean and standard error of the progress at each episode's last turn (``mean``,
    ``se``) and of its best progress (``best_mean``, ``best_se``), the share of valid answers
    and of ``a+right``, the deaths, what was pressed and the number of turns."""
    r = settings.rollout
    level = settings.levels[0]
    state_file = r.start_states.get(level)
    state = Path(state_file).read_bytes() if state_file is not None else None
    vector_env = build_vector_env(settings)
    try:
        collector = Collector(
            vector_env,
            policy,
            r.generation,
            max_turns=r.max_turns,
            response_format=RESPONSE_FORMATS.get("odysseus"),
            info_extras=gameboy_info_extras,
        )
        starts = [EpisodeStart(level=level, state=state) for _ in range(r.num_trajectories)]
        batch, _ = collector.collect(r.num_trajectories, starts=starts, seed=seed)
    finally:
        vector_env.close()
    parts = list(batch.episode_slices())
    finals = [float(batch.extras[p.stop - 1]["progress"]) for p in parts]
    bests = [max(float(batch.extras[i]["progress"]) for i in range(p.start, p.stop)) for p in parts]
    buttons = Counter("+".join(e["buttons"]) for e in batch.extras)
    deaths = sum(batch.extras[p.stop - 1]["life_lost"] for p in parts)

    return {
        "mean": float(np.mean(finals)),
        "se": mean_se(finals)[1],
        "best_mean": float(np.mean(bests)),
        "best_se": mean_se(bests)[1],
        "a_right": buttons["a+right"] / len(batch),
        "valid": 1.0 - float(np.mean([e["invalid_action"] for e in batch.extras])),
        "deaths": int(deaths),
        "buttons": buttons,
        "turns": len(batch),
    }
