"""ESPO (personalized GUI agents) as a recipe on the one engine.

``rewards`` (stage-specific verifiable rewards of a step), ``wrapper`` (those rewards on a
replayed demonstration), ``advantages`` (the chain-of-user-thought reward and the ``espo`` /
``grpo_step`` estimators), ``train`` (the episode schedule and ``build_trainer``),
``sft_data`` (the cold start's examples), ``metrics`` / ``evaluation`` / ``report`` (EleAcc,
Op F1, Step SR, RecAcc offline and online, with intervals and pictures), ``pipeline`` (the
``train-espo`` stages) and ``cli`` (``odyssey espo``). The app itself is
:mod:`odyssey_core.envs.persona`.
"""
