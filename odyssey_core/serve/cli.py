"""``odyssey serve CHECKPOINT``: an OpenAI-compatible server for a local checkpoint."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import click
from click.core import ParameterSource
from click.decorators import FC

from odyssey_core.serve import InsecureBindError, check_bind_security, is_loopback
from odyssey_core.serve.limits import ServeLimits

DEFAULTS = ServeLimits()


def limit_option(
    flag: str, field: str, *, minimum: int = 1, help: str | None = None
) -> Callable[[FC], FC]:
    """A whole-number option whose default is the ``ServeLimits`` field it sets."""
    return click.option(
        flag,
        type=click.IntRange(min=minimum),
        default=getattr(DEFAULTS, field),
        show_default=True,
        help=help,
    )


@click.command("serve", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--api-key",
    envvar="ODYSSEY_API_KEY",
    show_envvar=True,
    default=None,
    help="require 'Authorization: Bearer KEY' on /v1 and /metrics (mandatory when not bound "
    "to loopback). Set it in ODYSSEY_API_KEY: a key on the command line is visible to every "
    "local user in `ps`",
)
@click.option(
    "--admin-key",
    envvar="ODYSSEY_ADMIN_KEY",
    show_envvar=True,
    default=None,
    help="the key the weight routes need (default: the API key); set it in ODYSSEY_ADMIN_KEY",
)
@click.option(
    "--weights-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="turn on POST /v1/weights/reload and GET /v1/weights/checksum (needs a key), "
    "reading weight folders only inside this folder [default: off]",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help="a Host name to answer besides loopback names (repeatable); on a loopback bind any "
    "other Host header is refused (DNS rebinding)",
)
@click.option(
    "--model-name", default=None, help="the name clients ask for [default: the folder name]"
)
@click.option("--max-batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--batch-wait-ms",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="how long the first request of a batch waits for company",
)
@limit_option(
    "--max-queue",
    "max_queue",
    help="requests that may wait beyond a full batch; more are answered 503 with Retry-After",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULTS.request_timeout,
    show_default=True,
    help="seconds a request may take; later it is answered 504 and its work dropped",
)
@click.option(
    "--max-body-mb",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULTS.max_body_bytes / 2**20,
    show_default=True,
    help="largest request body (MiB), images included; larger is a 413",
)
@limit_option("--max-messages", "max_messages")
@limit_option("--max-images", "max_images", minimum=0, help="images per request")
@limit_option(
    "--max-image-pixels",
    "max_image_pixels",
    help="pixels per image, read from the image header before decoding",
)
@click.option(
    "--max-prompt-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="prompt tokens per request, image tokens included [default: the model's context]",
)
@limit_option(
    "--max-completion-tokens",
    "max_tokens_limit",
    help="the largest max_tokens a request may ask for",
)
@click.option(
    "--shutdown-timeout",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="seconds SIGTERM waits for answers in flight (running generation stops at once)",
)
@click.option(
    "--dtype",
    type=click.Choice(["float32", "bfloat16", "float16"]),
    default="float32",
    show_default=True,
)
@click.option("--device", default="cpu", show_default=True)
@click.option("--threads", type=int, default=None, help="torch CPU threads [default: torch's]")
@click.option("--log-level", default="info", show_default=True)
@click.pass_context
def serve_command(
    ctx: click.Context,
    checkpoint: Path,
    host: str,
    port: int,
    api_key: str | None,
    admin_key: str | None,
    weights_root: Path | None,
    allowed_hosts: tuple[str, ...],
    model_name: str | None,
    max_batch_size: int,
    batch_wait_ms: float,
    max_queue: int,
    request_timeout: float,
    max_body_mb: float,
    max_messages: int,
    max_images: int,
    max_image_pixels: int,
    max_prompt_tokens: int | None,
    max_completion_tokens: int,
    shutdown_timeout: int,
    dtype: str,
    device: str,
    threads: int | None,
    log_level: str,
) -> None:
    """Serve the checkpoint at CHECKPOINT on /v1/chat/completions (OpenAI format).

    Keys come from the environment: ODYSSEY_API_KEY for clients, ODYSSEY_ADMIN_KEY for the
    weight routes (which also need --weights-root).
    """
    # Checked before anything heavy is loaded, so a refused start fails in a blink.
    try:
        check_bind_security(host, api_key)
    except InsecureBindError as error:
        raise click.UsageError(str(error)) from None
    for name in ("api_key", "admin_key"):
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            variable = "ODYSSEY_API_KEY" if name == "api_key" else "ODYSSEY_ADMIN_KEY"
            click.echo(
                f"warning: --{name.replace('_', '-')} on the command line is visible to every "
                f"local user in `ps`; set {variable} instead",
                err=True,
            )
    if weights_root is not None:
        if not (api_key or admin_key):
            raise click.UsageError(
                "--weights-root lets clients replace the served weights, so it needs a key: "
                "set ODYSSEY_ADMIN_KEY (or ODYSSEY_API_KEY) in the environment"
            )
        if not weights_root.is_dir():
            raise click.UsageError(f"--weights-root {weights_root} is not a folder")
    try:
        limits = ServeLimits(
            max_body_bytes=int(max_body_mb * 2**20),
            max_messages=max_messages,
            max_images=max_images,
            max_image_pixels=max_image_pixels,
            max_prompt_tokens=max_prompt_tokens,
            default_max_tokens=min(DEFAULTS.default_max_tokens, max_completion_tokens),
            max_tokens_limit=max_completion_tokens,
            max_queue=max_queue,
            request_timeout=request_timeout,
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from None

    import torch
    import uvicorn

    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.serve.app import create_app
    from odyssey_core.serve.running import StoppingServer

    if threads is not None:
        torch.set_num_threads(threads)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    serve_log = logging.getLogger("odyssey.serve")
    serve_log.addHandler(handler)
    serve_log.setLevel(logging.INFO)

    name = model_name or checkpoint.resolve().name
    policy = HFPolicy(checkpoint, dtype=dtype, device=device)
    # A loopback bind answers loopback Host names (and --allowed-host ones) only; a public
    # bind is behind a key, and checks hosts only when some are named.
    trusted = allowed_hosts if (is_loopback(host) or allowed_hosts) else None
    app = create_app(
        policy,
        name,
        api_key=api_key,
        admin_key=admin_key,
        max_batch_size=max_batch_size,
        batch_wait_ms=batch_wait_ms,
        weights_root=weights_root,
        limits=limits,
        trusted_hosts=trusted,
    )
    auth = "API key required" if api_key else "no API key (loopback only)"
    weights = f"weight reloads from {weights_root}" if weights_root else "weight reloads off"
    click.echo(f"serving {name!r} at http://{host}:{port}/v1 ({auth}; {weights})")
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=shutdown_timeout,
    )
    StoppingServer(config, on_exit=app.state.batcher.request_stop).run()
