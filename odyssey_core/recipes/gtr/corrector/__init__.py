"""Thought correctors for GTR: judge the agent's thought each step and write a better one.

Correctors share one interface (:class:`Corrector`); those that judge each step themselves
implement :meth:`JudgingCorrector.judge` and share the counting and the keeping of a thought
judged right:

* ``openai`` (the paper's: GPT-4o with a 24-solver tool, temperature 0.4, 600 tokens, GTR
  Table 2 and App. C) asks any OpenAI-compatible VLM, given the frame, the current formula,
  the agent's thought and the episode's target formula, GTR's questions (the cards, the
  cards the thought names, the formula it aims for, whether the action moves toward it), in
  each game's own prompt (``vlm_prompts``: Points24, EZPoints, Numberline, Blackjack,
  ALFWorld's household tasks). The model may call a ``solve24`` tool, which runs our exact
  solver. Its answer is a JSON object;
  a malformed one gets one retry with a reminder and is then treated as "no correction"
  (``Correction.valid`` is False), counted in ``metrics()``.
* ``programmatic`` reads the env's privileged state from ``info`` and uses the exact solver:
  an **oracle** (``Corrector.oracle``), whose corrections are always right. Tests and CPU runs
  use it; a report of a model it trained says so.
* ``noisy_programmatic``: the programmatic oracle with a seeded share of wrong corrections of
  the kinds a VLM corrector makes (not an oracle).
* ``alfworld``, the planner-backed oracle for ALFWorld.

A thought judged correct is not rewritten (App. C: "correction: None if the thought is
correct"): ``agrees`` is True, ``thought_kept`` too, and ``corrected_thought`` is the agent's
own thought, which thought cloning then keeps. A trainer adds ``corrected_thought`` to the
cloning set only when ``valid``; ``solvable is False`` is the signal to truncate the episode
(see :mod:`odyssey_core.recipes.gtr.rewards`). What a corrector carries from step to step of
one episode (the target formula the paper's prompt hands back) lives in an
:class:`EpisodeMemory` that the caller keeps per episode.

A preset names a corrector and its arguments (``rollout.corrector``); :func:`build_corrector`
resolves them, reading the settings that come from the environment, and fails with an error
that names a missing setting before any work starts.

One module per corrector: ``programmatic``, ``noisy``, ``vlm`` (``openai``, its prompts in
``vlm_prompts``) and ``alfworld``
(imported when the registry first builds it); ``base`` holds what they share and ``registry``
the names, their settings and the builders. This package re-exports the public names of all
but ``alfworld``.
"""

from __future__ import annotations

from odyssey_core.recipes.gtr.corrector.base import (
    FORMULA_GAMES,
    Correction,
    Corrector,
    EpisodeMemory,
    JudgingCorrector,
    StepToCorrect,
    claimed_cards,
    claimed_formula,
    rank_of,
    verdict_text,
)
from odyssey_core.recipes.gtr.corrector.noisy import NOISY_ERROR_KINDS, NoisyProgrammaticCorrector
from odyssey_core.recipes.gtr.corrector.programmatic import ProgrammaticCorrector, basic_strategy
from odyssey_core.recipes.gtr.corrector.registry import (
    CORRECTOR_SETTINGS,
    CORRECTORS,
    NO_CORRECTOR,
    CorrectorConfigError,
    NoArguments,
    NoisyCorrectorSettings,
    OpenAICorrectorSettings,
    build_corrector,
    check_corrector,
    describe_corrector,
    make_corrector,
    split_corrector_spec,
    validate_corrector_kwargs,
)
from odyssey_core.recipes.gtr.corrector.vlm import (
    SOLVE24_TOOL,
    OpenAICorrector,
    parse_correction_json,
    solve24_tool,
)
from odyssey_core.recipes.gtr.corrector.vlm_prompts import (
    CORRECTOR_GAMES,
    NOT_DETERMINED,
    corrector_query,
    corrector_system_prompt,
)

__all__ = [
    "CORRECTORS",
    "CORRECTOR_GAMES",
    "CORRECTOR_SETTINGS",
    "FORMULA_GAMES",
    "NOISY_ERROR_KINDS",
    "NOT_DETERMINED",
    "NO_CORRECTOR",
    "SOLVE24_TOOL",
    "Correction",
    "Corrector",
    "CorrectorConfigError",
    "EpisodeMemory",
    "JudgingCorrector",
    "NoArguments",
    "NoisyCorrectorSettings",
    "NoisyProgrammaticCorrector",
    "OpenAICorrector",
    "OpenAICorrectorSettings",
    "ProgrammaticCorrector",
    "StepToCorrect",
    "basic_strategy",
    "build_corrector",
    "check_corrector",
    "claimed_cards",
    "claimed_formula",
    "corrector_query",
    "corrector_system_prompt",
    "describe_corrector",
    "make_corrector",
    "parse_correction_json",
    "rank_of",
    "solve24_tool",
    "split_corrector_spec",
    "validate_corrector_kwargs",
    "verdict_text",
]
