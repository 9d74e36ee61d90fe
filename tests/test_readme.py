"""Every command README.md shows in a fenced shell block works as written from the repository
root of a fresh machine (after ``make``): each executable exists at the path shown, every
`odyssey` command and option is one its ``--help`` lists, presets, config files and
deployments named exist, JSON arguments parse, Python snippets compile; the cheap commands
run for real, and the registry block (load the champion, ``mlflow models serve``, a request
to it) runs verbatim against a registered model in a slow test."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import model_fixtures
import pytest
import yaml

pytest_plugins = ["tests.s3_fixtures"]  # the migrated MLflow template database

tiny_model_dir = model_fixtures.tiny_model_dir

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# What a fresh shell has: no virtual environment activated.
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Tools README runs that are not in the venv: Debian's (the Makefile installs what is missing).
SYSTEM_TOOLS = {"make", "curl", "bash", "docker", "base64"}
# Executables of optional extras a CPU machine does not install, and the extra that brings each.
EXTRA_TOOLS = {"vllm": "vllm"}


def _load_presets(key: tuple[str, ...], flags: dict[str, str]) -> None:
    """Load the presets a command names with its own loader (a missing one raises)."""
    preset = flags.get("--preset") or flags.get("--config")
    if key == ("odyssey", "play"):
        from odyssey_core.config import load_config

        load_config(preset or "tiny")
    elif key == ("odyssey", "curate", "run"):
        from odyssey_core.data.cli import load_curate_config

        load_curate_config(preset or "tiny")
    elif key == ("odyssey", "sft"):
        from odyssey_core.sft.settings import load_sft_settings

        load_sft_settings(preset or "tiny")
    elif key == ("odyssey", "train"):
        from odyssey_core.recipes.odysseus.settings import load_train_settings

        load_train_settings(preset or "tiny")
    elif key == ("flows.odysseus",):
        from odyssey_core.recipes.odysseus.pipeline import load_pipeline_config

        load_pipeline_config(preset or "tiny")
    elif key == ("flows.espo",):
        from odyssey_core.recipes.espo.pipeline import load_espo_pipeline_config

        load_espo_pipeline_config(preset or "tiny", variant=flags.get("--variant"))
    else:
        assert not preset and "--variant" not in flags, f"{key}: add its preset loader"


# Repository paths a command names; they ship with a clone.
REPO_PREFIXES = ("configs/", "infra/", "bench/", "roms/", "docs/", "flows/", "tasks/")


@dataclass
class Command:
    line: int  # README line where it starts
    text: str  # as written (continuations joined)
    env: dict[str, str] = field(default_factory=dict)  # VAR=value prefixes
    argv: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text}"


def _fenced_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, lines) of every ```bash / ```sh / ```shell block, indented or not."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(bash|sh|shell)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        indent, start, body = len(fence[1]), i + 2, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        yield start, body
        i += 1


def readme_commands(text: str | None = None) -> list[Command]:
    """The commands of README's shell blocks: ``\\`` continuations and quotes spanning lines
    joined, comments dropped, ``VAR=value`` prefixes split off; ``export`` lines are left
    out (they set what follows)."""
    text = README.read_text() if text is None else text
    commands = []
    for start, body in _fenced_blocks(text):
        buffer, first = "", start
        for offset, line in enumerate(body):
            if not buffer:
                first = start + offset
            buffer += line + "\n"
            if line.endswith("\\"):
                continue
            try:
                words = shlex.split(buffer.replace("\\\n", " "), comments=True)
            except ValueError:  # a quote still open: the command goes on
                continue
            written, buffer = buffer.strip(), ""
            if words and words[-1] == "&":
                words = words[:-1]
            if not words or words[0] == "export":
                continue
            env = {}
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                key, value = words.pop(0).split("=", 1)
                env[key] = value
            commands.append(Command(first, written, env, words))
        assert not buffer, f"README.md:{first}: an unfinished command in a shell block"
    return commands


COMMANDS = readme_commands()


def _venv_bin() -> Path:
    """The repository's .venv/bin (what README's paths name); the running interpreter's when
    the tests run from another environment."""
    venv = ROOT / ".venv" / "bin"
    return venv if venv.is_dir() else Path(sys.executable).parent


def _make_targets() -> tuple[set[str], set[str]]:
    text = (ROOT / "Makefile").read_text()
    targets = set()
    for match in re.finditer(r"^([A-Za-z][\w.-]*(?: [A-Za-z][\w.-]*)*):(?!=)", text, re.M):
        targets.update(match[1].split())
    variables = set(re.findall(r"^([A-Z_]+) *[?:]?=", text, re.M))
    return targets, variables


def _flow_names() -> set[str]:
    """``flow-name/deployment`` of every deployment in prefect.yaml."""
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    names = set()
    for deployment in deployments:
        path, function = deployment["entrypoint"].split(":")
        tree = ast.parse((ROOT / path).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == function:
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call):
                        for keyword in decorator.keywords:
                            if keyword.arg == "name":
                                names.add(f"{keyword.value.value}/{deployment['name']}")
    return names


def _odyssey_command(args: list[str]) -> tuple[list[str], Any, list[str]]:
    """The click command an ``odyssey`` argv names: (its subcommand path, the command, the
    remaining arguments)."""
    import click

    from odyssey_core.cli import main

    command: Any = main
    path: list[str] = []
    rest = list(args)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(click.Context(command), rest[0])
        assert sub is not None, f"odyssey {' '.join(path)}: no subcommand {rest[0]!r}"
        path.append(rest.pop(0))
        command = sub
    return path, command, rest


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}


def _check_presets(key: tuple[str, ...], args: list[str], where: Command) -> None:
    flags = {w: args[i + 1] for i, w in enumerate(args[:-1]) if w.startswith("--")}
    try:
        _load_presets(key, flags)
    except (FileNotFoundError, ValueError) as err:
        raise AssertionError(f"{where}: {err}") from None


def _check_odyssey(args: list[str], where: Command) -> None:
    from click.testing import CliRunner

    from odyssey_core.cli import main

    path, command, rest = _odyssey_command(args)
    assert path, f"{where}: no odyssey subcommand"
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, f"{where}: odyssey {' '.join(path)} --help: {result.output}"
    known = _options(command)
    for word in rest:
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            assert flag in known, f"{where}: odyssey {' '.join(path)} has no option {flag}"
            assert flag in result.output, f"{where}: {flag} is not in --help"
    _check_presets(("odyssey", *path), rest, where)


def _check_python(args: list[str], where: Command) -> None:
    if args[0] == "-c":
        compile(args[1], str(where), "exec")
        return
    assert args[0] == "-m", f"{where}: python is run with -m or -c"
    module = args[1]
    assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
    rest = args[2:]
    if module.startswith("flows."):
        source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        for word in rest:
            if word.startswith("--"):
                assert f'"{word}"' in source, f"{where}: {module} takes no {word}"
        _check_presets((module,), rest, where)


def _check_prefect(args: list[str], where: Command, deployments: set[str]) -> None:
    words = [w for w in args if w != "--no-prompt"]
    if words[:2] == ["deployment", "run"]:
        assert words[2] in deployments, f"{where}: no deployment {words[2]} in prefect.yaml"
        for i, word in enumerate(words):
            if word == "--params":
                json.loads(words[i + 1])
            if word == "-p":
                json.loads(words[i + 1].split("=", 1)[1])


def _check(command: Command, deployments: set[str]) -> None:
    exe, args = command.argv[0], command.argv[1:]
    for word in args:
        if word.startswith(REPO_PREFIXES):
            assert (ROOT / word).exists(), f"{command}: no {word} in the repository"
    if exe in SYSTEM_TOOLS:
        assert shutil.which(exe, path=FRESH_PATH), f"{command}: {exe} is not installed"
        if exe == "make":
            targets, variables = _make_targets()
            for word in args:
                if "=" in word:
                    assert word.split("=")[0] in variables, f"{command}: no make variable {word}"
                else:
                    assert word in targets, f"{command}: no make target {word}"
        if exe == "bash":
            assert (ROOT / args[0]).is_file(), f"{command}: no script {args[0]}"
        return
    assert exe.startswith(".venv/bin/"), f"{command}: {exe} is not on a fresh machine's PATH"
    name = exe.removeprefix(".venv/bin/")
    if name in EXTRA_TOOLS and not (_venv_bin() / name).exists():
        extras = _pyproject()["project"]["optional-dependencies"]
        assert EXTRA_TOOLS[name] in extras, f"{command}: no extra installs {name}"
        return
    assert (_venv_bin() / name).is_file(), f"{command}: no {exe}"
    if name == "odyssey":
        _check_odyssey(args, command)
    elif name == "python":
        _check_python(args, command)
    elif name == "torchrun":
        module = args.index("-m")
        assert args[module + 1] == "odyssey_core.cli", command
        _check_odyssey(args[module + 2 :], command)
    elif name == "prefect":
        _check_prefect(args, command, deployments)
    elif name == "mlflow":
        _check_mlflow(args, command)


def _check_mlflow(args: list[str], where: Command) -> None:
    import click
    from click.testing import CliRunner
    from mlflow.cli import cli

    command: Any = cli
    path = []
    for word in args:
        if not isinstance(command, click.Group) or word.startswith("-"):
            break
        command = command.get_command(click.Context(command), word)
        assert command is not None, f"{where}: mlflow has no command {word!r}"
        path.append(word)
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, f"{where}: mlflow {' '.join(path)} --help: {result.output}"
    for word in args[len(path) :]:
        if word.startswith("-"):
            assert word in _options(command), f"{where}: mlflow {' '.join(path)} has no {word}"


def _pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_readme_commands_are_found() -> None:
    # the parser sees every block: the quick start, the registry block, multi-line commands
    texts = [c.text for c in COMMANDS]
    assert len(COMMANDS) > 40
    assert any(c.argv[:2] == ["make", "demo"] for c in COMMANDS)
    assert any("models serve" in t for t in texts)
    joined = next(c for c in COMMANDS if c.argv[:1] == [".venv/bin/torchrun"])
    assert "--preset" in joined.argv and "--resume" in joined.argv


def test_the_parser_joins_lines_and_splits_prefixes() -> None:
    text = "\n".join(
        [
            "```bash",
            "A=1 B='x y' .venv/bin/odyssey play odland-1-1 \\",
            "  --agent expert   # a comment",
            "export X=1",
            '.venv/bin/prefect deployment run f/d --params \'{"a":',
            "  1}' &",
            "```",
        ]
    )
    first, second = readme_commands(text)
    assert first.env == {"A": "1", "B": "x y"} and first.line == 2
    assert first.argv == [".venv/bin/odyssey", "play", "odland-1-1", "--agent", "expert"]
    assert second.argv[-1] == '{"a":\n  1}' and second.line == 5


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"line{c.line}")
def test_readme_command_resolves(command: Command) -> None:
    _check(command, _flow_names())


def test_a_wrong_flag_or_preset_is_caught() -> None:
    """The checks can fail: a flag odyssey does not have, a preset that does not exist, an
    executable a fresh shell has not got."""
    deployments = _flow_names()
    bad = [
        ".venv/bin/odyssey play odland-1-1 --agent expert --speed 3",
        ".venv/bin/odyssey sft --preset nonexistent --dataset d --model m --out o",
        "mlflow models serve -m x",
        ".venv/bin/prefect deployment run train-odysseus/nowhere",
        "make nothing-like-this",
    ]
    for text in bad:
        (command,) = readme_commands(f"```bash\n{text}\n```")
        with pytest.raises(AssertionError):
            _check(command, deployments)


# -- the cheap ones, for real ----------------------------------------------------------------------


@pytest.fixture
def fresh_checkout(tmp_path: Path) -> Path:
    """A folder standing in for the repository root: README's relative paths (.venv/bin/...,
    out/...) resolve there, and nothing is written into the real checkout."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".venv").symlink_to(_venv_bin().parent, target_is_directory=True)
    return root


