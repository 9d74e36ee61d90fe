"""Where an ESPO run's demonstrations come from: a dataset folder the user gives (generated
earlier with ``odyssey espo generate``, or SmartSpot-format records converted with ``odyssey
espo load-smartspot``), or the seeded generator's preset written into the run
(:mod:`odyssey_core.envs.persona.dataset`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from odyssey_core.envs.persona.dataset import generate_episodes, write_dataset
from odyssey_core.recipes.espo.settings import EspoDataSettings

__all__ = ["generated_name", "resolve_dataset"]


def generated_name(
    preset: str, seed: int, drop_channel: str | None, exclude_channels: Sequence[str] = ()
) -> str:
    """The folder name of a generated dataset: what it was generated from."""
    left_out = sorted({*exclude_channels, *([drop_channel] if drop_channel else [])})
    return f"{preset}-seed{seed}" + (f"-without-{'-'.join(left_out)}" if left_out else "")


def resolve_dataset(data: EspoDataSettings, folder: Path) -> Path:
    """The dataset folder of ``data``: its ``dataset`` (checked), or the generator's preset
    under ``folder`` (generated once: a folder with its manifest is complete, since the
    manifest is written last)."""
    if data.dataset is not None:
        path = Path(data.dataset)
        if not (path / "episodes.jsonl").is_file():
            raise FileNotFoundError(
                f"data.dataset {str(path)!r} has no episodes.jsonl: generate one with "
                "`odyssey espo generate OUT`, or convert SmartSpot records with "
                "`odyssey espo load-smartspot IN OUT`"
            )
        return path
    out = Path(folder) / generated_name(
        data.preset, data.seed, data.drop_channel, data.exclude_channels
    )
    if not (out / "manifest.json").is_file():
        episodes = generate_episodes(
            data.preset,
            data.seed,
            drop_channel=data.drop_channel,
            exclude_channels=data.exclude_channels,
        )
        write_dataset(out, episodes, preset=data.preset, seed=data.seed, overwrite=True)
    return out
