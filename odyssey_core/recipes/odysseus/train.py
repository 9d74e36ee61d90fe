"""The Odysseus recipe on the one trainer (paper Sections 4-6, Appendix C).

It configures the engine and plugs two hooks into it; the loop itself is
:class:`odyssey_core.rl.trainer.Trainer`:

- budget: ``rollout.num_trajectories`` complete episodes per step, each cut after
  ``rollout.max_turns`` turns, levels drawn by the auto-curriculum (:class:`CurriculumHook`);
- answers in the ``<perception>/<reasoning>/<answer>`` format (``RESPONSE_FORMATS["odysseus"]``);
- value function: the turn-level CNN critic, trained every step (critic-only warm-up first);
- estimator: one of the seven of Appendix C.1 (``ppo_critic_pos`` by default);
- objective: token-level PPO clip with the asymmetric clip of Tables 4 and 9, turns with
  A_t == 0 skipped (the compute saving of positive-advantage filtering);
- updater: AdamW at a constant lr, or DeepSpeed ZeRO-2 when the preset names a config;
- collapse monitoring of the thoughts (``collapse/*`` metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from odyssey_core.envs.vector import SubprocVectorEnv, SyncVectorEnv
from odyssey_core.eval.collapse import collapse_metrics
from odyssey_core.recipes.odysseus.curriculum import AutoCurriculum, CurriculumHook
from odyssey_core.recipes.odysseus.settings import RLTrainSettings
from odyssey_core.rl.build import ppo_objective, ppo_trainer_config, ppo_updater, rollout_collector
from odyssey_core.rl.checkpoint import latest_checkpoint
from odyssey_core.rl.hooks import CollapseMonitor
from odyssey_core.rl.policy import build_policy, build_reference
from odyssey_core.rl.trainer import MetricsCallback, Trainer, TrainerConfig
from odyssey_core.rl.value_functions import ValueFunctionInputs, make_value_function
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import EpisodeBudget, default_info_extras

__all__ = [
    "VALUE_FUNCTION",
    "build_trainer",
    "build_vector_env",
    "gameboy_info_extras",
    "trainer_config",
]

#: the name in VALUE_FUNCTIONS every Odysseus run trains: the turn-level CNN critic (Section
#: 4.1), read by the critic estimators and fitted for its metrics under the others
VALUE_FUNCTION = "cnn"


def gameboy_info_extras(before: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The per-turn facts of a Game Boy platformer: the common ones, the buttons pressed and
    whether a life was lost."""
    return {
        **default_info_extras(before, info),
        "buttons": [str(b) for b in info.get("buttons", ())],
        "life_lost": bool(info.get("life_lost", False)),
    }


def build_vector_env(settings: RLTrainSettings) -> Any:
    """``rollout.n_envs`` envs on the configured levels (the collector resets them per episode)."""
    env_config = settings.env.model_copy(update={"max_turns": settings.rollout.max_turns})
    names = [settings.levels[i % len(settings.levels)] for i in range(settings.rollout.n_envs)]
    kind = SubprocVectorEnv if settings.rollout.vector == "subproc" else SyncVectorEnv
    return kind(names, env_kwargs={"config": env_config})


def trainer_config(settings: RLTrainSettings) -> TrainerConfig:
    s = settings
    return ppo_trainer_config(
        s,
        EpisodeBudget(s.rollout.num_trajectories),
        "token_ppo",
        ppo_objective(s.ppo, kl_coef=s.ppo.kl_coef),
        skip_zero_advantage=s.ppo.skip_zero_advantage,
        drop_episode_tail=s.ppo.drop_episode_tail,
        max_turn_samples=s.max_turn_samples,
    )


def _odysseus_collapse(batch: TurnBatch) -> Any:
    return collapse_metrics([e.get("response", "") for e in batch.extras], batch.frames)


def build_trainer(
    settings: RLTrainSettings,
    out_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence[MetricsCallback] = (),
    vector_env: Any = None,
) -> Trainer:
    """Everything of one Odysseus run; with ``resume``, continue from the latest complete
    checkpoint under ``out_dir``."""
    s = settings
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(out) if resume else None
    # a missing or wrong scenario state fails here, before the model loads
    s.rollout.check_start_scenarios(s.env.rom_path, section="rollout.")
    policy = build_policy(s.model, s.lora, out, checkpoint, game=s.model.game)
    collector, sync_hooks = rollout_collector(
        s.rollout.backend,
        policy,
        out,
        vector_env if vector_env is not None else build_vector_env(s),
        s.rollout.generation,
        max_turns=s.rollout.max_turns,
        response_format="odysseus",
        info_extras=gameboy_info_extras,
    )
    updater = ppo_updater(s, policy)
    curriculum = AutoCurriculum(s.levels, floor=s.curriculum.floor, seed=s.seed)
    trainer = Trainer(
        trainer_config(s),
        policy,
        collector,
        make_value_function(
            VALUE_FUNCTION,
            ValueFunctionInputs(policy, seed=s.seed, critic=s.critic, device=s.model.device),
        ),
        updater,
        out,
        hooks=[
            CollapseMonitor(_odysseus_collapse),
            CurriculumHook(
                curriculum,
                s.rollout.num_trajectories,
                update=s.curriculum.enabled,
                start_states={k: Path(v).read_bytes() for k, v in s.rollout.start_states.items()},
            ),
            *sync_hooks,
        ],
        callbacks=callbacks,
        reference=build_reference(
            policy, s.rollout.generation.temperature, s.rollout.score_micro_batch
        )
        if s.ppo.kl_coef > 0
        else None,
    )
    if resume:
        trainer.resume()
    return trainer
