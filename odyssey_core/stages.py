"""The one stage envelope every pipeline stage runs in, and what the recipes' pipelines share.

A stage of a recipe's pipeline (``odyssey_core.recipes.<recipe>.pipeline``) is a plain function
that returns a small dict of URIs and numbers, never models or datasets, so an orchestrator
(the Prefect flows under ``flows/``) can pass it around cheaply. Its work happens inside
:func:`run_stage`, which does the same five things for every stage:

1. **fingerprint** the stage's inputs: its label, the run, the config sections it depends on
   and the current *publication* of every store folder it reads (so when an upstream stage
   reruns and republishes under the same URI, everything downstream of it reruns too);
2. **skip** when ``<stage dir>/done.json`` holds that fingerprint and the local outputs it
   names still exist: the recorded outputs are returned and no work is done (that is how a
   failed run resumes; training additionally continues from its latest checkpoint);
3. open the MLflow **stage run** (tag ``odyssey.stage``), nested under the flow's parent run;
4. run the stage's **body**, which fetches its inputs and **publishes** its outputs to the
   artifact store under ``runs/<run_id>/<prefix>/`` through the :class:`StageContext`;
5. write the **marker** last and atomically: a crash before it means the stage reruns, a
   failing body writes none.

:func:`register_and_gate` is the one promotion step: register the candidate version, evaluate
the champion (or, for the first model, the base model) on the same episodes, run the
registry's Welch gate on the two samples (it moves the ``champion`` alias and tags the
version with the reason) and record the decision on the stage run.

This module imports no Prefect: it runs the same from a notebook, a CLI or a test.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import statistics
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from odyssey_core.common.metrics_log import METRICS_FILE
from odyssey_core.common.redaction import redact_uri, summarise_error
from odyssey_core.config import RenamedKeysModel, deep_merge, load_preset
from odyssey_core.recipe import RECIPES, Evaluation, Recipe

if TYPE_CHECKING:
    from odyssey_core.registry.artifacts import ArtifactStore
    from odyssey_core.registry.models import GateResult, PromotionDecision
    from odyssey_core.registry.tracking import TrackedRun, Tracker
    from odyssey_core.sft.settings import SFTSettings

__all__ = [
    "DONE_MARKER",
    "EVAL_ROWS",
    "PIPELINE_SFT_DEFAULTS",
    "RUN_FOLDER_ID_FILE",
    "SCORES_FILE",
    "FineTuned",
    "GateOutcome",
    "NightlyEvaluate",
    "PipelineSection",
    "PromotionStage",
    "RowsEvaluator",
    "RunConfig",
    "SFTStageSection",
    "Stage",
    "StageContext",
    "StagePreset",
    "TrainedModel",
    "advance",
    "base_model_ref",
    "eval_model_inputs",
    "evaluate_rows_one_by_one",
    "evaluate_stage",
    "fetch",
    "fetch_json",
    "fine_tune_base_model",
    "fingerprint",
    "finished_checkpoint",
    "local_copy",
    "make_tracker",
    "nightly_evaluator",
    "nightly_stage",
    "nightly_table",
    "numeric",
    "parent_run",
    "publication",
    "read_marker",
    "register_and_gate",
    "register_stage",
    "results_table",
    "run_folder_id",
    "run_stage",
    "run_store",
    "servable_model_dir",
    "serving_fields",
    "sft_here_or_launched",
    "sft_settings_for",
    "step_bar",
    "train_here_or_launched",
    "train_servable_model",
    "training_dir",
]

log = logging.getLogger(__name__)

DONE_MARKER = "done.json"


# -- the run's configuration --------------------------------------------------------------------


class PipelineSection(RenamedKeysModel):
    """A section of a pipeline config: unknown keys are errors, and a key the section renamed
    (``renamed_keys``: dotted old path -> what replaces it) fails naming its replacement."""

    model_config = ConfigDict(extra="forbid")


class StagePreset(PipelineSection):
    """A stage that runs a library preset: its name (under the recipe's folder of
    ``configs/``) or a YAML path, and nested overrides laid over it."""

    preset: str = Field(default="tiny", description="a preset name or a YAML path")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="nested keys laid over the preset"
    )


class PromotionStage(PipelineSection):
    """The promotion gate (``promotion:``): how far a candidate must beat the champion (or the
    base model), at which significance, and how far the champion may fall at night."""

    margin: float | None = Field(default=None, ge=0, description="None: registry settings")
    alpha: float | None = Field(
        default=None, gt=0, lt=1, description="the gate's significance; None: registry settings"
    )
    nightly_margin: float = Field(
        default=0.0,
        ge=0,
        description="how far below its recorded score the champion may fall at night before "
        "the nightly run fails and alerts",
    )


class RunConfig(PipelineSection):
    """Where one pipeline run lives: its folder, artifact store, MLflow tracking and experiment.
    Every recipe's pipeline config extends it; the envelope reads only these fields."""

    name: str = "tiny"
    game: str = "odland"
    run_dir: Path = Path("out/pipeline/tiny")
    run_id: str | None = Field(default=None, description="artifact-store prefix; default: name")
    artifact_uri: str | None = Field(
        default=None, description="default: env ODYSSEY_ARTIFACT_URI, else file://<run>/artifacts"
    )
    tracking_uri: str | None = Field(
        default=None,
        description="default: env MLFLOW_TRACKING_URI, else sqlite:///<run>/mlflow.db",
    )
    experiment: str = "odyssey/train_odysseus"

    #: the folder of its presets under ``configs/``, what errors call them, and the folder they
    #: lived in before (a path into it is told where they are now)
    preset_dir: ClassVar[str] = ""
    preset_what: ClassVar[str] = "pipeline"
    preset_moved_from: ClassVar[str | None] = None

    @classmethod
    def load(cls, preset: str | Path = "tiny", overrides: Mapping[str, Any] | None = None) -> Self:
        """A preset name under ``configs/<preset_dir>/`` or a YAML path, plus nested
        overrides."""
        return load_preset(
            cls,
            preset,
            dict(overrides or {}),
            kind=cls.preset_dir,
            what=cls.preset_what,
            moved_from=cls.preset_moved_from,
        )

    @property
    def run_key(self) -> str:
        return self.run_id or self.name

    @property
    def store_uri(self) -> str:
        """The preset's ``artifact_uri``, else the environment's ``ODYSSEY_ARTIFACT_URI`` (an
        ``s3://`` store reads ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` and the AWS
        credential chain), else a folder in the run folder."""
        return (
            self.artifact_uri
            or os.environ.get("ODYSSEY_ARTIFACT_URI")
            or (self.run_dir.resolve() / "artifacts").as_uri()
        )

    @property
    def mlflow_uri(self) -> str:
        """The preset's ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else SQLite in the run
        folder."""
        return (
            self.tracking_uri
            or os.environ.get("MLFLOW_TRACKING_URI")
            or f"sqlite:///{self.run_dir.resolve() / 'mlflow.db'}"
        )

    def stage_dir(self, stage: str) -> Path:
        path = self.run_dir / stage
        path.mkdir(parents=True, exist_ok=True)
        return path


