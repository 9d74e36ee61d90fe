"""What rank 0 of an SFT run leaves behind is read back even after a crash tore the last line
of its metrics log."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from odyssey_core.common.metrics_log import METRICS_FILE
from odyssey_core.sft.trainer import read_sft_result


def test_a_torn_metrics_line_does_not_hide_a_finished_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    records = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 2, "eval_loss": 1.7}]
    torn = '{"step": 3, "loss": 1.'
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records) + torn)
    with caplog.at_level(logging.WARNING, logger="odyssey_core.common.metrics_log"):
        result = read_sft_result(tmp_path)
    assert (result.steps, result.train_loss, result.eval_loss) == (2, 1.5, 1.7)
    assert any("cut off" in record.getMessage() for record in caplog.records)
