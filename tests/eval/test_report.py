"""The report files: Table 2 style rows, plots, videos and metrics from hand-made results."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from odyssey_core.eval.report import terminal_report, video_panel_lines, write_report
from odyssey_core.eval.runner import EpisodeRecord, EvalResults, SectionResult, TurnRecord
from odyssey_core.eval.suites import EvalSuite

TEXT = (
    "<perception>a pit ahead</perception><reasoning>I jump right over the pit to keep "
    "going</reasoning><answer>['a', 'right']</answer>"
)


def record(agent: str, level: str, run: int, progress: float, **kw) -> EpisodeRecord:
    r = EpisodeRecord("start", agent, f"odland-{level}", level, run, seed=run, start="start")
    r.progress, r.start_progress, r.max_progress, r.turns = progress, 16.0, 904, 5
    r.truncated = True
    for key, value in kw.items():
        setattr(r, key, value)
    return r


def make_results() -> EvalResults:
    suite = EvalSuite.model_validate(
        {
            "name": "hand",
            "base_agent": "random",
            "sections": [
                {"name": "start", "levels": ["1-1", "1-2"]},
                {"name": "other", "game": "mario", "split": "other_game", "levels": ["1-1"]},
            ],
        }
    )
    section = SectionResult(suite.sections[0], "odland", base_agent="random")
    frames = [np.full((144, 160, 3), k * 40, np.uint8) for k in range(3)]
    turns = [
        TurnRecord(
            k + 1,
            f"h{k}",
            ("a", "right"),
            20.0 + k,
            TEXT,
            "a pit ahead",
            "I jump right over the pit to keep going",
            "['a', 'right']",
            True,
        )
        for k in range(2)
    ]
    section.records = {
        "random": [
            record("random", "1-1", 0, 100),
            record("random", "1-1", 1, 200),
            record("random", "1-2", 0, 50),
            record("random", "1-2", 1, 0, error="boom"),
        ],
        "hf:model": [
            record("hf:model", "1-1", 0, 300, frames=frames, turn_log=turns),
            record("hf:model", "1-1", 1, 500),
            record("hf:model", "1-2", 0, 150),
            record("hf:model", "1-2", 1, 150),
        ],
    }
    skipped = SectionResult(suite.sections[1], "mario", skipped="skipped: no ROM")
    return EvalResults(suite, ["random", "hf:model"], [section, skipped])


def test_report_files_and_table_rows(tmp_path) -> None:
    results = make_results()
    files = write_report(results, tmp_path)
    md = files.markdown.read_text()
    # rows = agents, columns = levels + average; random on 1-2 has 1 finished episode (the
    # crashed one is an error): average (150 + 50) / 2 = 100, se sqrt(50^2 + 0^2) / 2 = 25
    assert "| Agent | odland-1-1 | odland-1-2 | Average | vs random |" in md
    assert "| random | 150.00 ± 50.00 | 50.00 ± 0.00 | 100.00 ± 25.00 | - |" in md
    # hf: 400 ± 100 and 150 ± 0 -> average 275 ± 50, +175% over random
    assert "| hf:model | 400.00 ± 100.00 | 150.00 ± 0.00 | 275.00 ± 50.00 | +175.0% |" in md
    assert "| Maximum | 904 | 904 | 904.0 |" in md
    assert "| random | 4 | 1 | 0 | 0 | 3 |" in md  # outcomes: the crash is counted apart
    assert "skipped: no ROM" in md
    html_text = files.html.read_text()
    assert "<td>hf:model</td>" in html_text and "start.png" in html_text
    assert files.plots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(files.videos) == 1 and files.videos[0].stat().st_size > 0
    assert files.metrics["eval/start/hf:model/average/mean"] == 275.0
    assert files.metrics["eval/start/random/odland-1-2/errors"] == 1.0
    assert files.metrics["collapse/start/hf:model/valid_rate"] == 1.0
    saved = json.loads(files.metrics_path.read_text())
    assert saved["eval/start/hf:model/average/rel_improvement"] == 1.75
    lines = files.episodes.read_text().splitlines()
    assert len(lines) == 8 and json.loads(lines[0])["success"] is False
    assert "Average" in terminal_report(results)


def test_video_panel_wraps_the_models_words() -> None:
    r = make_results().sections[0].records["hf:model"][0]
    lines = video_panel_lines(r, 0, width=30)
    assert any(line.startswith("reasoning: I jump right") for line in lines)
    assert all(len(line) <= 30 for line in lines[3:])
    assert video_panel_lines(r, 2)[-1].startswith("end: turn limit")


def test_eval_command_runs_a_suite(odland_rom, tmp_path, monkeypatch) -> None:
    from odyssey_core.eval.cli import eval_command

    monkeypatch.delenv("ODYSSEY_SML_ROM", raising=False)
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: s\nruns: 1\nmax_turns: 2\nworkers: 1\nvideos: 0\n"
        "sections:\n  - {name: start, levels: ['1-1']}\n"
    )
    out = tmp_path / "out"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = CliRunner().invoke(
        eval_command,
        [str(suite), "--agent", "random", "--out", str(out), "--no-videos", "--tracking-uri", uri],
    )
    assert result.exit_code == 0, result.output
    assert "random" in result.output and (out / "report.md").is_file()
    from mlflow.tracking import MlflowClient  # the report and metrics went to an MLflow run

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("odyssey-eval").experiment_id])
    assert run.data.metrics and run.info.run_name == "eval-s"
    logged = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/report.md", "report/report.html"} <= logged


def test_training_curves_from_a_real_mlflow_run(tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("curves", artifact_location=str(tmp_path / "art"))
    run = client.create_run(experiment)
    for step, progress in enumerate([16.0, 40.0, 95.0], start=1):
        client.log_metric(run.info.run_id, "all/progress_mean", progress, step=step)
    files = write_report(make_results(), tmp_path / "report", training_run=(uri, run.info.run_id))
    curves = tmp_path / "report" / "training_curves.png"
    assert curves in files.plots and curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![training curves](training_curves.png)" in files.markdown.read_text()
    empty = client.create_run(experiment)
    files = write_report(make_results(), tmp_path / "r2", training_run=(uri, empty.info.run_id))
    assert "logged none of" in files.markdown.read_text()