# -- fingerprints and done markers --------------------------------------------------------------


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-able inputs (configs as dicts, upstream URIs)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def read_marker(stage_dir: Path) -> dict[str, Any] | None:
    """A stage folder's done marker (fingerprint, outputs, local paths), or None."""
    path = stage_dir / DONE_MARKER
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:  # a torn write: treat as not done
        return None


def _recorded(stage_dir: Path, key: str) -> dict[str, Any] | None:
    """The recorded outputs when the marker matches ``key`` and its local outputs still exist."""
    marker = read_marker(stage_dir)
    if marker is None or marker.get("fingerprint") != key:
        return None
    if not all(Path(p).exists() for p in marker.get("local", [])):
        return None
    log.info("%s: done marker matches, skipping", stage_dir.name)
    return dict(marker["outputs"])


def _write_marker(
    stage_dir: Path, key: str, outputs: dict[str, Any], local: Sequence[Path]
) -> dict[str, Any]:
    # Written atomically and last: a crash before this line means the stage reruns.
    marker = {"fingerprint": key, "outputs": outputs, "local": [str(p) for p in local]}
    tmp = stage_dir / f".{DONE_MARKER}.tmp"
    tmp.write_text(json.dumps(marker, indent=2, sort_keys=True))
    os.replace(tmp, stage_dir / DONE_MARKER)
    return outputs


# -- store and tracking ---------------------------------------------------------------------------


def make_tracker(cfg: RunConfig) -> Tracker:
    """The run's MLflow experiment. Its artifacts go where ``ODYSSEY_MLFLOW_ARTIFACT_LOCATION``
    says; else, with a tracking server (``http(s)://``), where the server keeps them (its
    ``--artifacts-destination``, e.g. S3); else under the run folder, not ./mlruns."""
    from odyssey_core.registry.tracking import Tracker

    location = os.environ.get("ODYSSEY_MLFLOW_ARTIFACT_LOCATION") or None
    if location is None and not cfg.mlflow_uri.startswith(("http://", "https://")):
        location = (cfg.run_dir.resolve() / "mlflow-artifacts").as_uri()
    return Tracker(cfg.mlflow_uri, cfg.experiment, artifact_location=location)


def run_store(cfg: RunConfig, prefix: str | None = None) -> ArtifactStore:
    """The run's artifact store; with ``prefix``, scoped to ``runs/<run_key>/<prefix>/``."""
    from odyssey_core.registry.artifacts import open_store

    store = open_store(cfg.store_uri)
    return store if prefix is None else store.for_run(cfg.run_key, prefix)


RUN_FOLDER_ID_FILE = ".odyssey-run-id"


def run_folder_id(cfg: RunConfig) -> str:
    """The identity of this run folder: made once, when the folder is first used, and gone with
    it. Caches that live outside the folder (Prefect's results) key on it, so a removed and
    recreated run folder is a new run, never answered with outputs that went with the old one.
    Two processes that make it at once agree: the first link wins and the other reads it."""
    path = cfg.run_dir / RUN_FOLDER_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(uuid.uuid4().hex)
    try:
        os.link(tmp, path)  # publishes the id only if no other process has
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()


def publication(cfg: RunConfig, uri: str) -> str:
    """Which publication of a store folder ``uri`` holds: its manifest (written last, with the
    upload time). A stage's URI is the same on every rerun, so fingerprints take this as well:
    when an upstream stage reruns, everything downstream of it reruns too."""
    store = run_store(cfg)
    manifest = store.read_manifest(store.key_for(uri))
    return fingerprint(manifest.created_at, [(f.path, f.sha256) for f in manifest.files])


def fetch(cfg: RunConfig, uri: str, dest: Path, published: str | None = None) -> Path:
    """A local copy of the current publication of store folder ``uri`` (``published``, when the
    caller already knows it) at ``dest``; reused when a previous attempt fetched the same
    publication, replaced when the folder was republished since."""
    published = publication(cfg, uri) if published is None else published
    stamp = dest.with_name(f".{dest.name}.publication")
    if dest.is_dir() and stamp.is_file() and stamp.read_text() == published:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    store = run_store(cfg)
    store.get_dir(store.key_for(uri), dest, overwrite=True)
    stamp.write_text(published)
    return dest


def fetch_json(cfg: RunConfig, local: str | Path | None, uri: str | None, dest: Path) -> Any:
    """A JSON file a stage published: the local copy when this machine still has it (the stage
    ran here), else the published one at ``uri`` fetched to ``dest`` (another worker ran it)."""
    path = Path(local or "")
    if not path.is_file():
        if uri is None:
            raise FileNotFoundError(f"{local!r} is not a file and no store URI was given")
        store = run_store(cfg)
        path = store.get_file(store.key_for(uri), dest)
    return json.loads(Path(path).read_text())


def local_copy(cfg: RunConfig, ref: str, work: Path, name: str = "model") -> Path:
    """A local folder for a model (or dataset) reference: a store URI, fetched into
    ``<work>/<name>-<hash of the URI>`` (another URI never reuses its copy), or a local path."""
    if "://" not in ref:
        return Path(ref)
    return fetch(cfg, ref, work / f"{name}-{hashlib.sha256(ref.encode()).hexdigest()[:12]}")


@contextmanager
def parent_run(cfg: RunConfig, flow_name: str) -> Iterator[str]:
    """An MLflow parent run for one flow run (``<flow>:<run key>``, the config as params);
    yields its id, which the stages nest under."""
    tracker = make_tracker(cfg)
    with tracker.run(f"{flow_name}:{cfg.run_key}", params=cfg.model_dump(mode="json")) as run:
        yield run.run_id


@dataclass(frozen=True)
class NightlyPlan:
    """What a nightly evaluation of ``cfg.game`` works with."""

    series: TrackedRun  # the game's one long-lived nightly run: its metrics are the time series
    step: int  # this night's point in the series
    targets: dict[str, int]  # label -> registered version: the champion, and a newer candidate
    out_dir: Path  # where tonight's evaluations are written
    model_name: str
    mlflow_uri: str
    game: str = ""

    def evaluate(
        self,
        evaluate: Callable[[str, str, Path], tuple[float, Mapping[str, Any]]],
        metric: str,
        log_fn: Callable[[str], None] = print,
    ) -> dict[str, dict[str, Any]]:
        """Evaluate every target: ``evaluate(checkpoint_uri, label, out_dir) -> (mean, extra)``
        where ``extra`` holds ``report_markdown`` and more ``<label>_<key>`` metrics; logs the
        report folder and ``<label>_mean`` (and the extra metrics) as tonight's points of the
        series. Returns the rows :meth:`verdict` reads."""
        from odyssey_core.registry.models import ModelRegistry

        registry = ModelRegistry(self.mlflow_uri)
        rows: dict[str, dict[str, Any]] = {}
        for label, version in self.targets.items():
            uri = registry.checkpoint_uri(self.game, version)
            mean, extra = evaluate(uri, label, self.out_dir / label)
            rows[label] = {
                "version": version,
                "mean": float(mean),
                "inference": extra.get("inference"),
                "report_markdown": extra.get("report_markdown"),
            }
            folder = extra.get("report_dir", self.out_dir / label)
            self.series.log_artifact(folder, f"reports/{self.out_dir.name}/{label}")
            points = {f"{label}_mean": mean}
            points.update({f"{label}_{k}": v for k, v in extra.get("metrics", {}).items()})
            self.series.log_metrics(numeric(points), step=self.step)
            log_fn(f"nightly {label} v{version}: {metric} {mean:.3f}")
        return rows

    def verdict(
        self, rows: Mapping[str, Mapping[str, Any]], recorded_tag: str, margin: float, **extra: Any
    ) -> dict[str, Any]:
        """Compare tonight's champion mean (``rows["champion"]["mean"]``) with the score its
        version recorded (tag ``recorded_tag``): ``regressed`` when it fell by more than
        ``margin``; logged to the series and returned with the rows."""
        from odyssey_core.registry.models import ModelRegistry

        champion = self.targets["champion"]
        client = ModelRegistry(self.mlflow_uri).client
        tags = client.get_model_version(self.model_name, str(champion)).tags or {}
        recorded = float(tags.get(recorded_tag, "nan"))
        current = float(rows["champion"]["mean"])
        regressed = math.isfinite(recorded) and recorded - current > margin
        self.series.log_metrics({"champion_regressed": float(regressed)}, step=self.step)
        return {
            "model_name": self.model_name,
            **extra,
            "champion": champion,
            "recorded": recorded,
            "current": current,
            "margin": margin,
            "regressed": regressed,
            "evaluated": dict(rows),
            "mlflow_run_id": self.series.run_id,
        }