def _fresh_env(**extra: str) -> dict[str, str]:
    keep = ("HOME", "LANG", "TMPDIR", "PREFECT_HOME")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return {**env, "PATH": FRESH_PATH, "OMP_NUM_THREADS": "1", **extra}


def _run(command: Command, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command.text],
        cwd=cwd,
        env=_fresh_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _command(*prefix: str) -> Command:
    found = [c for c in COMMANDS if c.argv[: len(prefix)] == list(prefix)]
    assert found, f"README shows no {' '.join(prefix)} command"
    return found[0]


@pytest.mark.slow  # three short CLI processes, a few seconds each
def test_cheap_commands_run_as_written(fresh_checkout: Path) -> None:
    tiny = _command(".venv/bin/odyssey", "model", "init-tiny")
    done = _run(tiny, fresh_checkout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (fresh_checkout / tiny.argv[-1] / "config.json").is_file()

    random_play = _command(".venv/bin/odyssey", "play", "odland-2-1")
    done = _run(random_play, fresh_checkout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (fresh_checkout / random_play.argv[random_play.argv.index("--video") + 1]).is_file()

    generate = _command(".venv/bin/odyssey", "espo", "generate")
    done = _run(generate, fresh_checkout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (fresh_checkout / generate.argv[-1] / "episodes.jsonl").is_file()


# -- the registry block, verbatim --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _registry_block() -> list[Command]:
    serve = next(c for c in COMMANDS if "models serve" in c.text)
    block = [c for c in COMMANDS if abs(c.line - serve.line) <= 6]
    return sorted(block, key=lambda c: c.line)


def _register_champion(checkout: Path, tracking_uri: str, model_dir: Path) -> None:
    """The tiny model as champion of odysseus-odland in the MLflow database at
    ``tracking_uri``, as the demo leaves it."""
    from odyssey_core.stages import (
        RunConfig,
        StageContext,
        parent_run,
        register_and_gate,
        run_stage,
    )

    run_dir = checkout / "out" / "pipeline" / "odland-demo"
    cfg = RunConfig(name="readme", run_dir=run_dir, tracking_uri=tracking_uri)

    def publish(ctx: StageContext) -> dict[str, Any]:
        return {"uri": ctx.publish_dir(model_dir, "checkpoint", ref="checkpoint")}

    def promote(ctx: StageContext) -> dict[str, Any]:
        return register_and_gate(
            ctx,
            game="odland",
            checkpoint_uri=checkpoint,
            candidate_scores=[10.0, 11.0, 10.0, 9.0],
            base_model="file:///base",
            evaluate_reference=lambda model, label, out: ([0.0, 1.0, 0.5, 0.2], {}),
        ).outputs()

    with parent_run(cfg, "readme") as parent:
        checkpoint = run_stage(cfg, "rl", publish, parent_run_id=parent)["uri"]
        assert run_stage(cfg, "promote", promote, parent_run_id=parent)["promoted"]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its worker, by the PID we started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow  # a registered model, a python process and an mlflow scoring server
def test_registry_block_runs_as_written(
    fresh_checkout: Path, mlflow_uri: str, tiny_model_dir: Path
) -> None:
    """README's registry commands, as written, in a shell without the venv on PATH: load the
    champion, serve it with ``mlflow models serve``, POST a frame to ``/invocations``."""
    block = _registry_block()
    serve = next(c for c in block if "models serve" in c.text)
    db = serve.env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///")
    assert not Path(db).is_absolute(), "README's database is the demo's, in the run folder"
    (fresh_checkout / db).parent.mkdir(parents=True)
    shutil.copyfile(mlflow_uri.removeprefix("sqlite:///"), fresh_checkout / db)
    _register_champion(fresh_checkout, f"sqlite:///{fresh_checkout / db}", tiny_model_dir)

    port = str(_free_port())  # README's port may be taken on this machine: the one change
    log = fresh_checkout / "serve.log"
    proc = None
    try:
        for command in block:
            text = command.text.replace("5001", port)
            if command is serve:
                with log.open("wb") as out:
                    proc = subprocess.Popen(
                        ["bash", "-c", text],
                        cwd=fresh_checkout,
                        env=_fresh_env(),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                deadline = time.monotonic() + 180
                while True:
                    assert proc.poll() is None, f"{command}\n{log.read_text()[-3000:]}"
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2):
                            break
                    except OSError:
                        assert time.monotonic() < deadline, log.read_text()[-3000:]
                        time.sleep(0.5)
                continue
            done = _run(Command(command.line, text, command.env, command.argv), fresh_checkout)
            assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
            if "curl" in command.argv[:1]:
                predictions = json.loads(done.stdout)["predictions"]
                assert len(predictions) == 1 and json.loads(predictions[0]["action"])
                assert predictions[0]["recipe"] == "odysseus"
            elif "load_model" in command.text:
                assert "image" in done.stdout and "action" in done.stdout  # the signature
        assert proc is not None, "the block has no serve command"
    finally:
        if proc is not None:
            _stop(proc)
