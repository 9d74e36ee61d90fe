"""Tokens/s of batched HFPolicy generation on the tiny Qwen3-VL at batch 1, 4 and 16.

The tiny checkpoint is built into a temporary folder. End-of-turn tokens are disabled, so
every item generates exactly ``--max-new-tokens`` tokens and throughput compares like with
like. Batch sizes are measured side by side: each round runs every size once (in a rotated
order, so no size always runs first on a warm cache), and the median over rounds is
reported. The target is batch 16 at >= 4x the tokens/s of batch 1.

Memory: peak resident set size from ``resource.getrusage(RUSAGE_SELF).ru_maxrss``, the
process-wide high-water mark (it never goes down), read after the warm-up at each batch
size in ascending order, so each figure is the peak up to and including that size.

    python bench/generation_throughput.py --rounds 3 --max-new-tokens 64 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BATCH_SIZES = (1, 4, 16)
TARGET_RATIO = 4.0


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def run(rounds: int, max_new_tokens: int, threads: int, temperature: float) -> dict[str, Any]:
    import torch

    from odyssey_core.envs.base import Observation
    from odyssey_core.models.tiny import build_tiny_model
    from odyssey_core.policy import GenerationParams
    from odyssey_core.policy.hf import HFPolicy

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    observations = [
        Observation(
            image=rng.integers(0, 256, (144, 160, 3), dtype=np.uint8),
            text=f"Level 1-{i % 4 + 1}, turn {i}. Choose the buttons to press next.",
        )
        for i in range(max(BATCH_SIZES))
    ]
    params = GenerationParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=0)
    with tempfile.TemporaryDirectory() as folder:
        policy = HFPolicy(build_tiny_model(Path(folder) / "tiny", seed=0))
    policy.eos_ids = frozenset()  # never stop early: every item yields max_new_tokens tokens

    def timed(batch: int) -> float:
        start = time.perf_counter()
        gens = policy.generate(observations[:batch], params)
        elapsed = time.perf_counter() - start
        assert all(len(g.response_ids) == max_new_tokens for g in gens), "an item stopped early"
        return elapsed

    peak_rss: dict[int, float] = {}
    for batch in BATCH_SIZES:  # warm-up (one-off allocations), not timed
        timed(batch)
        peak_rss[batch] = _peak_rss_mib()

    seconds: dict[int, list[float]] = {b: [] for b in BATCH_SIZES}
    for r in range(rounds):
        order = BATCH_SIZES[r % len(BATCH_SIZES) :] + BATCH_SIZES[: r % len(BATCH_SIZES)]
        for batch in order:
            seconds[batch].append(timed(batch))

    results: dict[str, Any] = {
        "rounds": rounds,
        "max_new_tokens": max_new_tokens,
        "threads": threads,
        "temperature": temperature,
        "memory_method": "resource.getrusage(RUSAGE_SELF).ru_maxrss (process high-water mark)",
        "batches": {},
    }
    for batch in BATCH_SIZES:
        median = statistics.median(seconds[batch])
        results["batches"][str(batch)] = {
            "median_seconds": round(median, 4),
            "tokens_per_second": round(batch * max_new_tokens / median, 1),
            "all_seconds": [round(s, 4) for s in seconds[batch]],
            "peak_rss_mib": round(peak_rss[batch], 1),
        }
    tps = {b: results["batches"][str(b)]["tokens_per_second"] for b in BATCH_SIZES}
    results["ratio_16_vs_1"] = round(tps[16] / tps[1], 2)
    results["target_ratio"] = TARGET_RATIO
    results["pass"] = results["ratio_16_vs_1"] >= TARGET_RATIO
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=64,
        help="tokens per item; short runs are dominated by the prompt prefill",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 for greedy")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.max_new_tokens < 1:
        parser.error("--rounds and --max-new-tokens must be >= 1")

    results = run(args.rounds, args.max_new_tokens, args.threads, args.temperature)
    print(
        f"tiny Qwen3-VL, {args.max_new_tokens} new tokens/item, {args.rounds} rounds, "
        f"{args.threads} thread(s), temperature {args.temperature}"
    )
    print(f"{'batch':>5}  {'median s':>9}  {'tokens/s':>9}  {'peak RSS MiB':>12}")
    for batch, row in results["batches"].items():
        print(
            f"{batch:>5}  {row['median_seconds']:>9.3f}  {row['tokens_per_second']:>9.1f}  "
            f"{row['peak_rss_mib']:>12.1f}"
        )
    verdict = "PASS" if results["pass"] else "FAIL"
    ratio = results["ratio_16_vs_1"]
    print(f"batch16/batch1 = {ratio:.2f}x (target >= {TARGET_RATIO}x): {verdict}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if results["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
