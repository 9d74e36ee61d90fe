"""``odyssey eval SUITE --agent ...``: run an evaluation suite and write its report.

Policy agents answer with the inference settings of their training (App. E.3): those of
``--train-preset`` when given, else those saved with the model's RL checkpoint (the
``config.json`` beside its ``policy/`` folder), else those of the suite's ``inference_from``
preset; ``--temperature`` / ``--max-new-tokens`` override one value, and say so.
"""

from __future__ import annotations

from pathlib import Path

import click

from odyssey_core.common.redaction import redact_uri


@click.command("eval")
@click.argument("suite")
@click.option(
    "--agent",
    "agents",
    multiple=True,
    required=True,
    help="expert | random | hf:PATH | openai:MODEL@BASE_URL, optionally LABEL=SPEC "
    "(base=hf:PATH is the base-model row); repeat for several rows",
)
@click.option("--base", "base_agent", default=None, help="row label to measure improvement against")
@click.option("--runs", type=int, default=None, help="from-start episodes per level")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/eval"),
    show_default=True,
)
@click.option("--seed", type=int, default=None, help="suite seed (default: the suite's)")
@click.option("--max-turns", type=int, default=None, help="turn limit (default: the suite's)")
@click.option("--workers", type=int, default=None, help="subprocess envs (default: the suite's)")
@click.option(
    "--train-preset",
    default=None,
    help="Odysseus RL preset (name under configs/odysseus or YAML) whose inference settings "
    "policy agents use (default: the checkpoint's own, else the suite's inference_from)",
)
@click.option("--temperature", type=float, default=None, help="override the training value")
@click.option("--max-new-tokens", type=int, default=None, help="override the training value")
@click.option("--expert-nodes", type=int, default=4000, show_default=True)
@click.option("--section", "sections", multiple=True, help="only these sections")
@click.option("--no-videos", is_flag=True, help="skip the episode videos")
@click.option(
    "--training-run",
    default=None,
    help="TRACKING_URI#RUN_ID of the MLflow run that trained the model: adds its curves",
)
@click.option(
    "--tracking-uri",
    default=None,
    help="log the metrics and the whole report to a new MLflow run there (experiment "
    "'odyssey-eval')",
)
def eval_command(
    suite: str,
    agents: tuple[str, ...],
    base_agent: str | None,
    runs: int | None,
    out_dir: Path,
    seed: int | None,
    max_turns: int | None,
    workers: int | None,
    train_preset: str | None,
    temperature: float | None,
    max_new_tokens: int | None,
    expert_nodes: int,
    sections: tuple[str, ...],
    no_videos: bool,
    training_run: str | None,
    tracking_uri: str | None,
) -> None:
    """Evaluate agents on SUITE (a name under configs/eval, e.g. odland, or a YAML path)."""
    from odyssey_core.eval.agents import build_policy_agent, parse_agent_spec
    from odyssey_core.eval.inference import (
        InferenceSettings,
        checkpoint_inference,
        load_inference,
    )
    from odyssey_core.eval.report import terminal_report, write_report
    from odyssey_core.eval.runner import evaluate_suite
    from odyssey_core.eval.suites import load_suite

    overrides: dict = {}
    for key, value in (("seed", seed), ("max_turns", max_turns), ("workers", workers)):
        if value is not None:
            overrides[key] = value
    if base_agent is not None:
        overrides["base_agent"] = base_agent
    if no_videos:
        overrides["videos"] = 0
    try:
        config = load_suite(suite, overrides)
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    if sections:
        unknown = set(sections) - {s.name for s in config.sections}
        if unknown:
            raise click.ClickException(f"unknown sections {sorted(unknown)}")
        config = config.model_copy(
            update={"sections": [s for s in config.sections if s.name in sections]}
        )
    try:
        preset = train_preset or config.inference_from
        fallback = load_inference(preset) if preset else InferenceSettings()
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    changes = {
        k: v
        for k, v in (("temperature", temperature), ("max_new_tokens", max_new_tokens))
        if v is not None
    }
    built = []
    for text in agents:
        try:
            spec = parse_agent_spec(text)
            if spec.kind == "env" and spec.name == "expert":
                spec = parse_agent_spec(text, max_nodes=expert_nodes)
        except ValueError as err:
            raise click.ClickException(str(err)) from None
        if spec.kind != "policy":
            built.append(spec)
            continue
        inference = fallback
        if train_preset is None and spec.name == "hf":
            inference = checkpoint_inference(spec.kwargs["model"]) or fallback
        if changes:
            inference = inference.model_copy(
                update={**changes, "source": f"{inference.source}, overridden: {changes}"}
            )
        click.echo(f"{spec.label}: inference settings of {inference.source}")
        built.append(build_policy_agent(spec, config.game, inference=inference))
    results = evaluate_suite(
        config,
        built,
        runs=runs,
        states_cache=out_dir / "states",
        show_progress=True,
        log=click.echo,
    )
    run_ref = None
    if training_run:
        uri, sep, run_id = training_run.rpartition("#")
        if not sep or not uri or not run_id:
            raise click.BadParameter("expected TRACKING_URI#RUN_ID", param_hint="--training-run")
        run_ref = (uri, run_id)
    files = write_report(results, out_dir, videos=not no_videos, training_run=run_ref)
    click.echo(terminal_report(results))
    click.echo(f"report: {files.markdown} and {files.html} ({len(files.metrics)} metrics)")
    if tracking_uri is not None:
        from odyssey_core.registry.tracking import Tracker

        tracker = Tracker(tracking_uri, experiment="odyssey-eval")
        with tracker.run(f"eval-{results.suite.name}", tags={"odyssey.suite": suite}) as run:
            run.log_metrics(files.metrics)
            run.log_artifact(out_dir, "report")
        click.echo(f"logged to MLflow run {run.run_id} at {redact_uri(tracking_uri)}")