def nightly_plan(cfg: RunConfig, out_dir: Path | None = None) -> NightlyPlan:
    """The nightly series run of ``cfg.game`` (made on the first night), tonight's step, and the
    versions to evaluate; fails when the game has no champion yet."""
    import time

    from odyssey_core.registry.models import ModelRegistry

    registry = ModelRegistry(cfg.mlflow_uri)
    champion = registry.champion(cfg.game)
    if champion is None:
        raise RuntimeError(f"{registry.model_name(cfg.game)} has no champion to evaluate")
    tracker = make_tracker(cfg)
    found = tracker.client.search_runs(
        [tracker.experiment_id], filter_string=f"tags.`odyssey.nightly` = '{cfg.game}'"
    )
    series = (
        tracker.attach(found[0].info.run_id)
        if found
        else tracker.start(f"nightly-{cfg.game}", tags={"odyssey.nightly": cfg.game})
    )
    targets = {"champion": champion}
    candidate = registry.candidate(cfg.game)
    if candidate is not None and candidate != champion:
        targets["candidate"] = candidate
    return NightlyPlan(
        series=series,
        step=len(tracker.metric_history(series.run_id, "champion_mean")),
        targets=targets,
        out_dir=out_dir or Path(cfg.run_dir) / "nightly" / time.strftime("%Y%m%dT%H%M%S"),
        model_name=registry.model_name(cfg.game),
        mlflow_uri=cfg.mlflow_uri,
        game=cfg.game,
    )


def nightly_table(result: Mapping[str, Any]) -> str:
    """A markdown table of a nightly evaluation (:meth:`NightlyPlan.verdict`'s result): each
    evaluated model's mean, then the champion's recorded score."""
    rows = ["| model | version | mean progress |", "|---|---|---|"]
    for label, row in result["evaluated"].items():
        rows.append(f"| {label} | {row['version']} | {row['mean']:.4g} |")
    rows.append(f"| champion (recorded) | {result['champion']} | {result['recorded']:.4g} |")
    inference = next(iter(result["evaluated"].values()), {}).get("inference")
    if inference:
        rows.append("")
        rows.append(
            f"inference settings of {inference.get('source')}: "
            + ", ".join(
                f"{k} {inference[k]}"
                for k in (
                    "image_scale",
                    "max_new_tokens",
                    "temperature",
                    "top_p",
                    "device",
                    "dtype",
                )
            )
        )
    return "\n".join(rows)


def results_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A markdown table of what each stage returned (URIs and numbers only)."""
    lines = ["| stage | output | value |", "|---|---|---|"]
    for stage, outputs in results.items():
        for key, value in outputs.items():
            text = f"{value:.4g}" if isinstance(value, float) else redact_uri(str(value))
            lines.append(f"| {stage} | {key} | {text} |")
    return "\n".join(lines)


# -- helpers for the stages' bodies -------------------------------------------------------------


def training_dir(work: Path, key: str) -> Path:
    """``work/train`` for the inputs fingerprinted by ``key``. A retry with the same inputs
    resumes from the checkpoints there; other inputs (a new dataset or SFT model, another
    preset) start from scratch instead of resuming a run that trained on something else."""
    train = work / "train"
    stamp = work / ".train-inputs"
    if stamp.is_file() and stamp.read_text() != key:
        log.info("%s: inputs changed, not resuming the previous training run", work.name)
        shutil.rmtree(train, ignore_errors=True)
    train.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)
    return train


#: What every pipeline's SFT stage shares (one epoch, as both papers with a cold start give;
#: a cosine schedule with 3% warm-up; no held-out eval; a checkpoint every 50 steps, two kept);
#: a recipe adds its batch and learning rate.
PIPELINE_SFT_DEFAULTS: dict[str, Any] = {
    "epochs": 1,
    "lr_scheduler": "cosine",
    "warmup_ratio": 0.03,
    "eval_every": 0,
    "checkpoint_every": 50,
    "keep_checkpoints": 2,
}


class SFTStageSection(PipelineSection):
    """A pipeline's ``sft:`` section: SFTSettings fields over the recipe's ``sft_defaults``,
    checked when the pipeline config loads rather than when the SFT stage starts."""

    sft_defaults: ClassVar[Mapping[str, Any]] = PIPELINE_SFT_DEFAULTS

    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="SFTSettings fields over the recipe's SFT defaults (dtype, device and "
        "image size come from the training preset's model section)",
    )

    @model_validator(mode="after")
    def _sft_settings_load(self) -> Self:
        from odyssey_core.sft.settings import SFTSettings

        SFTSettings.model_validate(deep_merge(dict(self.sft_defaults), self.settings))
        return self


def sft_settings_for(
    model: Any, defaults: Mapping[str, Any], overrides: Mapping[str, Any]
) -> SFTSettings:
    """An SFT stage's settings: the recipe's ``defaults``, then what the RL policy's ``model``
    settings fix (dtype, as float32 unless bfloat16; device, attention, frame size), then the
    pipeline's ``sft.settings`` (``overrides``)."""
    from odyssey_core.sft.settings import SFTSettings

    from_model: dict[str, Any] = {
        "model_dtype": model.dtype if model.dtype in ("float32", "bfloat16") else "float32",
        "device": model.device,
        "attn_implementation": model.attn_implementation,
        "image_scale": model.image_scale,
        "image_size": model.image_size,
    }
    return SFTSettings.model_validate(
        deep_merge(deep_merge(dict(defaults), from_model), dict(overrides))
    )


