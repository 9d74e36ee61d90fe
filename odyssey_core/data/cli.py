"""The curation pipeline (record or import -> sample -> annotate -> validate -> build) and its
``odyssey curate`` commands.

Every stage reads the previous stage's files under ``--out`` and writes its own folder, so a
stage can be rerun alone (``annotate`` again after a crash pays only for uncached frames)::

    OUT/walkthroughs/   videos, sidecars, states, walkthrough records
    OUT/samples/        frames/<hash>.png, samples.parquet (and reserve.parquet, the frames a
                        top-up to sampling.target_train_rows may draw on)
    OUT/annotations/    annotations.parquet, teacher_metrics.json, cache/ (API teachers),
                        top_up.json (with sampling.target_train_rows)
    OUT/validation/     validated.parquet, validation.json/html, quarantine.parquet
    OUT/dataset/        the SFT dataset folder (see odyssey_core.data.dataset)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import click
import yaml
from pydantic import Field

from odyssey_core.config import GameName, StrictModel, load_preset
from odyssey_core.data.dataset import read_json, read_table, write_dataset, write_table
from odyssey_core.data.sampling import SamplingConfig, load_reserve, load_samples, sample_frames
from odyssey_core.data.teachers import (
    TeacherConfig,
    annotate_frames,
    make_teacher,
    probe_teacher,
)
from odyssey_core.data.top_up import TOP_UP_FILE, annotate_to_target, check_reachable
from odyssey_core.data.validation import ValidationConfig, validate_annotations
from odyssey_core.data.walkthroughs import (
    ImportConfig,
    RecordConfig,
    import_video,
    load_walkthroughs,
    record_walkthroughs,
)

__all__ = [
    "CurateConfig",
    "curate",
    "curate_group",
    "curate_problems",
    "import_entries",
    "load_curate_config",
    "more_frames_advice",
    "run_annotate",
    "run_build",
    "run_record",
    "run_sample",
    "run_validate",
]

STAGES = ("walkthroughs", "samples", "annotations", "validation", "dataset")


class CurateConfig(StrictModel):
    """The whole curation run (``configs/curate/*.yaml``)."""

    name: str = "curate"
    game: GameName = "odland"
    source: Literal["record", "import"] = "record"
    record: RecordConfig = RecordConfig()
    imports: list[ImportConfig] = Field(default_factory=list, description="for source: import")
    imports_file: Path | None = Field(
        default=None,
        description="for source: import, a YAML list of more imports (video, segments, ...); "
        "relative video paths are relative to the file, the game is the config's",
    )
    sampling: SamplingConfig = SamplingConfig()
    teacher: TeacherConfig = TeacherConfig()
    validation: ValidationConfig = ValidationConfig()
    val_share: float = Field(default=0.1, ge=0, lt=1)
    show_progress: bool = True


def load_curate_config(
    preset: str | Path = "tiny", overrides: dict[str, Any] | None = None
) -> CurateConfig:
    """A preset name under ``configs/curate/`` or a YAML path, plus nested overrides."""
    return load_preset(CurateConfig, preset, overrides, kind="curate", what="curation")


def _dir(out: str | Path, stage: str) -> Path:
    path = Path(out) / stage
    path.mkdir(parents=True, exist_ok=True)
    return path


def import_entries(config: CurateConfig) -> list[ImportConfig]:
    """The videos of a ``source: import`` config: ``imports`` then ``imports_file``'s, each
    of the config's game (an entry naming another game is an error)."""
    entries = list(config.imports)
    if config.imports_file is not None:
        path = Path(config.imports_file)
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
        if not isinstance(data, list):
            raise ValueError(f"imports_file {path}: expected a YAML list of imports")
        for raw in data:
            item = ImportConfig.model_validate(raw)
            if not item.video.is_absolute():
                item = item.model_copy(update={"video": path.parent / item.video})
            entries.append(item)
    out = []
    for item in entries:
        if "game" in item.model_fields_set and item.game != config.game:
            raise ValueError(f"import {item.video} is {item.game}, the curation is {config.game}")
        out.append(item.model_copy(update={"game": config.game}))
    return out


def curate_problems(config: CurateConfig, environ: dict[str, str] | None = None) -> list[str]:
    """What keeps this curation from running here, one line each (empty when it can): the
    teacher's environment variables, and for ``source: import`` the videos."""
    from odyssey_core.data.teachers import teacher_problems

    problems = [f"curate: {p}" for p in teacher_problems(config.teacher, environ)]
    if config.source == "import":
        if not config.imports and config.imports_file is None:
            problems.append("curate: source: import needs imports or imports_file (your videos)")
        elif config.imports_file is not None and not Path(config.imports_file).is_file():
            problems.append(f"curate: imports_file {config.imports_file} does not exist")
        else:
            try:
                entries = import_entries(config)
            except ValueError as err:
                problems.append(f"curate: {err}")
                entries = []
            problems += [
                f"curate: video not found: {e.video}" for e in entries if not e.video.is_file()
            ]
    return problems


def run_record(config: CurateConfig, out: str | Path) -> Path:
    """Probe the teacher (one request, for an API teacher), then record (or import) the
    walkthroughs into OUT/walkthroughs: settings the teacher's model refuses fail here, before
    any recording, naming the setting to change."""
    probe_teacher(config.teacher, config.game)
    target = _dir(out, "walkthroughs")
    if config.source == "record":
        record = config.record.model_copy(update={"game": config.game})
        record_walkthroughs(record, target, show_progress=config.show_progress)
    else:
        entries = import_entries(config)
        if not entries:
            raise ValueError("source: import needs at least one entry under imports")
        for item in entries:
            import_video(item, target)
    return target


def run_sample(config: CurateConfig, out: str | Path) -> Path:
    walkthroughs = load_walkthroughs(Path(out) / "walkthroughs")
    if not walkthroughs:
        raise FileNotFoundError(f"no walkthroughs under {Path(out) / 'walkthroughs'}; run record")
    sampling = config.sampling.model_copy(update={"show_progress": config.show_progress})
    target = _dir(out, "samples")
    first_draw = sample_frames(walkthroughs, target, sampling)
    if sampling.target_train_rows is not None:
        check_reachable(
            [*first_draw, *load_reserve(target)],
            target=sampling.target_train_rows,
            val_share=config.val_share,
            short_of_target=sampling.short_of_target,
            more_frames=more_frames_advice(config),
        )
    return target


def more_frames_advice(config: CurateConfig) -> str:
    """What to change for more distinct frames (a top-up that ran out says it)."""
    if config.source == "import":
        return "import more walkthrough videos (imports or imports_file)"
    record = config.record
    return (
        f"record more walkthroughs: raise record.episodes_per_level (now "
        f"{record.episodes_per_level}) with record.explore_prob > 0 (now {record.explore_prob}) "
        f"so the new episodes differ, or add record.levels"
    )


def run_annotate(config: CurateConfig, out: str | Path) -> Path:
    """Annotate the first draw; with ``sampling.target_train_rows``, top it up from the
    reserve until the training rows reach the target (:func:`annotate_to_target`)."""
    samples_dir = Path(out) / "samples"
    frames = load_samples(samples_dir)
    target = _dir(out, "annotations")
    teacher = make_teacher(config.teacher, game=config.game)
    wanted = config.sampling.target_train_rows
    if wanted is None:
        (target / TOP_UP_FILE).unlink(missing_ok=True)  # a top-up of an earlier config
        annotate_frames(teacher, frames, samples_dir, target)
        return target
    annotate_to_target(
        teacher,
        frames,
        load_reserve(samples_dir),
        samples_dir,
        target,
        target=wanted,
        val_share=config.val_share,
        validation=config.validation,
        game=config.game,
        short_of_target=config.sampling.short_of_target,
        more_frames=more_frames_advice(config),
    )
    return target


def run_validate(config: CurateConfig, out: str | Path) -> Path:
    rows = read_table(Path(out) / "annotations" / "annotations.parquet")
    target = _dir(out, "validation")
    outcome = validate_annotations(
        rows, Path(out) / "samples", target, config.validation, game=config.game
    )
    write_table(target / "validated.parquet", outcome.passed)
    return target


def run_build(config: CurateConfig, out: str | Path) -> Path:
    validation = Path(out) / "validation"
    rows = read_table(validation / "validated.parquet")
    quarantine_path = validation / "quarantine.parquet"
    quarantine = read_table(quarantine_path) if quarantine_path.is_file() else []
    metrics_path = Path(out) / "annotations" / "teacher_metrics.json"
    extra = {"teacher_metrics": read_json(metrics_path)} if metrics_path.is_file() else {}
    top_up_path = Path(out) / "annotations" / TOP_UP_FILE
    if config.sampling.target_train_rows is not None and top_up_path.is_file():
        extra["top_up"] = read_json(top_up_path)
    return write_dataset(
        Path(out) / "dataset",
        rows,
        Path(out) / "samples",
        val_share=config.val_share,
        config=config.model_dump(mode="json"),
        quarantine=quarantine,
        validation_files=[validation / "validation.json", validation / "validation.html"],
        extra_manifest=extra,
    )


def curate(config: CurateConfig, out: str | Path) -> Path:
    """Run every stage; returns the dataset folder. Settings this machine lacks (the teacher's
    environment variables, imported videos) fail first, all named in one error."""
    problems = curate_problems(config)
    if problems:
        raise ValueError("curation cannot start:\n" + "\n".join(f"  - {p}" for p in problems))
    run_record(config, out)
    run_sample(config, out)
    run_annotate(config, out)
    run_validate(config, out)
    return run_build(config, out)


# ------------------------------------------------------------------------------------- CLI
_config_option = click.option(
    "--config",
    "config_path",
    default="tiny",
    show_default=True,
    help="a preset under configs/curate/ or a YAML file",
)
_out_option = click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="work folder"
)


@click.group("curate", context_settings={"help_option_names": ["-h", "--help"]})
def curate_group() -> None:
    """Build the light-SFT dataset from walkthrough videos."""


def _stage(name: str, function: Any, help_text: str) -> None:
    @curate_group.command(name, help=help_text)
    @_config_option
    @_out_option
    def command(config_path: str, out: Path) -> None:
        try:
            result = function(load_curate_config(config_path), out)
        except (FileNotFoundError, ValueError, RuntimeError) as error:
            raise click.ClickException(str(error)) from error
        click.echo(str(result))


_stage("record", run_record, "Record (or import) walkthrough videos into OUT/walkthroughs.")
_stage("sample", run_sample, "Sample and dedupe frames into OUT/samples.")
_stage("annotate", run_annotate, "Annotate the sampled frames with the teacher.")
_stage("validate", run_validate, "Validate annotations; quarantine failing rows.")
_stage("build", run_build, "Write the dataset folder OUT/dataset.")
_stage("run", curate, "Run every stage; prints the dataset folder.")
