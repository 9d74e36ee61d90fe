"""A run's metrics log, ``<out>/metrics.jsonl``: one JSON object per line, written by every
trainer (RL and SFT) through :class:`MetricsLog`, read by the launcher and the stages.

Why it always resumes:

* a line is appended with one write, flushed and synced; a write that fails (a full disk) is
  cut back off the file and raised as a :class:`MetricsWriteError` that says what to do;
* a line left torn by a crash anyway (no newline at its end, or not JSON) is dropped with a
  warning when the log is next appended to or trimmed, never a ``JSONDecodeError``;
* the rewrite on resume (:meth:`MetricsLog.keep_through`) is atomic: readers and crashes see
  the old log or the new one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from odyssey_core.common.files import atomic_write
from odyssey_core.common.run_folder import RunWriteError, run_write_error

__all__ = ["METRICS_FILE", "MetricsLog", "MetricsWriteError", "parse_metrics_line"]

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class MetricsWriteError(RunWriteError):
    """A metrics line could not be written; the log holds every line before it, whole."""


def parse_metrics_line(line: str) -> dict[str, Any] | None:
    """The record on one line of a metrics log, or None for a line that is not a JSON object
    (torn by a crash while it was written)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _step_of(record: Mapping[str, Any]) -> float:
    step = record.get("step", 0)
    return float(step) if isinstance(step, int | float) else 0.0


class MetricsLog:
    """The metrics log of the run in ``out_dir``. Only one process (rank 0) writes it."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / METRICS_FILE
        self._checked_tail = False

    def append(self, record: Mapping[str, Any]) -> None:
        """Add ``record`` as one line, synced to disk before returning."""
        step = record.get("step")
        line = (json.dumps(dict(record), sort_keys=True) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self._checked_tail:
                self._drop_torn_tail()
                self._checked_tail = True
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise self._error(error, step) from error
        try:
            before = os.fstat(fd).st_size
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as error:
                with contextlib.suppress(OSError):  # best effort: resume drops it otherwise
                    os.ftruncate(fd, before)
                raise self._error(error, step) from error
        finally:
            os.close(fd)

    def records(self) -> list[dict[str, Any]]:
        """Every readable record, in order; unreadable lines are skipped with a warning."""
        return [record for _, record in self._read()]

    def keep_through(self, step: int) -> None:
        """Drop the records of steps after ``step`` (a resumed run logs them again) and any
        unreadable line; the log is replaced atomically, and only when something changes."""
        if not self.path.is_file():
            return
        original = self.path.read_text(errors="replace")
        kept = [line for line, record in self._parse(original) if _step_of(record) <= step]
        text = "".join(line + "\n" for line in kept)
        if text != original:
            try:
                atomic_write(self.path, text)
            except OSError as error:
                raise self._error(error, None, "the trimmed metrics log") from error
        self._checked_tail = True  # what is left ends with a whole line

    # -- internals ----------------------------------------------------------------------------

    def _read(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.path.is_file():
            return []
        return self._parse(self.path.read_text(errors="replace"))

    def _parse(self, text: str) -> list[tuple[str, dict[str, Any]]]:
        """(line, record) of every readable line of ``text``, warning about the others."""
        lines = text.split("\n")
        torn_tail = lines.pop()  # "" when the log ends with a newline, as it should
        out: list[tuple[str, dict[str, Any]]] = []
        bad: list[int] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            record = parse_metrics_line(line)
            if record is None:
                bad.append(number)
            else:
                out.append((line, record))
        if torn_tail:
            log.warning(
                "%s: its last line (%d bytes) was cut off by a crash or a full disk while it "
                "was written; it is dropped (that step is logged again when it is redone)",
                self.path,
                len(torn_tail.encode()),
            )
        if bad:
            log.warning(
                "%s: line(s) %s are not JSON records (torn by a crash); they are dropped",
                self.path,
                ", ".join(map(str, bad)),
            )
        return out

    def _drop_torn_tail(self) -> None:
        """Cut a partial last line (no newline) off the log before appending after it."""
        if not self.path.is_file():
            return
        with open(self.path, "rb+") as handle:
            data = handle.read()
            if not data or data.endswith(b"\n"):
                return
            keep = data.rfind(b"\n") + 1
            log.warning(
                "%s: its last line (%d bytes) was cut off by a crash or a full disk while it "
                "was written; it is dropped",
                self.path,
                len(data) - keep,
            )
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())

    def _error(self, error: OSError, step: Any, what: str | None = None) -> MetricsWriteError:
        if what is None:
            what = "a metrics line" if step is None else f"the metrics line of step {step}"
        what = f"{what} ({METRICS_FILE})"
        wrapped = run_write_error(
            error, self.out_dir, what, folder=self.out_dir, kind=MetricsWriteError
        )
        assert isinstance(wrapped, MetricsWriteError)
        return wrapped