def sft_here_or_launched(
    settings: Any,
    dataset: Path,
    model: Path,
    out_dir: Path,
    *,
    on_metrics: Callable[[dict[str, Any]], None],
    emit: Callable[[str], None],
    system_prompts: Mapping[str, str] | None = None,
) -> Any:
    """A stage's SFT run in ``out_dir``, resuming: in this process, or under the launcher when
    ``settings.launch`` asks for several processes (every rank's lines go to ``emit``, rank 0's
    metrics to ``on_metrics`` as it writes them). Returns the :class:`SFTResult`."""
    from odyssey_core.launch import LAUNCH_PRESET, run_training, sft_args, write_preset
    from odyssey_core.sft.trainer import SFTTrainer, read_sft_result

    if not settings.launch.launched:
        trainer = SFTTrainer(
            settings,
            dataset,
            model,
            out_dir,
            resume=True,
            callbacks=[on_metrics],
            system_prompts=system_prompts,
        )
        return trainer.train()
    preset = write_preset(settings, out_dir / LAUNCH_PRESET)
    prompts_file = None
    if system_prompts:  # the launched command reads them from a file
        prompts_file = (out_dir / "system-prompts.json").resolve()
        prompts_file.write_text(json.dumps(dict(system_prompts)))
    run_training(
        settings.launch,
        sft_args(preset, dataset.resolve(), Path(model).resolve(), out_dir.resolve(), prompts_file),
        emit=emit,
        metrics_file=out_dir / METRICS_FILE,
        on_metrics=on_metrics,
    )
    return read_sft_result(out_dir)


def train_here_or_launched(
    recipe: str,
    settings: Any,
    build_trainer: Callable[..., Any],
    out_dir: Path,
    *,
    on_step: Callable[[int, dict[str, float]], None],
    emit: Callable[[str], None],
) -> Any:
    """A stage's RL run of ``recipe`` in ``out_dir``, resuming: ``build_trainer`` in this
    process (returns the trained policy), or ``odyssey train --recipe recipe`` under the
    launcher when ``settings.launch`` asks for several processes (returns None: the weights are
    in the last checkpoint; every rank's lines go to ``emit``, each step's metrics to
    ``on_step``)."""
    from odyssey_core.launch import LAUNCH_PRESET, run_training, train_args, write_preset

    if settings.launch.launched:
        preset = write_preset(settings, out_dir / LAUNCH_PRESET)
        run_training(
            settings.launch,
            train_args(recipe, preset, out_dir.resolve()),
            emit=emit,
            metrics_file=out_dir / METRICS_FILE,
            on_metrics=lambda m: on_step(int(m["step"]), m),
        )
        return None
    trainer = build_trainer(settings, out_dir, resume=True, callbacks=[on_step])
    try:
        trainer.train()
        return trainer.policy
    finally:
        trainer.close()


def finished_checkpoint(train_dir: Path, what: str) -> tuple[Path, int]:
    """The last checkpoint a finished training run (``what``: its name in the error) left under
    ``train_dir``, and the step it was written at."""
    from odyssey_core.rl.checkpoint import latest_checkpoint, load_trainer_state

    checkpoint = latest_checkpoint(train_dir)
    if checkpoint is None:
        raise RuntimeError(f"{what} finished without a checkpoint under {train_dir}")
    return checkpoint, int(load_trainer_state(checkpoint)["step"])


def servable_model_dir(
    ctx: StageContext,
    settings: Any,
    policy: Any,
    train_dir: Path,
    checkpoint: Path,
    *,
    system_prompt: str,
) -> Path:
    """The trained policy as a plain model folder: the checkpoint's policy folder, or with LoRA
    (an adapter alone cannot be evaluated or served) the adapter merged into its base model in
    ``<work>/merged-<tag>``. ``policy`` is :func:`train_here_or_launched`'s; None (trained in
    other processes) rebuilds it from the checkpoint."""
    from odyssey_core.models.lora import merge_and_save
    from odyssey_core.rl.checkpoint import policy_dir
    from odyssey_core.rl.policy import build_policy

    if settings.lora is None:
        return policy_dir(checkpoint)
    if policy is None:
        policy = build_policy(
            settings.model, settings.lora, train_dir, checkpoint, system_prompt=system_prompt
        )
    model_dir = ctx.work / f"merged-{ctx.tag}"
    shutil.rmtree(model_dir, ignore_errors=True)
    merge_and_save(policy.model, model_dir, policy.processor, inplace=True)
    return model_dir


def base_model_ref(ctx: StageContext, settings: Any, built: Path) -> str:
    """The model a stage trained from ``settings.model`` started from: with no configured path,
    the tiny model built for this run at ``built``, published here; else that path."""
    if settings.model.path is None:
        return ctx.publish_dir(built, f"base-model-{ctx.tag}")
    return str(Path(settings.model.path).resolve())


@dataclass(frozen=True)
class FineTuned:
    """What :func:`fine_tune_base_model` made: the SFT run's result (``SFTResult``), the
    published model and the model it started from."""

    result: Any
    model_uri: str
    base_model_uri: str


def fine_tune_base_model(
    ctx: StageContext,
    settings: Any,
    sft_settings: Any,
    dataset: Path,
    *,
    system_prompts: Mapping[str, str],
) -> FineTuned:
    """A recipe's SFT stage on the base model of a training preset's ``settings.model`` (the
    tiny model built into the stage folder when its path is null): ``sft_settings`` on
    ``dataset`` here or under the launcher, resuming; the model published as ``model-<tag>``
    (the stage run's ``model`` ref) and kept; the base model's ref (:func:`base_model_ref`)."""
    from odyssey_core.rl.policy import resolve_base_model

    base = resolve_base_model(settings.model, ctx.work)
    result = sft_here_or_launched(
        sft_settings,
        dataset,
        base,
        ctx.training_dir(),
        on_metrics=ctx.log_sft_metrics,
        emit=log.info,
        system_prompts=system_prompts,
    )
    model_uri = ctx.publish_dir(result.final_dir, f"model-{ctx.tag}", ref="model")
    ctx.keep(result.final_dir)
    return FineTuned(result, model_uri, base_model_ref(ctx, settings, base))


@dataclass(frozen=True)
class TrainedModel:
    """What :func:`train_servable_model` made: the servable model folder, the checkpoint it
    came from and its step, and the model before SFT and RL (a store URI or a local path)."""

    model_dir: Path
    checkpoint: Path
    steps: int
    base_model: str


def train_servable_model(
    ctx: StageContext,
    recipe: str,
    settings: Any,
    build_trainer: Callable[..., Any],
    *,
    system_prompt: str,
    sft_base_model: str | None,
) -> TrainedModel:
    """A recipe's train stage: ``build_trainer`` on ``settings`` in ``<work>/run-<tag>``, here
    or under the launcher, resuming (:func:`train_here_or_launched`); its last checkpoint as a
    servable model folder (:func:`servable_model_dir`); and the model before SFT and RL: the
    SFT stage's ``sft_base_model``, else what ``settings.model`` names or the tiny model built
    for the run (:func:`base_model_ref`)."""
    train_dir = ctx.work / f"run-{ctx.tag}"
    policy = train_here_or_launched(
        recipe, settings, build_trainer, train_dir, on_step=ctx.log_step, emit=log.info
    )
    checkpoint, steps = finished_checkpoint(train_dir, f"{recipe} training")
    model_dir = servable_model_dir(
        ctx, settings, policy, train_dir, checkpoint, system_prompt=system_prompt
    )
    if sft_base_model is None:
        sft_base_model = base_model_ref(ctx, settings, train_dir / "base-model")
    return TrainedModel(model_dir, checkpoint, steps, sft_base_model)


