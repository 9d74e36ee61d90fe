"""What a recipe is, as one object, and :data:`RECIPES`, where every layer finds it by name.

A :class:`Recipe` declares what the layers below the recipes would otherwise guess from a
recipe's name: how its settings load, how its trainer is built, which answer format parses its
model's text (a :data:`~odyssey_core.protocol.RESPONSE_FORMATS` name; the format also says what
a served model answers when the text does not parse), the system prompt its model is trained
with, the input example of its registered MLflow Model, how a model is evaluated for the
promotion gate (:class:`Evaluation`), its pipeline preset loader and nightly evaluation, and
what it can do (:class:`Capabilities`: several ranks, which rollout engines).

``odyssey train --recipe NAME``, the launcher, the registered pyfunc Models, the evaluation's
inference settings and the flows look recipes up here. Nothing below ``odyssey_core.recipes``
imports a recipe: :data:`RECIPES` holds ``"module:attribute"`` paths, found on disk without
importing anything (every ``odyssey_core/recipes/<name>/recipe.py`` defines ``RECIPE``) and
from the ``odyssey.recipes`` entry-point group (a recipe in another distribution), and the
first ``RECIPES.get(name)`` imports that one recipe. A new recipe is one ``recipe.py``.

Compared with torchtune's recipe list (name, script, configs, a distributed flag) and TRL's one
config class per trainer: the recipe here is an object the code calls rather than a script it
starts, it carries its serving and evaluation facts as well as its training, and the
capabilities are checked at the door (:meth:`Recipe.check`) instead of failing inside a run.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odyssey_core.common.registry import Registry, import_object

__all__ = [
    "RECIPES",
    "Capabilities",
    "Evaluation",
    "ExampleInput",
    "Recipe",
    "RecipeError",
    "RecipeRegistry",
    "recipe_for_model",
]

#: the entry-point group through which another distribution adds a recipe (``name = module:attr``)
ENTRY_POINT_GROUP = "odyssey.recipes"
#: the recipe packages in this distribution: every ``recipes/<name>/recipe.py`` defines it
RECIPE_ATTRIBUTE = "RECIPE"
RECIPES_PACKAGE = "odyssey_core.recipes"
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
#: where a :class:`Recipe` field left unset is found in the recipe's package (``module:attr``)
CONVENTIONAL_PATHS = {
    "build_trainer": "train:build_trainer",
    "evaluate_model": "pipeline:evaluate_model",
    "nightly_evaluate": "pipeline:nightly_evaluate",
}


class RecipeError(ValueError):
    """Settings a recipe cannot run, or a model no recipe claims; the message says what to do."""


@dataclass(frozen=True)
class Capabilities:
    """What a recipe's trainer supports, checked before a run starts."""

    distributed: bool = False  # several ranks under a launcher (the preset's ``launch:``)
    rollout_backends: tuple[str, ...] = ("hf",)  # the ``rollout.backend.kind`` values it takes


