"""The model registry: one registered model per game, versions pointing at checkpoints in the
artifact store, the aliases ``candidate`` and ``champion``, the promotion gate and rollback.

The gate (``welch_gate``): a candidate replaces the champion only if its mean progress exceeds
the champion's by more than ``margin`` AND a one-sided Welch t-test of candidate against
champion + margin gives p < alpha. With no champion yet, the base model's scores stand in for
the champion. Every decision, with its numbers and reason, is written as tags on the candidate
version (``promotion.*``), so the registry itself explains why a version is, or is not, champion.

Champion history: the registered model's tag ``odyssey.champion_history`` holds the JSON list of
versions that have been champion, oldest first (the last is the current one); the alias
``champion-previous`` points at the one before. ``rollback`` pops the list.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from odyssey_core.common.redaction import redact_uri
from odyssey_core.registry.settings import PromotionSettings, RegistrySettings

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

CANDIDATE = "candidate"
CHAMPION = "champion"
PREVIOUS_CHAMPION = "champion-previous"
HISTORY_TAG = "odyssey.champion_history"
GAME_TAG = "odyssey.game"
CHECKPOINT_TAG = "checkpoint_uri"  # where a version's checkpoint lives in the artifact store
_MAX_TAG = 5000  # MLflow's model-version tag value limit
_HISTORY_KEEP = 200  # versions; keeps the tag far below MLflow's value limit


class RegistryError(Exception):
    """A registry operation that cannot be done as asked (no candidate, nothing to roll back)."""


# ---------------------------------------------------------------------------------------------
# The statistics


@dataclass(frozen=True)
class SampleStats:
    n: int
    mean: float
    se: float  # standard error of the mean: sample std (ddof=1) / sqrt(n)

    @classmethod
    def of(cls, scores: Sequence[float]) -> SampleStats:
        n = len(scores)
        if n == 0:
            return cls(0, math.nan, math.nan)
        mean = math.fsum(scores) / n
        if n < 2:
            return cls(n, mean, math.nan)
        var = math.fsum((x - mean) ** 2 for x in scores) / (n - 1)
        return cls(n, mean, math.sqrt(var / n))


@dataclass(frozen=True)
class GateResult:
    promoted: bool
    reason: str
    reference: Literal["champion", "base"]
    candidate: SampleStats
    reference_stats: SampleStats
    margin: float
    alpha: float
    t: float
    p: float
    df: float

    @property
    def mean_difference(self) -> float:
        return self.candidate.mean - self.reference_stats.mean

    def tags(self) -> dict[str, str]:
        """The decision as ``promotion.*`` tags (numbers with full precision)."""

        def num(x: float) -> str:
            return repr(float(x))

        return {
            "promotion.decision": "promoted" if self.promoted else "rejected",
            "promotion.reason": self.reason,
            "promotion.reference": self.reference,
            "promotion.candidate_mean": num(self.candidate.mean),
            "promotion.candidate_se": num(self.candidate.se),
            "promotion.candidate_n": str(self.candidate.n),
            "promotion.reference_mean": num(self.reference_stats.mean),
            "promotion.reference_se": num(self.reference_stats.se),
            "promotion.reference_n": str(self.reference_stats.n),
            "promotion.mean_difference": num(self.mean_difference),
            "promotion.margin": num(self.margin),
            "promotion.alpha": num(self.alpha),
            "promotion.t": num(self.t),
            "promotion.df": num(self.df),
            "promotion.p": num(self.p),
            "promotion.test": "welch-t one-sided: candidate > reference + margin",
        }


def _check_scores(name: str, scores: Sequence[float]) -> list[float]:
    values = [float(x) for x in scores]
    bad = [x for x in values if not math.isfinite(x)]
    if bad:
        raise ValueError(f"{name} scores must be finite numbers, got {bad[:3]}")
    return values


def welch_gate(
    candidate_scores: Sequence[float],
    reference_scores: Sequence[float],
    *,
    margin: float = 0.0,
    alpha: float = 0.05,
    min_samples: int = 2,
    reference: Literal["champion", "base"] = "champion",
) -> GateResult:
    """Is the candidate better than the reference by more than ``margin``, significantly?

    Tests H0: mean(candidate) <= mean(reference) + margin against the one-sided alternative
    with Welch's t-test (unequal variances), i.e. scipy's
    ``ttest_ind(candidate, reference + margin, equal_var=False, alternative="greater")``.
    """
    from scipy import stats

    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    cand = _check_scores("candidate", candidate_scores)
    ref = _check_scores(reference, reference_scores)
    c, r = SampleStats.of(cand), SampleStats.of(ref)

    def result(promoted: bool, reason: str, t: float, p: float, df: float) -> GateResult:
        return GateResult(promoted, reason, reference, c, r, margin, alpha, t, p, df)

    if min(c.n, r.n) < min_samples:
        return result(
            False,
            f"too few episodes to test: candidate n={c.n}, {reference} n={r.n}, "
            f"need at least {min_samples} each",
            math.nan,
            math.nan,
            math.nan,
        )
    diff = c.mean - r.mean
    if c.se == 0 and r.se == 0:
        # Both constant: the t statistic is undefined; the difference is exact.
        t = math.copysign(math.inf, diff - margin) if diff != margin else math.nan
        p = 0.0 if diff > margin else 1.0
        df = float(c.n + r.n - 2)
    else:
        shifted = [x + margin for x in ref]
        test = stats.ttest_ind(cand, shifted, equal_var=False, alternative="greater")
        t, p, df = float(test.statistic), float(test.pvalue), float(test.df)
    numbers = (
        f"candidate mean {c.mean:.4g} (SE {c.se:.3g}, n={c.n}) vs {reference} mean "
        f"{r.mean:.4g} (SE {r.se:.3g}, n={r.n}): difference {diff:.4g}, margin {margin:g}; "
        f"Welch t={t:.3f}, df={df:.1f}, one-sided p={p:.3g}, alpha {alpha:g}"
    )
    if not diff > margin:
        return result(False, f"not better by the margin: {numbers}", t, p, df)
    if not p < alpha:
        return result(False, f"not significant: {numbers}", t, p, df)
    return result(True, f"significantly better: {numbers}", t, p, df)


# ---------------------------------------------------------------------------------------------
# The registry


@dataclass(frozen=True)
class PromotionDecision:
    model: str
    candidate_version: int
    previous_champion: int | None
    champion: int | None  # after the decision
    gate: GateResult

    @property
    def promoted(self) -> bool:
        return self.gate.promoted

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["promoted"] = self.promoted
        return data


@dataclass(frozen=True)
class RollbackResult:
    model: str
    demoted: int
    champion: int
    previous: int | None


def _version_dict(mv: ModelVersion) -> dict[str, Any]:
    return {
        "version": int(mv.version),
        "source": mv.source,
        "run_id": mv.run_id,
        "created": datetime.fromtimestamp(mv.creation_timestamp / 1000, UTC).isoformat(),
        "tags": dict(mv.tags or {}),
    }


class ModelRegistry:
    """Registered models ``<prefix>-<game>`` in MLflow's model registry."""

    def __init__(
        self,
        tracking_uri: str | None = None,
        registry_uri: str | None = None,
        *,
        settings: RegistrySettings | None = None,
    ) -> None:
        from mlflow import MlflowClient

        self.settings = settings or RegistrySettings.from_env()
        tracking = self.settings.tracking
        self.client: MlflowClient = MlflowClient(
            tracking_uri=tracking_uri or tracking.tracking_uri,
            registry_uri=registry_uri or tracking.registry_uri or tracking_uri,
        )

    def model_name(self, game: str) -> str:
        return f"{self.settings.tracking.model_prefix}-{game}"

    # -- versions -------------------------------------------------------------------------

    def _ensure_model(self, game: str) -> str:
        from mlflow.exceptions import MlflowException

        name = self.model_name(game)
        try:
            self.client.create_registered_model(
                name,
                tags={GAME_TAG: game},
                description=f"Odyssey agents for {game}; aliases: candidate, champion",
            )
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        return name

    def register_checkpoint(
        self,
        checkpoint_uri: str,
        game: str,
        run_id: str | None = None,
        metrics: dict[str, float] | None = None,
        *,
        tags: dict[str, str] | None = None,
        set_candidate: bool = True,
        model_source: str | None = None,
        description: str | None = None,
    ) -> int:
        """A new version of the checkpoint at ``checkpoint_uri`` (artifact store; kept as the
        tag ``checkpoint_uri``). Its source is ``model_source``, the MLflow Model logged for
        it (:func:`odyssey_core.registry.pyfunc.log_agent_model`), or else the bare
        checkpoint URI; its evaluation metrics become ``metric.<name>`` tags; it becomes the
        ``candidate`` unless told not to. Returns the version number."""
        name = self._ensure_model(game)
        version_tags = {GAME_TAG: game, CHECKPOINT_TAG: checkpoint_uri, **(tags or {})}
        for key, value in (metrics or {}).items():
            version_tags[f"metric.{key}"] = repr(float(value))
        mv = self.client.create_model_version(
            name,
            source=model_source or checkpoint_uri,
            run_id=run_id,
            tags={k: redact_uri(str(v))[:_MAX_TAG] for k, v in version_tags.items()},
            description=None if description is None else redact_uri(description),
        )
        version = int(mv.version)
        if set_candidate:
            self.client.set_registered_model_alias(name, CANDIDATE, str(version))
        return version

    def alias_version(self, game: str, alias: str) -> int | None:
        from mlflow.exceptions import MlflowException

        try:
            mv = self.client.get_model_version_by_alias(self.model_name(game), alias)
        except MlflowException:
            return None
        return int(mv.version)

    def champion(self, game: str) -> int | None:
        return self.alias_version(game, CHAMPION)

    def candidate(self, game: str) -> int | None:
        return self.alias_version(game, CANDIDATE)

    def checkpoint_uri(self, game: str, alias_or_version: str | int = CHAMPION) -> str:
        """Where the checkpoint of a version (or an alias: ``champion``) lives in the artifact
        store (its ``checkpoint_uri`` tag; the source of a version registered bare)."""
        name = self.model_name(game)
        if isinstance(alias_or_version, int) or str(alias_or_version).isdigit():
            mv = self.client.get_model_version(name, str(alias_or_version))
        else:
            mv = self.client.get_model_version_by_alias(name, str(alias_or_version))
        return str((mv.tags or {}).get(CHECKPOINT_TAG) or mv.source)

    def describe_version(
        self,
        game: str,
        version: int,
        *,
        description: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """What a reviewer reads on the version's page: the description (markdown: the
        evaluation table) and tags (links to the report, plots and videos, fingerprints)."""
        name = self.model_name(game)
        if description is not None:
            description = redact_uri(description)
            self.client.update_model_version(name, str(version), description=description)
        for key, value in (tags or {}).items():
            text = redact_uri(str(value))[:_MAX_TAG]
            self.client.set_model_version_tag(name, str(version), key, text)

    def _history(self, name: str) -> list[int]:
        model = self.client.get_registered_model(name)
        raw = (model.tags or {}).get(HISTORY_TAG)
        history = [int(v) for v in json.loads(raw)] if raw else []
        current = (model.aliases or {}).get(CHAMPION)
        # Keep the list honest if someone moved the alias by hand.
        if current is not None and (not history or history[-1] != int(current)):
            previous = (model.aliases or {}).get(PREVIOUS_CHAMPION)
            if not history and previous is not None:
                history.append(int(previous))
            history.append(int(current))
        return history

    def _save_history(self, name: str, history: list[int]) -> None:
        self.client.set_registered_model_tag(
            name, HISTORY_TAG, json.dumps(history[-_HISTORY_KEEP:])
        )
        if len(history) >= 2:
            self.client.set_registered_model_alias(name, PREVIOUS_CHAMPION, str(history[-2]))
        else:
            self._drop_alias(name, PREVIOUS_CHAMPION)

    def _drop_alias(self, name: str, alias: str) -> None:
        from mlflow.exceptions import MlflowException

        with contextlib.suppress(MlflowException):  # already absent is fine
            self.client.delete_registered_model_alias(name, alias)

    # -- the gate -------------------------------------------------------------------------

    def promote(
        self,
        game: str,
        candidate_scores: Sequence[float],
        champion_scores: Sequence[float] | None = None,
        base_scores: Sequence[float] | None = None,
        margin: float | None = None,
        alpha: float | None = None,
        *,
        candidate_version: int | None = None,
    ) -> PromotionDecision:
        """Decide on the candidate (the ``candidate`` alias unless a version is given) from
        per-episode progress on one evaluation suite: against the champion's scores, or, when
        the game has no champion yet, against the base model's. Tags the decision on the
        candidate version and, if it wins, moves ``champion`` (the old one becomes
        ``champion-previous``)."""
        rules: PromotionSettings = self.settings.promotion
        margin = rules.margin if margin is None else margin
        alpha = rules.alpha if alpha is None else alpha
        name = self.model_name(game)
        if candidate_version is None:
            candidate_version = self.candidate(game)
            if candidate_version is None:
                raise RegistryError(f"{name} has no '{CANDIDATE}' alias; pass a version")
        self.client.get_model_version(name, str(candidate_version))  # must exist
        champion = self.champion(game)
        if champion == candidate_version:
            raise RegistryError(f"{name} version {candidate_version} is already the champion")
        if champion is not None:
            if champion_scores is None:
                raise RegistryError(
                    f"{name} has champion version {champion}: its scores on the same "
                    "evaluation suite are needed"
                )
            gate = welch_gate(
                candidate_scores,
                champion_scores,
                margin=margin,
                alpha=alpha,
                min_samples=rules.min_samples,
                reference="champion",
            )
        else:
            if base_scores is None:
                raise RegistryError(
                    f"{name} has no champion yet: the base model's scores are needed"
                )
            gate = welch_gate(
                candidate_scores,
                base_scores,
                margin=margin,
                alpha=alpha,
                min_samples=rules.min_samples,
                reference="base",
            )
        tags = gate.tags()
        tags["promotion.decided_at"] = datetime.now(UTC).isoformat()
        tags["promotion.reference_version"] = str(champion) if champion is not None else "base"
        for key, value in tags.items():
            self.client.set_model_version_tag(name, str(candidate_version), key, value)
        new_champion = champion
        if gate.promoted:
            history = self._history(name)
            history.append(candidate_version)
            self.client.set_registered_model_alias(name, CHAMPION, str(candidate_version))
            self._save_history(name, history)
            if self.candidate(game) == candidate_version:
                self._drop_alias(name, CANDIDATE)  # decided: no longer waiting
            new_champion = candidate_version
        return PromotionDecision(name, candidate_version, champion, new_champion, gate)

    def rollback(self, game: str) -> RollbackResult:
        """Make the previous champion the champion again."""
        name = self.model_name(game)
        history = self._history(name)
        if len(history) < 2:
            raise RegistryError(f"{name} has no previous champion to roll back to")
        demoted = history.pop()
        target = history[-1]
        now = datetime.now(UTC).isoformat()
        self.client.set_registered_model_alias(name, CHAMPION, str(target))
        self._save_history(name, history)
        self.client.set_model_version_tag(name, str(demoted), "rollback.demoted_at", now)
        self.client.set_model_version_tag(name, str(demoted), "rollback.replaced_by", str(target))
        self.client.set_model_version_tag(name, str(target), "rollback.restored_at", now)
        return RollbackResult(name, demoted, target, history[-2] if len(history) >= 2 else None)

    # -- views ----------------------------------------------------------------------------

    def list_models(self, game: str | None = None) -> list[dict[str, Any]]:
        """One summary per registered model (all of this prefix, or one game's)."""
        prefix = self.settings.tracking.model_prefix
        flt = f"name = '{self.model_name(game)}'" if game else f"name LIKE '{prefix}-%'"
        out = []
        token = None
        while True:
            page = self.client.search_registered_models(
                filter_string=flt, max_results=100, page_token=token
            )
            for model in page:
                aliases = {k: int(v) for k, v in (model.aliases or {}).items()}
                versions = self.client.search_model_versions(
                    f"name = '{model.name}'", max_results=10_000
                )
                latest = max((int(mv.version) for mv in versions), default=None)
                out.append(
                    {
                        "name": model.name,
                        "game": (model.tags or {}).get(GAME_TAG),
                        "latest_version": latest,
                        "aliases": aliases,
                        "champion_history": json.loads((model.tags or {}).get(HISTORY_TAG) or "[]"),
                    }
                )
            token = page.token
            if not token:
                break
        return sorted(out, key=lambda m: m["name"])

    def show(self, game: str) -> dict[str, Any]:
        """The model with every version, its aliases, source and decision tags."""
        name = self.model_name(game)
        summary = self.list_models(game)
        if not summary:
            raise RegistryError(f"no registered model {name}")
        versions = self.client.search_model_versions(f"name = '{name}'", max_results=10_000)
        info = summary[0]
        by_version: dict[int, list[str]] = {}
        for alias, version in info["aliases"].items():
            by_version.setdefault(version, []).append(alias)
        rows = []
        for mv in versions:
            row = _version_dict(mv)
            row["aliases"] = sorted(by_version.get(row["version"], []))
            rows.append(row)
        info["versions"] = sorted(rows, key=lambda v: v["version"])
        return info