def eval_model_inputs(settings: Any, generation: Mapping[str, Any]) -> dict[str, Any]:
    """What an evaluation takes from a training preset's ``settings`` besides its env: the
    generation params with the eval section's ``generation`` laid over them, and the model
    settings without the path (the evaluated model's folder replaces it)."""
    return {
        "generation": settings.rollout.generation.model_copy(update=dict(generation)).model_dump(
            mode="json"
        ),
        "model": settings.model.model_dump(mode="json", exclude={"path"}),
    }


def serving_fields(model: Any, max_new_tokens: int) -> dict[str, Any]:
    """How a registered MLflow Model answers: ``model``'s image scale and size, device and
    dtype, and the answer's token budget."""
    return {
        "image_scale": model.image_scale,
        "image_size": model.image_size,
        "max_new_tokens": max_new_tokens,
        "device": model.device,
        "dtype": model.dtype,
    }


def step_bar(desc: str, total: int | None = None) -> Any:
    """A per-step progress bar for the long stages; shown on a terminal only (disable=None),
    so logs and CI stay clean."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=None)


def advance(bar: Any, step: int, **postfix: float) -> None:
    """Move ``bar`` to ``step`` (never back) and show ``postfix`` numbers on it."""
    bar.update(max(0, step - bar.n))
    if postfix:
        bar.set_postfix({k: f"{v:.3g}" for k, v in postfix.items()}, refresh=False)


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of ``metrics`` as floats (booleans, NaN, strings dropped)."""
    out = {}
    for key, value in metrics.items():
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if is_number and math.isfinite(float(value)):
            out[key] = float(value)
    return out


# -- the envelope ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """How a stage is named: ``name`` is its MLflow stage run (tag ``odyssey.stage``);
    ``folder`` its folder under the run folder (default: the name); ``prefix`` where it
    publishes in the store, ``runs/<run_key>/<prefix>/`` (default: the folder); ``label``
    the first part of its fingerprint (default: the name)."""

    name: str
    folder: str = ""
    prefix: str = ""
    label: str = ""

    @property
    def dir_name(self) -> str:
        return self.folder or self.name

    @property
    def store_prefix(self) -> str:
        return self.prefix or self.dir_name

    @property
    def key_label(self) -> str:
        return self.label or self.name


@dataclass
class StageContext:
    """What a stage's body works with: its folder, its fingerprint, the open MLflow stage run,
    its store inputs (name -> (uri, publication)) and the local outputs the marker keeps."""

    cfg: RunConfig
    stage: Stage
    work: Path
    key: str
    run: TrackedRun
    inputs: dict[str, tuple[str, str]] = field(default_factory=dict)
    kept: list[Path] = field(default_factory=list)

    @property
    def tag(self) -> str:
        """The fingerprint's first 12 characters: names what depends on the inputs."""
        return self.key[:12]

    def fetch(self, name: str, dest: Path) -> Path:
        """A local copy of the input ``name`` at ``dest``, the publication fingerprinted."""
        uri, published = self.inputs[name]
        return fetch(self.cfg, uri, dest, published)

    def fetch_inputs(self, folder: Path) -> None:
        """Every input into ``folder/<its name>``."""
        for name in self.inputs:
            self.fetch(name, folder / name)

    def training_dir(self) -> Path:
        """``<stage dir>/train`` for these inputs (see :func:`training_dir`)."""
        return training_dir(self.work, self.key)

    def store(self) -> ArtifactStore:
        """The store scoped to this stage's prefix."""
        return run_store(self.cfg, self.stage.store_prefix)

    def publish_dir(self, path: str | Path, name: str, *, ref: str | None = None) -> str:
        """Publish a folder as ``<prefix>/<name>``; with ``ref``, the stage run records the URI
        under that name. Returns the URI."""
        uri = self.store().put_dir(path, name)
        if ref is not None:
            self.run.log_artifact_ref(ref, uri)
        return uri

    def publish_file(self, path: str | Path, name: str) -> str:
        """Publish one file as ``<prefix>/<name>``; returns the URI."""
        return self.store().put_file(path, name)

    def keep(self, *paths: str | Path) -> None:
        """Local outputs the marker requires: when one is gone, the stage runs again."""
        self.kept.extend(Path(p) for p in paths)

    def log_step(self, step: int, metrics: Mapping[str, Any]) -> None:
        """A training step's numeric metrics on the stage run (an RL ``on_step`` callback)."""
        self.run.log_metrics(numeric(metrics), step=step)

    def log_sft_metrics(self, metrics: Mapping[str, Any]) -> None:
        """An SFT line's numeric metrics on the stage run, at its ``step`` when it has one (an
        ``on_metrics`` callback of :func:`sft_here_or_launched`)."""
        step = metrics.get("step")
        self.run.log_metrics(numeric(metrics), step=int(step) if step is not None else None)