@dataclass(frozen=True)
class ExampleInput:
    """One row of a registered model's input example: the task text, the legal actions (GTR's
    card games list them), and the shape of a frame of the recipe's screens."""

    text: str
    frame_shape: tuple[int, int, int]
    legal_actions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evaluation:
    """One model evaluated as a pipeline evaluates it: ``scores`` is the per-episode sample the
    promotion gate compares, ``summary`` the headline numbers, ``report`` the Markdown report
    (its folder holds the pictures it links), ``details`` the rest of what the recipe's
    evaluation returned (its own stages read it)."""

    scores: list[float]
    summary: dict[str, float]
    report: Path
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """One recipe, as every layer below ``odyssey_core.recipes`` needs it.

    Callables, by what they take:

    * ``load_settings(preset, overrides)``: a training preset (a name under
      ``configs/<name>/`` or a YAML path) with nested overrides -> ``settings_type``;
    * ``build_trainer(settings, out_dir, *, resume, callbacks)`` -> an ``rl.trainer.Trainer``;
    * ``prepare(settings, out_dir)``: what one process makes before every rank builds its
      trainer (a generated dataset, say); None: nothing;
    * ``system_prompt(env, env_kwargs)``: the prompt the model is trained with on ``env``;
    * ``owns_model(game, model_dir)``: whether a registered model of ``game`` (its folder,
      when there is one) is this recipe's; ``serving_env(game, model_dir)``: the env it plays;
    * ``load_pipeline(preset, overrides)``: the pipeline config (a ``stages.RunConfig``);
    * ``evaluate_model(cfg, model_ref, label, out_dir)`` -> :class:`Evaluation` of one model
      (a store URI or a folder) as the pipeline ``cfg`` evaluates its candidate;
    * ``nightly_evaluate(cfg, *, margin, log_fn)``: the champion re-evaluated (``nightly-eval``).

    Convention over configuration: a recipe declares only what its package does not say by
    its layout. ``package`` defaults to ``odyssey_core.recipes.<name>``, ``response_format``
    to the recipe's name, and ``build_trainer`` / ``evaluate_model`` / ``nightly_evaluate``
    to the functions of those names in ``<package>.train`` / ``<package>.pipeline``
    (:data:`CONVENTIONAL_PATHS`), imported when the recipe is made, so a missing one is a
    :class:`RecipeError` at the door.
    """

    name: str
    summary: str
    settings_type: type
    load_settings: Callable[[str | Path, dict[str, Any] | None], Any]
    system_prompt: Callable[[str, Mapping[str, Any] | None], str]
    owns_model: Callable[[str, Path | None], bool]
    serving_env: Callable[[str, Path | None], str]
    example_input: ExampleInput
    load_pipeline: Callable[[str | Path, Mapping[str, Any] | None], Any]
    package: str = ""  # "": odyssey_core.recipes.<name>
    response_format: str = ""  # "": the recipe's name
    build_trainer: Callable[..., Any] | None = None  # None: <package>.train:build_trainer
    evaluate_model: Callable[[Any, str, str, Path], Evaluation] | None = None
    nightly_evaluate: Callable[..., dict[str, Any]] | None = None
    capabilities: Capabilities = Capabilities()
    prepare: Callable[[Any, Path], None] | None = None
    default_preset: str = "tiny"

    def __post_init__(self) -> None:
        if not self.package:
            object.__setattr__(self, "package", f"{RECIPES_PACKAGE}.{self.name}")
        if not self.response_format:
            object.__setattr__(self, "response_format", self.name)
        for field_name, where in CONVENTIONAL_PATHS.items():
            if getattr(self, field_name) is None:
                object.__setattr__(self, field_name, self._conventional(field_name, where))

    def _conventional(self, field_name: str, where: str) -> Any:
        """``<package>.<where>`` imported, or an error saying where to define it."""
        path = f"{self.package}.{where}"
        module = path.partition(":")[0]
        try:
            return import_object(path)
        except (ModuleNotFoundError, AttributeError) as err:
            missing = getattr(err, "name", None) if isinstance(err, ModuleNotFoundError) else None
            if missing is not None and not f"{module}.".startswith(f"{missing}."):
                raise  # not the conventional module: one it imports is missing
            raise RecipeError(
                f"recipe {self.name!r} declares no {field_name} and {path} cannot be imported "
                f"({err}); define it there or pass {field_name}= to its Recipe"
            ) from err

    def check(self, settings: Any) -> None:
        """Refuse settings this recipe cannot run (several processes, a rollout engine it does
        not support, a paper-size preset without its base model), naming the key and what it
        takes."""
        launch = getattr(settings, "launch", None)
        if launch is not None and launch.launched and not self.capabilities.distributed:
            raise RecipeError(
                f"recipe {self.name!r} trains in one process only; set launch.nproc_per_node "
                f"and launch.nnodes to 1 (got {launch.processes} processes)"
            )
        check_base_model = getattr(settings, "check_base_model", None)
        if check_base_model is not None:  # a paper-size preset with no base model
            check_base_model()
        rollout = getattr(settings, "rollout", None)
        backend = getattr(rollout, "backend", None)
        kind = getattr(backend, "kind", "hf")
        if kind not in self.capabilities.rollout_backends:
            raise RecipeError(
                f"recipe {self.name!r} cannot sample with rollout.backend {kind!r}; it takes "
                f"{', '.join(self.capabilities.rollout_backends)}"
            )


class RecipeRegistry(Registry[Recipe]):
    """:class:`~odyssey_core.common.registry.Registry` of recipes, whose entries check that
    the object they import is the :class:`Recipe` of the name they are registered under."""

    def get(self, name: str) -> Recipe:
        recipe = super().get(name)
        if not isinstance(recipe, Recipe) or recipe.name != name:
            found = getattr(recipe, "name", type(recipe).__name__)
            raise RecipeError(f"the entry of recipe {name!r} is not a Recipe named so: {found!r}")
        return recipe

    __getitem__ = get


def _discovered() -> dict[str, str]:
    """Recipe name -> ``"module:attribute"``: this distribution's recipe packages, then the
    entry points of installed ones (read, not imported)."""
    found = {
        folder.name: f"{RECIPES_PACKAGE}.{folder.name}.recipe:{RECIPE_ATTRIBUTE}"
        for folder in sorted(RECIPES_DIR.iterdir())
        if (folder / "recipe.py").is_file()
    }
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry.value)
    return found


#: name -> :class:`Recipe`, e.g. ``RECIPES.get("espo").build_trainer(settings, out_dir)``
RECIPES: RecipeRegistry = RecipeRegistry("recipe")
for _name, _path in _discovered().items():
    RECIPES.register(_name, _path)


def recipe_for_model(game: str, model_dir: str | Path | None = None) -> Recipe:
    """The recipe whose registered model of ``game`` this is (from the model folder where
    the recipe wrote its provenance, else from the game's name)."""
    folder = None if model_dir is None else Path(model_dir)
    claimed = [n for n in RECIPES.names() if RECIPES.get(n).owns_model(game, folder)]
    if not claimed:
        raise RecipeError(
            f"no recipe claims a model of game {game!r}; name the recipe (one of "
            f"{', '.join(RECIPES.names())})"
        )
    if len(claimed) > 1:
        raise RecipeError(f"recipes {claimed} all claim a model of game {game!r}; name the recipe")
    return RECIPES.get(claimed[0])
