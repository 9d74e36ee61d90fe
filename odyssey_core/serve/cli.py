"""``odyssey serve CHECKPOINT``: an OpenAI-compatible server for a local checkpoint."""

from __future__ import annotations

from pathlib import Path

import click

from odyssey_core.serve import InsecureBindError, check_bind_security


@click.command("serve", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--api-key",
    envvar="ODYSSEY_API_KEY",
    show_envvar=True,
    default=None,
    help="require 'Authorization: Bearer KEY' (mandatory when not bound to loopback)",
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
@click.option(
    "--dtype",
    type=click.Choice(["float32", "bfloat16", "float16"]),
    default="float32",
    show_default=True,
)
@click.option("--device", default="cpu", show_default=True)
@click.option("--threads", type=int, default=None, help="torch CPU threads [default: torch's]")
@click.option("--log-level", default="info", show_default=True)
def serve_command(
    checkpoint: Path,
    host: str,
    port: int,
    api_key: str | None,
    model_name: str | None,
    max_batch_size: int,
    batch_wait_ms: float,
    dtype: str,
    device: str,
    threads: int | None,
    log_level: str,
) -> None:
    """Serve the checkpoint at CHECKPOINT on /v1/chat/completions (OpenAI format)."""
    # Checked before anything heavy is loaded, so a refused start fails in a blink.
    try:
        check_bind_security(host, api_key)
    except InsecureBindError as error:
        raise click.UsageError(str(error)) from None

    import torch
    import uvicorn

    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.serve.app import create_app

    if threads is not None:
        torch.set_num_threads(threads)
    name = model_name or checkpoint.resolve().name
    policy = HFPolicy(checkpoint, dtype=dtype, device=device)
    app = create_app(
        policy,
        name,
        api_key=api_key,
        max_batch_size=max_batch_size,
        batch_wait_ms=batch_wait_ms,
    )
    auth = "API key required" if api_key else "no API key (loopback only)"
    click.echo(f"serving {name!r} at http://{host}:{port}/v1 ({auth})")
    uvicorn.run(app, host=host, port=port, log_level=log_level)