def run_stage(
    cfg: RunConfig,
    stage: Stage | str,
    body: Callable[[StageContext], Mapping[str, Any]],
    *,
    config: Sequence[Any] = (),
    inputs: Mapping[str, str] | None = None,
    params: BaseModel | Mapping[str, Any] | None = None,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """Run one stage in the envelope: fingerprint ``(label, run key, *config, inputs'
    publications)``; return the recorded outputs when the marker matches; else open the MLflow
    stage run (nested under ``parent_run_id``, logging ``params``), call ``body(ctx)``, which
    publishes through ``ctx`` and returns the outputs, and write the marker last. A body that
    raises fails the stage run and writes no marker."""
    stage = Stage(stage) if isinstance(stage, str) else stage
    work = cfg.stage_dir(stage.dir_name)
    resolved = {name: (uri, publication(cfg, uri)) for name, uri in (inputs or {}).items()}
    parts = [*config, resolved] if resolved else list(config)
    key = fingerprint(stage.key_label, cfg.run_key, *parts)
    if (done := _recorded(work, key)) is not None:
        return done
    tracker = make_tracker(cfg)
    with tracker.stage_run(stage.name, parent_run_id=parent_run_id, params=params) as run:
        ctx = StageContext(cfg, stage, work, key, run, resolved)
        outputs = dict(body(ctx))
    return _write_marker(work, key, outputs, ctx.kept)


# -- register + promotion gate --------------------------------------------------------------------


@dataclass(frozen=True)
class GateOutcome:
    """What :func:`register_and_gate` did: the registered version, the gate's decision, what it
    was compared with (``champion`` version or ``base``) and that reference's evaluation."""

    model_name: str
    version: int
    decision: PromotionDecision
    reference: str
    reference_version: int | None
    reference_scores: list[float]
    reference_evaluation: Any

    @property
    def gate(self) -> GateResult:
        return self.decision.gate

    @property
    def promoted(self) -> bool:
        return self.decision.promoted

    def outputs(self) -> dict[str, Any]:
        """The decision as stage outputs (recipes add their own numbers)."""
        return {
            "model_name": self.model_name,
            "version": self.version,
            "promoted": self.decision.promoted,
            "reason": self.gate.reason,
            "reference": self.reference,
            "reference_version": self.reference_version,
            "champion": self.decision.champion,
        }


def _model_folder(ctx: StageContext, checkpoint_uri: str) -> tuple[Path | None, str | None]:
    """A local copy of the checkpoint to log as an MLflow Model and its publication, or
    ``(None, None)`` when the URI is not a model folder (a test's placeholder URI)."""
    local = Path(checkpoint_uri)
    published = None
    if not local.is_dir():
        try:
            published = publication(ctx.cfg, checkpoint_uri)
            local = fetch(ctx.cfg, checkpoint_uri, ctx.work / "registered-model", published)
        except Exception as err:  # a placeholder URI, or not in this run's store
            log.warning(
                "%s is not in the store (%s): registered without an MLflow Model",
                redact_uri(checkpoint_uri),
                summarise_error(err),
            )
            return None, None
    if not (local / "config.json").is_file():
        log.warning(
            "%s has no config.json: registered without an MLflow Model", redact_uri(checkpoint_uri)
        )
        return None, published
    return local, published


_LINK_FOLDERS = ("report", "reports", "plots", "videos")


def _review_links(ctx: StageContext) -> dict[str, str]:
    """Links a reviewer follows from the version's page: the artifact refs, datasets and
    report / plot / video folders of the stage runs of this flow run (this one's siblings)."""
    client = ctx.run.client
    run = client.get_run(ctx.run.run_id)
    parent = run.data.tags.get("mlflow.parentRunId")
    runs = [run]
    if parent:
        runs = list(
            client.search_runs(
                [run.info.experiment_id],
                filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
                max_results=200,
            )
        )
    links: dict[str, str] = {}
    for other in runs:
        stage = other.data.tags.get("odyssey.stage", other.info.run_name or "run")
        for key, value in other.data.tags.items():
            if key.startswith("artifact."):
                links[f"link.{stage}.{key.removeprefix('artifact.')}"] = value
            elif key.startswith("dataset."):
                links[key] = value
        try:
            folders = {a.path for a in client.list_artifacts(other.info.run_id) if a.is_dir}
        except Exception as err:  # an unreachable artifact store must not block registration
            log.warning(
                "cannot list the artifacts of run %s: %s", other.info.run_id, summarise_error(err)
            )
            folders = set()
        for name in _LINK_FOLDERS:
            if name in folders:
                links[f"link.{stage}.{name}"] = f"{other.info.artifact_uri.rstrip('/')}/{name}"
    return links


def _review_description(
    outcome_name: str,
    version: int,
    decision: PromotionDecision,
    label: str,
    metrics: Mapping[str, float] | None,
    links: Mapping[str, str],
) -> str:
    """The version's description: the decision, the evaluation table and the links."""
    gate = decision.gate
    c, r = gate.candidate, gate.reference_stats

    def num(x: float) -> str:
        return f"{x:.4g}"

    lines = [
        f"## {outcome_name} v{version}: {'promoted' if decision.promoted else 'not promoted'}",
        "",
        gate.reason,
        "",
        f"| | candidate (v{version}) | {label} |",
        "|---|---|---|",
        f"| episodes | {c.n} | {r.n} |",
        f"| mean | {num(c.mean)} | {num(r.mean)} |",
        f"| standard error | {num(c.se)} | {num(r.se)} |",
        "",
        "| statistic | value |",
        "|---|---|",
        f"| mean difference | {num(gate.mean_difference)} |",
        f"| margin | {gate.margin:g} |",
        f"| Welch t | {num(gate.t)} |",
        f"| df | {num(gate.df)} |",
        f"| one-sided p | {num(gate.p)} |",
        f"| alpha | {gate.alpha:g} |",
    ]
    if metrics:
        lines += ["", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {num(float(v))} |" for k, v in sorted(metrics.items())]
    if links:
        lines += ["", "Links:", ""]
        lines += [f"- {k}: {v}" for k, v in sorted(links.items())]
    return "\n".join(lines)


def register_and_gate(
    ctx: StageContext,
    *,
    game: str,
    checkpoint_uri: str,
    candidate_scores: Sequence[float],
    base_model: str,
    evaluate_reference: Callable[[str, str, Path], tuple[Sequence[float], Any]],
    margin: float | None = None,
    alpha: float | None = None,
    metrics: Mapping[str, float] | None = None,
    tags: Mapping[str, str] | None = None,
    serving: Mapping[str, Any] | None = None,
    links: Mapping[str, str] | None = None,
) -> GateOutcome:
    """Register ``checkpoint_uri`` as a new (``candidate``) version of ``game``'s model and
    gate it: ``evaluate_reference(model, label, out_dir) -> (per-episode scores, details)``
    evaluates the champion (``label`` "champion") or, while there is none, ``base_model``
    ("base") now, on the same episodes as the candidate; :meth:`ModelRegistry.promote` runs
    the Welch test on the two samples, moves the ``champion`` alias when the candidate wins
    and tags the version with the reason. The stage run records the reference and the
    decision (``promotion.promoted``, ``promotion.reason``).

    The version is a real MLflow Model (:mod:`odyssey_core.registry.pyfunc`), logged under
    the stage run as ``model``: the checkpoint folder with the recipe's answer format and
    system prompt (``serving`` overrides :func:`~odyssey_core.registry.pyfunc.serving_spec`'s
    arguments: ``image_scale``, ``env_kwargs``, ...). Its page carries the evaluation table
    (description), the decision (``promotion.*``), links to the flow run's report, plots,
    videos and datasets (``link.*``, ``dataset.*``, plus ``links``) and the fingerprints
    (``fingerprint.*``)."""
    from odyssey_core.registry.models import ModelRegistry
    from odyssey_core.registry.pyfunc import log_agent_model, serving_spec

    registry = ModelRegistry(ctx.cfg.mlflow_uri)
    champion = registry.champion(game)
    reference_ref = registry.checkpoint_uri(game, champion) if champion else base_model
    label = "champion" if champion else "base"
    shutil.rmtree(ctx.work / label, ignore_errors=True)  # the champion may have changed
    scores, evaluation = evaluate_reference(reference_ref, label, ctx.work / label)
    reference_scores = [float(x) for x in scores]
    version_tags = dict(tags) if tags else {}
    model_dir, published = _model_folder(ctx, checkpoint_uri)
    model_source = None
    if model_dir is not None:
        options: dict[str, Any] = {"recipe": version_tags.get("odyssey.recipe")}
        env_kwargs = getattr(getattr(ctx.cfg, "eval", None), "env_kwargs", None)
        if env_kwargs:
            options["env_kwargs"] = env_kwargs
        options.update(serving or {})
        spec = serving_spec(game, model_dir=model_dir, **options)
        model_source = log_agent_model(ctx.run.client, ctx.run.run_id, model_dir, spec)
        version_tags.update({"odyssey.recipe": spec["recipe"], "odyssey.format": spec["format"]})
    version_tags["odyssey.mlflow_model"] = "pyfunc" if model_source else "none"
    version = registry.register_checkpoint(
        checkpoint_uri,
        game,
        run_id=ctx.run.run_id,
        metrics=dict(metrics) if metrics else None,
        tags=version_tags,
        model_source=model_source,
    )
    decision = registry.promote(
        game,
        candidate_scores,
        champion_scores=reference_scores if champion else None,
        base_scores=None if champion else reference_scores,
        margin=margin,
        alpha=alpha,
        candidate_version=version,
    )
    review = {**_review_links(ctx), **(links or {})}
    if model_source:
        review["link.model"] = model_source
    fingerprints = {
        "fingerprint.stage": ctx.key,
        "fingerprint.config": fingerprint(ctx.cfg.model_dump(mode="json")),
    }
    if published is not None:
        fingerprints["fingerprint.checkpoint"] = published
    for key, uri in review.items():
        if key.startswith("dataset."):
            try:
                fingerprints[f"fingerprint.{key}"] = publication(ctx.cfg, uri)
            except Exception as err:  # not in this run's store: the URI alone is recorded
                log.info("no publication for %s: %s", redact_uri(uri), summarise_error(err))
    name = registry.model_name(game)
    registry.describe_version(
        game,
        version,
        description=_review_description(name, version, decision, label, metrics, review),
        tags={**review, **fingerprints},
    )
    ctx.run.log_params({"reference": label, "reference_version": champion or "base"})
    ctx.run.set_tags(
        {"promotion.promoted": str(decision.promoted), "promotion.reason": decision.gate.reason}
    )
    return GateOutcome(
        model_name=name,
        version=version,
        decision=decision,
        reference=label,
        reference_version=champion,
        reference_scores=reference_scores,
        reference_evaluation=evaluation,
    )


# -- the generic evaluate / register / nightly stages ---------------------------------------------

#: what the evaluate stage writes and publishes: the candidate's per-episode gate sample
#: (``scores``) and every row's (``rows``: label -> model URI and scores)
SCORES_FILE = "scores.json"
#: the rows an evaluate stage may play, in the report's order: the base model, the SFT model RL
#: started from, the trained candidate
EVAL_ROWS = ("base", "sft", "candidate")

#: ``(label -> model ref, out_dir) -> label -> Evaluation``: how a recipe plays several rows
RowsEvaluator = Callable[[Mapping[str, str], Path], Mapping[str, Evaluation]]


def _mean(scores: Sequence[float]) -> float:
    return statistics.fmean(scores) if scores else math.nan


def _json_number(value: Any) -> Any:
    """NaN and infinities as None: strict JSON, and equal to itself when a recorded output is
    compared with a fresh one."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _promotion(cfg: RunConfig) -> PromotionStage:
    promotion = getattr(cfg, "promotion", None)
    if not isinstance(promotion, PromotionStage):
        raise TypeError(
            f"{type(cfg).__name__} has no promotion: section (a PromotionStage); a pipeline "
            "that registers or re-evaluates a champion needs one"
        )
    return promotion


def evaluate_rows_one_by_one(cfg: RunConfig, recipe: Recipe) -> RowsEvaluator:
    """Each row played alone by ``recipe.evaluate_model`` in ``<out_dir>/<label>``."""

    def evaluate(models: Mapping[str, str], out_dir: Path) -> dict[str, Evaluation]:
        return {
            label: recipe.evaluate_model(cfg, ref, label, out_dir / label)
            for label, ref in models.items()
        }

    return evaluate


def evaluate_stage(
    cfg: RunConfig,
    recipe: Recipe,
    rows: Mapping[str, str | None],
    *,
    stage: Stage | str = "evaluate",
    evaluate_rows: RowsEvaluator | None = None,
    summary_keys: Sequence[str] | None = None,
    extra: Callable[[Mapping[str, Evaluation]], Mapping[str, Any]] | None = None,
    config: Sequence[Any] = (),
    inputs: Mapping[str, str] | None = None,
    params: BaseModel | Mapping[str, Any] | None = None,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """The evaluate stage of any recipe: play the ``rows`` (label -> model ref; ``candidate``
    is required, a row whose ref is None is left out) with ``evaluate_rows`` in the stage
    folder (default: each alone with ``recipe.evaluate_model`` in ``<stage dir>/<label>``),
    then record and publish what the gate and the flow read. The stage run gets the
    candidate's summary (``eval.<key>``), each other row's mean gate score (``<row>_mean``),
    ``extra(evaluations)``'s numbers and the report folder (the candidate's report's folder,
    ``report``); the store gets the report folder and :data:`SCORES_FILE`. Returns
    ``report_uri``, ``scores_uri``, ``scores_path``, ``report_markdown``, ``episodes``, the
    candidate's ``summary_keys`` (default: all; NaN as None), ``<row>_mean`` and ``extra``'s
    outputs. A row's model in this run's store is fingerprinted by its publication (a model
    republished under the same URI is evaluated again), any other by its ref."""
    models = {label: ref for label, ref in rows.items() if ref is not None}
    if "candidate" not in models:
        raise ValueError(f"the evaluate stage needs a candidate row; got {sorted(models)}")
    in_store = {label: ref for label, ref in models.items() if ref.startswith(cfg.store_uri)}
    stored = {f"{label}_model": ref for label, ref in in_store.items()}
    stored.update(inputs or {})
    play = evaluate_rows or evaluate_rows_one_by_one(cfg, recipe)

    def body(ctx: StageContext) -> dict[str, Any]:
        evaluated = dict(play(models, ctx.work))
        missing = set(models) - set(evaluated)
        if missing:
            raise RuntimeError(f"{recipe.name}'s evaluation returned no row for {sorted(missing)}")
        candidate = evaluated["candidate"]
        means = {f"{label}_mean": _mean(evaluated[label].scores) for label in models}
        means.pop("candidate_mean")
        more = dict(extra(evaluated)) if extra is not None else {}
        summary = {f"eval.{k}": v for k, v in candidate.summary.items()}
        ctx.run.log_metrics(numeric({**summary, **means, **more}))
        report_dir = candidate.report.parent
        ctx.run.log_artifact(report_dir, "report")
        report_uri = ctx.publish_dir(report_dir, "report")
        recorded = {
            "label": "candidate",
            "scores": [float(x) for x in candidate.scores],
            "rows": {
                label: {"uri": ref, "scores": [float(x) for x in evaluated[label].scores]}
                for label, ref in models.items()
            },
        }
        scores_path = ctx.work / SCORES_FILE
        scores_path.write_text(json.dumps(recorded))
        scores_uri = ctx.publish_file(scores_path, SCORES_FILE)
        ctx.keep(scores_path, candidate.report)
        keys = candidate.summary if summary_keys is None else summary_keys
        return {
            "report_uri": report_uri,
            "scores_uri": scores_uri,
            "scores_path": str(scores_path),
            "report_markdown": str(candidate.report),
            "episodes": len(candidate.scores),
            **{k: _json_number(candidate.summary.get(k, math.nan)) for k in keys},
            **{k: _json_number(v) for k, v in means.items()},
            **{k: _json_number(v) for k, v in more.items()},
        }

    text_refs = {label: ref for label, ref in models.items() if label not in in_store}
    return run_stage(
        cfg,
        stage,
        body,
        config=[*config, text_refs],
        inputs=stored,
        params=params,
        parent_run_id=parent_run_id,
    )


def register_stage(
    cfg: RunConfig,
    recipe: Recipe,
    checkpoint_uri: str,
    evaluation: Mapping[str, Any],
    base_model: str,
    *,
    stage: Stage | str = "register",
    score_keys: Sequence[str] = (),
    reference_keys: Sequence[str] = (),
    metric: str | None = None,
    tags: Mapping[str, str] | None = None,
    serving: Mapping[str, Any] | None = None,
    config: Sequence[Any] = (),
    inputs: Mapping[str, str] | None = None,
    parent_run_id: str | None = None,
) -> dict[str, Any]:
    """The register stage of any recipe: register ``checkpoint_uri`` and gate it
    (:func:`register_and_gate`, with the pipeline's ``promotion:`` margin and alpha) on the
    candidate's per-episode sample that the evaluate stage (``evaluation``, its outputs)
    recorded, against the champion or, for the first model, ``base_model``, played now by
    ``recipe.evaluate_model``; a reference the evaluate stage already played as a row of that
    label (the base model, the same URI) is reused, not played again. The version carries
    ``eval.<key>`` for the evaluation's ``score_keys`` (what ``nightly_stage`` compares with),
    ``odyssey.pipeline_run``, ``odyssey.recipe`` and ``tags``. The stage run records the
    candidate's and the reference's mean, the reference's ``reference_keys`` summary numbers
    (``<label>_<key>``) and the version. Returns the decision (:meth:`GateOutcome.outputs`),
    ``candidate_mean``, ``reference_mean``, ``reference_<key>`` and ``metric`` when given."""
    promotion = _promotion(cfg)
    stage = Stage(stage) if isinstance(stage, str) else stage
    recorded = fetch_json(
        cfg,
        evaluation.get("scores_path"),
        evaluation.get("scores_uri"),
        cfg.stage_dir(stage.dir_name) / "candidate-scores.json",
    )
    candidate_scores = [float(x) for x in recorded["scores"]]
    rows = recorded.get("rows", {})
    version_metrics = {
        f"eval.{k}": float(evaluation[k]) for k in score_keys if evaluation.get(k) is not None
    }

    def evaluate_reference(ref: str, label: str, out_dir: Path) -> tuple[list[float], Any]:
        row = rows.get(label)
        if row is not None and row["uri"] == ref:  # played on these episodes, these settings
            return [float(x) for x in row["scores"]], None
        evaluated = recipe.evaluate_model(cfg, ref, label, out_dir)
        return [float(x) for x in evaluated.scores], evaluated

    def body(ctx: StageContext) -> dict[str, Any]:
        outcome = register_and_gate(
            ctx,
            game=cfg.game,
            checkpoint_uri=checkpoint_uri,
            candidate_scores=candidate_scores,
            base_model=base_model,
            evaluate_reference=evaluate_reference,
            margin=promotion.margin,
            alpha=promotion.alpha,
            metrics=version_metrics,
            tags={
                "odyssey.pipeline_run": cfg.run_key,
                "odyssey.recipe": recipe.name,
                **(tags or {}),
            },
            serving={"recipe": recipe.name, **(serving or {})},
        )
        gate, label = outcome.gate, outcome.reference
        reference: Evaluation | None = outcome.reference_evaluation
        summary = reference.summary if reference is not None else {}
        picked = {k: summary.get(k, math.nan) for k in reference_keys}
        if metric is not None:
            ctx.run.log_params({"gate_metric": metric})
        ctx.run.log_metrics(
            numeric(
                {
                    "candidate_mean": gate.candidate.mean,
                    f"{label}_mean": gate.reference_stats.mean,
                    **{f"{label}_{k}": v for k, v in picked.items()},
                    "version": outcome.version,
                }
            )
        )
        return {
            **outcome.outputs(),
            **({"metric": metric} if metric is not None else {}),
            "candidate_mean": gate.candidate.mean,
            "reference_mean": gate.reference_stats.mean,
            **{f"reference_{k}": _json_number(v) for k, v in picked.items()},
        }

    # the scores themselves, not their URI: a re-evaluation publishes under the same key
    return run_stage(
        cfg,
        stage,
        body,
        config=[
            cfg.game,
            *config,
            promotion.model_dump(mode="json"),
            checkpoint_uri,
            base_model,
            candidate_scores,
        ],
        inputs=inputs,
        parent_run_id=parent_run_id,
    )


def nightly_stage(
    cfg: RunConfig,
    recipe: Recipe,
    *,
    score: str,
    out_dir: Path | None = None,
    margin: float | None = None,
    series: Sequence[str] = (),
    log_fn: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The nightly run of any recipe: the champion of ``cfg.game`` (and a newer candidate)
    played by ``recipe.evaluate_model``; each model's summary number ``score`` (and the
    ``series`` numbers) becomes tonight's point of the ``nightly-<game>`` MLflow run, and the
    champion's is compared with the ``eval.<score>`` its version recorded at registration
    (:func:`register_stage`'s ``score_keys``). ``regressed`` says whether it fell by more than
    ``margin`` (None: ``promotion.nightly_margin``); the caller decides what a regression does
    (the flow fails and emits an event)."""
    promotion = _promotion(cfg)
    plan = nightly_plan(cfg, out_dir)
    margin = promotion.nightly_margin if margin is None else float(margin)

    def evaluate(uri: str, label: str, out: Path) -> tuple[float, dict[str, Any]]:
        evaluated = recipe.evaluate_model(cfg, uri, label, out)
        return float(evaluated.summary[score]), {
            "report_markdown": str(evaluated.report),
            "report_dir": evaluated.report.parent,
            "inference": evaluated.details.get("inference"),
            "metrics": {k: evaluated.summary.get(k, math.nan) for k in series},
        }

    rows = plan.evaluate(evaluate, score, log_fn)
    return plan.verdict(rows, f"metric.eval.{score}", margin, metric=score)


#: a recipe's nightly run: ``(cfg, out_dir=None, *, margin=None, log_fn=...) -> verdict``
NightlyEvaluate = Callable[..., dict[str, Any]]


def nightly_evaluator(
    recipe: str,
    score: Callable[[Any], str],
    *,
    series: Sequence[str] = (),
    log_fn: Callable[[str], None] = print,
) -> NightlyEvaluate:
    """A recipe's ``nightly_evaluate(cfg, out_dir=None, *, margin=None, log_fn=log_fn)``:
    :func:`nightly_stage` of the recipe named ``recipe`` (found in ``RECIPES`` when it runs)
    on the summary number ``score(cfg)`` of the pipeline config ``cfg``, with the ``series``
    numbers logged beside it."""
    default_log = log_fn

    def nightly_evaluate(
        cfg: RunConfig,
        out_dir: Path | None = None,
        *,
        margin: float | None = None,
        log_fn: Callable[[str], None] = default_log,
    ) -> dict[str, Any]:
        return nightly_stage(
            cfg,
            RECIPES.get(recipe),
            score=score(cfg),
            out_dir=out_dir,
            margin=margin,
            series=series,
            log_fn=log_fn,
        )

    return nightly_evaluate
