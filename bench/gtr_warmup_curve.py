"""How far GTR's format warm-up takes the tiny model: success on fixed deals every K steps.

``odyssey bench fidelity --paper gtr`` starts every method from a format warm-up (GTR with PPO
off, cloning the exact programmatic corrector's whole answers; see ``fidelity/gtr.py``). Its
report flags a warm start at random play's floor. This script answers the question a user asks
before choosing ``warmup_steps`` or a frame size: does more cloning, or a larger frame, lift the
warm-up's success off the floor? It trains one warm-up with the comparison's own settings and
evaluates it on the comparison's fixed deals (``fidelity.gtr.evaluate``) every ``--every``
steps, printing one JSON line per evaluation and a table at the end:

    .venv/bin/python bench/gtr_warmup_curve.py --env cards-numberline --steps 300 --every 100
    .venv/bin/python bench/gtr_warmup_curve.py --image-size 192 128
    .venv/bin/python bench/gtr_warmup_curve.py --env-kwarg layout=lines --env-kwarg font_size=72

``--env-kwarg`` replaces one of the comparison's variant settings (``GTRSizes.variants``).

The floor printed beside the curve is ``fidelity.gtr.random_play_success`` on the same deals.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import yaml

from odyssey_core.fidelity import gtr
from odyssey_core.models.tiny import ensure_tiny_model
from odyssey_core.recipes.gtr.train import build_trainer


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="cards-numberline", choices=gtr.DEFAULT_SIZES.envs)
    parser.add_argument("--steps", type=int, default=300, help="warm-up steps in all")
    parser.add_argument("--every", type=int, default=100, help="evaluate every this many steps")
    parser.add_argument("--episodes", type=int, default=gtr.DEFAULT_SIZES.episodes)
    parser.add_argument("--lr", type=float, default=gtr.DEFAULT_SIZES.warmup_lr)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        metavar=("WIDTH", "HEIGHT"),
        default=None,
        help="the policy's frame size (default: configs/gtr/tiny.yaml's)",
    )
    parser.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an env setting over the comparison's variant (VALUE read as YAML); repeatable",
    )
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    return parser.parse_args()


def variant_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["layout=lines", "font_size=72"]`` -> ``{"layout": "lines", "font_size": 72}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env-kwarg takes KEY=VALUE, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def main() -> None:
    args = parse_args()
    if args.steps < 1 or args.every < 1:
        raise SystemExit("--steps and --every must be at least 1")
    torch.set_num_threads(1)
    logging.getLogger("odyssey_core.recipes.gtr.train").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="gtr-warmup-") as tmp:
        work = args.work or Path(tmp)
        variant = {
            **gtr.DEFAULT_SIZES.variants.get(args.env, {}),
            **variant_overrides(args.env_kwarg),
        }
        sizes = replace(
            gtr.DEFAULT_SIZES,
            warmup_lr=args.lr,
            variants={**gtr.DEFAULT_SIZES.variants, args.env: variant},
        )
        base = ensure_tiny_model(work / "tiny-base", seed=0)
        settings = gtr.warm_up_settings(args.env, base, args.seed, sizes)
        if args.image_size is not None:
            model = settings.model.model_copy(update={"image_size": tuple(args.image_size)})
            settings = settings.model_copy(update={"model": model})
        floor = gtr.random_play_success(args.env, sizes.env_kwargs(args.env), args.episodes)
        trainer = build_trainer(settings, work / "warm")
        rows = []
        started = time.perf_counter()
        try:
            done = 0
            while done < args.steps:
                chunk = min(args.every, args.steps - done)
                gtr.train_for({"warm": trainer}, steps=chunk)
                done += chunk
                summary = gtr.evaluate(trainer, args.episodes).summary()
                row = {
                    "steps": done,
                    "success": summary["success_rate"],
                    "success_se": summary["success_se"],
                    "invalid_rate": summary["invalid_rate"],
                    "elapsed_s": round(time.perf_counter() - started, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            trainer.close()
    print(
        f"\n{args.env} {sizes.env_kwargs(args.env)}, frames {tuple(settings.model.image_size)}, "
        f"lr {args.lr}, seed "
        f"{args.seed}, {args.episodes} deals; random legal play: {floor:.3f}\n"
    )
    print("| warm-up steps | success ± s.e. | invalid answers | elapsed s |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['steps']} | {r['success']:.3f} ± {r['success_se']:.3f} | "
            f"{r['invalid_rate']:.3f} | {r['elapsed_s']:.0f} |"
        )


if __name__ == "__main__":
    main()
