"""URL userinfo and secret query values never reach what is recorded; errors become one line."""

from __future__ import annotations

import pytest

from odyssey_core.common.redaction import redact_paths, redact_uri, summarise_error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:pass@mlflow:5000", "http://***@mlflow:5000"),
        ("https://token@example.com/api/v1", "https://***@example.com/api/v1"),
        ("postgresql://u:p@ss@db:5432/mlflow", "postgresql://***@db:5432/mlflow"),  # raw '@'
        ("https://h/x?token=abc&page=2", "https://h/x?token=***&page=2"),
        (
            "https://h/o?X-Amz-Signature=f00&X-Amz-Credential=AK",
            "https://h/o?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
        (
            "tracking at http://a:b@h:5000 and http://c:d@k/",
            "tracking at http://***@h:5000 and http://***@k/",
        ),
    ],
)
def test_redact_uri_hides_userinfo_and_secret_query_values(text: str, expected: str) -> None:
    assert redact_uri(text) == expected
    assert redact_uri(expected) == expected  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:////work/out/mlflow.db",
        "s3://bucket/runs/key@v1",  # an '@' in the path is not userinfo
        "file:///tmp/artifacts",
        "http://mlflow:5000/#/experiments",
        "lr=0.001",
        "user@example.com wrote this",
    ],
)
def test_redact_uri_keeps_what_has_no_secret(text: str) -> None:
    assert redact_uri(text) == text


def test_redact_paths_keeps_the_last_part_only() -> None:
    text = "no safetensors at /home/me/models/x/model.safetensors (see http://h/a/b, ./rel/y)"
    assert redact_paths(text) == (
        "no safetensors at .../model.safetensors (see http://h/a/b, ./rel/y)"
    )
    assert redact_paths("1/2 of a / b") == "1/2 of a / b"


def test_summarise_error_is_type_and_first_line() -> None:
    err = RuntimeError("loss diverged at step 3\nTraceback (most recent call last):\n  x\n  y")
    assert summarise_error(err) == "RuntimeError: loss diverged at step 3 (+3 more lines)"
    assert summarise_error(KeyError()) == "KeyError"
    # a first line that introduces a list keeps the list
    listed = ValueError("pipeline 'x' cannot start on this machine:\n  - no ROM\n  - no model")
    assert summarise_error(listed) == (
        "ValueError: pipeline 'x' cannot start on this machine: - no ROM; - no model"
    )


def test_summarise_error_redacts_and_bounds() -> None:
    err = ConnectionError("cannot reach http://admin:hunter2@mlflow:5000/api " + "x" * 500)
    text = summarise_error(err, limit=120)
    assert len(text) <= 120 and text.endswith("... [cut]")
    assert "hunter2" not in text and "http://***@mlflow:5000/api" in text
    hidden = summarise_error(FileNotFoundError("no file /srv/secret/w.bin"), hide_paths=True)
    assert hidden == "FileNotFoundError: no file .../w.bin"
    with pytest.raises(ValueError, match="at least 20"):
        summarise_error(err, limit=5)
