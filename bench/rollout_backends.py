"""Rollout turns/s: the hf backend (the trainer's HFPolicy generates in-process) against the
openai backend (the same tiny model served by `odyssey serve` in another process, batched),
measured side by side in one run.

Both play the same Collector loop on the same odland envs with the same weights and seeds,
so they sample the same answers (checked: the response ids must be identical), and the
ratio compares only where generation runs: in this process, or behind HTTP in a server
that batches the concurrent requests of one turn. The openai path also pays for what RL
needs on top of the HTTP round trip: every prompt is encoded locally as well (the trainer's
prompt ids), and the answers' ids and log-probs travel back as JSON. Rounds alternate the
two backends (the order rotates), and the median turns/s of each is reported. One weight
push to the server (write a safetensors folder, reload, checksum) is timed too.

On a 2-core machine the two processes compete for the same cores: the server's generation
thread and this process's env stepping and prompt encoding cannot both run at full speed,
which is the honest picture of a one-machine setup, not of a GPU server.

    python bench/rollout_backends.py --envs 8 --turns 64 --max-new-tokens 16 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run(
    envs: int, turns: int, max_new_tokens: int, rounds: int, threads: int, batch_wait_ms: float
) -> dict[str, Any]:
    import httpx
    import torch

    from odyssey_core.config import GameBoyEnvConfig
    from odyssey_core.envs.vector import SyncVectorEnv
    from odyssey_core.models.tiny import build_tiny_model
    from odyssey_core.policy import GenerationParams
    from odyssey_core.policy.hf import HFPolicy
    from odyssey_core.policy.weight_sync import (
        OdysseyServeTarget,
        RolloutBackendSettings,
        build_rollout_engine,
    )
    from odyssey_core.protocol.formats import RESPONSE_FORMATS
    from odyssey_core.rollout.collector import Collector, TurnBudget
    from odyssey_core.serve.app import ServerProcess

    torch.set_num_threads(threads)
    params = GenerationParams(temperature=1.0, max_new_tokens=max_new_tokens)
    config = GameBoyEnvConfig(game="odland", max_turns=turns)
    names = [f"odland-1-{i % 3 + 1}" for i in range(envs)]
    results: dict[str, Any] = {
        "envs": envs, "turns_per_round": turns, "max_new_tokens": max_new_tokens,
        "rounds": rounds, "threads": threads, "batch_wait_ms": batch_wait_ms,
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = build_tiny_model(Path(folder) / "tiny", seed=0)
        policy = HFPolicy(checkpoint, game="odland")
        server_args = [
            "--model-name", "tiny", "--threads", str(threads),
            "--max-batch-size", str(envs), "--batch-wait-ms", str(batch_wait_ms),
            "--log-level", "warning",
        ]  # fmt: skip
        log = Path(folder) / "serve.log"
        # The weight routes need a key and a root holding the pushed folders.
        admin_key = secrets.token_hex(16)
        server_args += ["--weights-root", folder]
        env = {"ODYSSEY_ADMIN_KEY": admin_key}
        with ServerProcess.odyssey(checkpoint, log, args=server_args, env=env) as server:
            settings = RolloutBackendSettings(
                kind="openai", base_url=server.base_url, model="tiny", concurrency=envs
            )
            remote, _ = build_rollout_engine(settings, policy, folder)
            backends = {"hf": policy, "openai": remote}
            collectors = {
                name: Collector(
                    SyncVectorEnv(names, env_kwargs={"config": config}),
                    backend,
                    params,
                    max_turns=turns,
                    response_format=RESPONSE_FORMATS.get("odysseus"),
                    tokenizer=policy.tokenizer,
                )
                for name, backend in backends.items()
            }
            for collector in collectors.values():  # warm-up: one-off allocations, connections
                collector.collect(TurnBudget(envs), seed=99)

            turns_per_s: dict[str, list[float]] = {name: [] for name in collectors}
            tokens_per_s: dict[str, list[float]] = {name: [] for name in collectors}
            identical = True
            order = list(collectors)
            for r in range(rounds):
                ids: dict[str, list[list[int]]] = {}
                for name in order[r % 2 :] + order[: r % 2]:
                    start = time.perf_counter()
                    batch, _ = collectors[name].collect(TurnBudget(turns), seed=r)
                    elapsed = time.perf_counter() - start
                    tokens = sum(int(t.numel()) for t in batch.response_ids)
                    turns_per_s[name].append(len(batch) / elapsed)
                    tokens_per_s[name].append(tokens / elapsed)
                    ids[name] = [t.tolist() for t in batch.response_ids]
                identical = identical and ids["hf"] == ids["openai"]
            server_stats = httpx.get(server.url + "/metrics").json()

            target = OdysseyServeTarget(server.base_url, Path(folder) / "sync", api_key=admin_key)
            target.push(policy.model, verify=True)  # warm
            start = time.perf_counter()
            report = target.push(policy.model, verify=True)
            push_s = time.perf_counter() - start
            for collector in collectors.values():
                collector.vector_env.close()

    for name in collectors:
        results[name] = {
            "turns_per_s": round(statistics.median(turns_per_s[name]), 2),
            "tokens_per_s": round(statistics.median(tokens_per_s[name]), 1),
            "all_turns_per_s": [round(v, 2) for v in turns_per_s[name]],
        }
    results["ratio_openai_vs_hf"] = round(
        results["openai"]["turns_per_s"] / results["hf"]["turns_per_s"], 3
    )
    results["identical_rollouts"] = identical
    results["server_batches"] = {
        "max_batch_size_seen": server_stats["max_batch_size_seen"],
        "mean_batch_size": round(server_stats["sequences"] / max(1, server_stats["batches"]), 2),
    }
    results["weight_push"] = {
        "seconds": round(push_s, 3),
        "megabytes": round(report.served.bytes / 2**20, 2) if report.served else None,
        "checksum_match": report.served == report.sent,
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=8, help="environments in lockstep")
    parser.add_argument("--turns", type=int, default=64, help="turns per round and backend")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, each process")
    parser.add_argument(
        "--batch-wait-ms", type=float, default=20.0, help="the server's wait for a batch"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if min(args.envs, args.turns, args.max_new_tokens, args.rounds, args.threads) < 1:
        parser.error("every count must be >= 1")

    results = run(
        args.envs, args.turns, args.max_new_tokens, args.rounds, args.threads, args.batch_wait_ms
    )
    print(
        f"tiny Qwen3-VL on odland, {args.envs} envs, {args.turns} turns/round, "
        f"{args.max_new_tokens} new tokens max, {args.rounds} rounds, {args.threads} thread(s)"
    )
    print(f"{'backend':>8}  {'turns/s':>8}  {'tokens/s':>9}  all turns/s")
    for name in ("hf", "openai"):
        row = results[name]
        print(
            f"{name:>8}  {row['turns_per_s']:>8.2f}  {row['tokens_per_s']:>9.1f}  "
            f"{row['all_turns_per_s']}"
        )
    batches = results["server_batches"]
    print(
        f"openai/hf = {results['ratio_openai_vs_hf']:.3f}x; identical rollouts: "
        f"{results['identical_rollouts']}; server batches: mean {batches['mean_batch_size']}, "
        f"max {batches['max_batch_size_seen']}"
    )
    push = results["weight_push"]
    print(
        f"one weight push: {push['seconds']:.3f} s for {push['megabytes']} MiB, checksum "
        f"match: {push['checksum_match']}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if results["identical_rollouts"] and push["checksum_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
