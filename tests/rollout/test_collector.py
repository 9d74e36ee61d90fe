"""The one Collector on the tiny Qwen3-VL and real odland levels: episodes, levels, masks,
behaviour log-probs, determinism, turn budgets, save states, failures and metrics."""

from __future__ import annotations

import math

import model_fixtures
import numpy as np
import pytest
import torch
from helpers_batches import facts_batch

from odyssey_core.envs.vector import SubprocVectorEnv, SyncVectorEnv
from odyssey_core.policy import GenerationParams
from odyssey_core.protocol.formats import RESPONSE_FORMATS
from odyssey_core.recipes.odysseus.train import gameboy_info_extras
from odyssey_core.rollout.batch import TurnBatch
from odyssey_core.rollout.collector import (
    Collector,
    EpisodeBudget,
    EpisodeStart,
    TurnBudget,
    episode_seed,
    split_level,
)
from odyssey_core.rollout.metrics import RolloutMetrics

tiny_model_dir = model_fixtures.tiny_model_dir
tiny_policy = model_fixtures.tiny_policy

PARAMS = GenerationParams(temperature=1.0, max_new_tokens=10, seed=11)
MAX_TURNS = 3
LEVELS = ["odland-1-1", "odland-1-2", "1-2", "odland-1-1", "1-1"]
SEED = 5


@pytest.fixture(scope="module")
def sync_envs():
    with SyncVectorEnv(["odland-1-1"] * 2) as envs:
        yield envs


ODYSSEUS = RESPONSE_FORMATS.get("odysseus")


def odland_collector(envs, policy, max_turns: int = MAX_TURNS) -> Collector:
    return Collector(
        envs,
        policy,
        PARAMS,
        max_turns=max_turns,
        response_format=ODYSSEUS,
        info_extras=gameboy_info_extras,
    )


@pytest.fixture(scope="module")
def collector(sync_envs, tiny_policy) -> Collector:
    return odland_collector(sync_envs, tiny_policy)


@pytest.fixture(scope="module")
def collected(collector) -> tuple[TurnBatch, RolloutMetrics]:
    return collector.collect(len(LEVELS), levels=LEVELS, seed=SEED)


def assert_same_batch(a: TurnBatch, b: TurnBatch) -> None:
    assert torch.equal(a.episode_ids, b.episode_ids)
    assert torch.equal(a.turn_index, b.turn_index)
    assert torch.equal(a.rewards, b.rewards) and torch.equal(a.dones, b.dones)
    assert a.levels == b.levels and a.extras == b.extras
    for name in ("prompt_ids", "response_ids", "thought_mask", "action_mask"):
        for x, y in zip(getattr(a, name), getattr(b, name), strict=True):
            assert torch.equal(x, y), name
    for x, y in zip(a.behaviour_logprobs, b.behaviour_logprobs, strict=True):
        assert torch.allclose(x, y, atol=1e-6)
    for x, y in zip(a.frames, b.frames, strict=True):
        assert np.array_equal(x, y)


def test_collects_exactly_the_requested_complete_episodes(collected) -> None:
    batch, _ = collected
    batch.validate()
    assert batch.num_episodes == len(LEVELS)
    assert torch.unique_consecutive(batch.episode_ids).tolist() == list(range(len(LEVELS)))
    for part in batch.episode_slices():
        length = part.stop - part.start
        assert 1 <= length <= MAX_TURNS
        assert batch.turn_index[part].tolist() == list(range(length))
        last = batch.extras[part.stop - 1]
        # an episode ends because the env said so or because the collector cut it at MAX_TURNS
        assert last["terminated"] or last["truncated"] or (last["cut"] and length == MAX_TURNS)


def test_levels_and_env_seeds_follow_the_request(collected) -> None:
    batch, metrics = collected
    wanted = ["odland-" + split_level(level)[1] for level in LEVELS]
    for k, part in enumerate(batch.episode_slices()):
        assert set(batch.levels[part]) == {wanted[k]}
        assert {e["env_seed"] for e in batch.extras[part]} == {episode_seed(SEED, k)}
    assert set(metrics.per_level) == {"odland-1-1", "odland-1-2"}
    assert metrics.per_level["odland-1-2"].episodes == 2
    assert metrics.per_level["odland-1-1"].episodes == 3


def test_done_only_on_each_episodes_last_turn(collected) -> None:
    batch, _ = collected
    expected = torch.zeros(len(batch), dtype=torch.bool)
    for part in batch.episode_slices():
        expected[part.stop - 1] = True
    assert torch.equal(batch.dones, expected)


def test_masks_and_logprobs_align_with_the_response_tokens(collected, tiny_policy) -> None:
    batch, _ = collected
    tokenizer = tiny_policy.tokenizer
    for i in range(len(batch)):
        n = batch.response_ids[i].numel()
        assert n == batch.extras[i]["response_tokens"] >= 1
        assert batch.thought_mask[i].numel() == batch.action_mask[i].numel() == n
        assert batch.behaviour_logprobs[i].numel() == n
        assert bool((batch.behaviour_logprobs[i] <= 0).all())
        text = batch.extras[i]["response"]
        thought, action = ODYSSEUS.token_masks(text, batch.response_ids[i].tolist(), tokenizer, {})
        assert batch.thought_mask[i].tolist() == thought
        assert batch.action_mask[i].tolist() == action


def test_behaviour_logprobs_match_a_fresh_score(collected, tiny_policy) -> None:
    batch, _ = collected
    rows = [0, len(batch) // 2, len(batch) - 1]  # different episodes, levels and turns
    scored = tiny_policy.score(
        [batch.prompt_ids[i].tolist() for i in rows],
        [batch.response_ids[i].tolist() for i in rows],
        [batch.frames[i] for i in rows],
        temperature=PARAMS.temperature,
    )
    for i, fresh in zip(rows, scored, strict=True):
        torch.testing.assert_close(fresh, batch.behaviour_logprobs[i], atol=1e-4, rtol=0)


def test_same_seed_same_batch_other_seed_other_batch(collector, collected) -> None:
    batch, _ = collected
    again, _ = collector.collect(len(LEVELS), levels=LEVELS, seed=SEED)
    assert_same_batch(batch, again)
    other, _ = collector.collect(len(LEVELS), levels=LEVELS, seed=SEED + 1)
    assert [r.tolist() for r in other.response_ids] != [r.tolist() for r in batch.response_ids]


def test_fresh_envs_replay_the_first_turn_like_later_episodes(tiny_policy) -> None:
    with SyncVectorEnv(["odland-1-1"]) as envs:
        collector = odland_collector(envs, tiny_policy, max_turns=2)
        first, _ = collector.collect(1, seed=0)
        second, _ = collector.collect(1, seed=0)
    assert_same_batch(first, second)


def test_metrics_match_a_hand_count_from_the_extras(collected) -> None:
    batch, metrics = collected
    flat = metrics.as_dict()
    assert all(isinstance(v, float) for v in flat.values())
    for level in ("odland-1-1", "odland-1-2"):
        rows = [i for i, name in enumerate(batch.levels) if name == level]
        ends = [i for i in rows if bool(batch.dones[i])]
        turns = [batch.extras[i] for i in rows]
        assert flat[f"{level}/episodes"] == len(ends)
        assert flat[f"{level}/turns"] == len(rows)
        assert flat[f"{level}/length_mean"] == pytest.approx(len(rows) / len(ends))
        assert flat[f"{level}/progress_mean"] == pytest.approx(
            sum(batch.extras[i]["progress"] for i in ends) / len(ends)
        )
        assert flat[f"{level}/max_progress"] == batch.extras[ends[0]]["max_progress"]
        assert flat[f"{level}/invalid_rate"] == pytest.approx(
            sum(t["invalid_action"] for t in turns) / len(turns)
        )
        assert flat[f"{level}/response_tokens_mean"] == pytest.approx(
            sum(batch.response_ids[i].numel() for i in rows) / len(rows)
        )
        assert flat[f"{level}/return_mean"] == pytest.approx(
            float(batch.rewards[rows].sum()) / len(ends)
        )
        goals = sum(batch.extras[i]["goal_reached"] for i in ends)
        deaths = sum(batch.extras[i]["life_lost"] for i in ends)
        assert flat[f"{level}/goal_rate"] == goals / len(ends)
        assert flat[f"{level}/death_rate"] == deaths / len(ends)
    assert flat["all/episodes"] == len(LEVELS) and flat["all/turns"] == len(batch)
    assert "all/max_progress" not in flat  # two levels: no single goal progress
    assert flat["time/total_s"] > 0


def test_invalid_format_rate_of_the_random_model(collected) -> None:
    batch, metrics = collected
    share = sum(e["invalid_action"] for e in batch.extras) / len(batch)
    assert metrics.overall.invalid_rate == pytest.approx(share)
    assert share >= 0.8  # random weights almost never write a legal <answer>
    for extras in batch.extras:
        if extras["invalid_action"]:
            assert extras["buttons"] == ["noop"]  # the env's default fallback was pressed


def test_fewer_episodes_than_envs_leaves_envs_idle(collector) -> None:
    batch, metrics = collector.collect(1, levels=["odland-1-2"], seed=0)
    assert batch.num_episodes == 1 and set(batch.levels) == {"odland-1-2"}
    assert metrics.overall.episodes == 1


def test_bad_level_requests_are_refused(collector) -> None:
    with pytest.raises(ValueError, match="levels for"):
        collector.collect(2, levels=["odland-1-1"], seed=0)
    with pytest.raises(ValueError, match="mario"):
        collector.collect(1, levels=["mario-1-1"], seed=0)


def test_subproc_and_sync_runners_give_the_same_batch(tiny_policy) -> None:
    """Two worker processes, levels from a start function, and the env's own turn limit (2)."""

    def start(k: int) -> EpisodeStart:
        return EpisodeStart(level=["odland-1-1", "odland-2-1"][k % 2])

    results = []
    for runner in (SubprocVectorEnv, SyncVectorEnv):
        with runner(["odland-1-1"] * 2, env_kwargs={"max_turns": 2}) as envs:
            collector = odland_collector(envs, tiny_policy, max_turns=4)
            results.append(collector.collect(3, seed=3, starts=start))
    (batch, metrics), (reference, _) = results
    assert_same_batch(batch, reference)
    assert batch.num_episodes == 3
    assert set(batch.levels) <= {"odland-1-1", "odland-2-1"}
    for part in batch.episode_slices():
        last = batch.extras[part.stop - 1]
        assert part.stop - part.start == 2 and last["truncated"] and not last["cut"]
    assert metrics.overall.length_mean == 2.0


def test_metrics_count_goals_and_deaths() -> None:
    """A hand-made batch: one goal, one death, one cut episode, on two levels."""
    outcomes = [  # (level, length, final progress, goal, death)
        ("odland-1-1", 2, 900.0, True, False),
        ("odland-1-1", 1, 40.0, False, True),
        ("odland-1-2", 3, 100.0, False, False),
    ]
    rows: dict[str, list] = {k: [] for k in ("ids", "turns", "levels", "extras", "ends")}
    for k, (level, length, progress, goal, death) in enumerate(outcomes):
        for t in range(length):
            last = t == length - 1
            rows["ids"].append(k)
            rows["turns"].append(t)
            rows["levels"].append(level)
            rows["ends"].append(last)
            rows["extras"].append(
                {
                    "progress": progress if last else 0.0,
                    "max_progress": 904.0 if level == "odland-1-1" else 1328.0,
                    "goal_reached": goal and last,
                    "life_lost": death and last,
                    "invalid_action": t == 0,
                    "response_tokens": 4,
                    "finish_reason": "length",
                }
            )
    n = len(rows["ids"])
    batch = facts_batch(
        rows["ids"],
        rows["turns"],
        rows["levels"],
        rows["extras"],
        torch.ones(n),
        torch.tensor(rows["ends"]),
    )
    metrics = RolloutMetrics.from_batch(batch)
    level_1 = metrics.per_level["odland-1-1"]
    assert (level_1.episodes, level_1.turns, level_1.length_mean) == (2, 3, 1.5)
    assert level_1.goal_rate == 0.5 and level_1.death_rate == 0.5
    assert level_1.progress_mean == 470.0 and level_1.progress_best == 900.0
    assert level_1.max_progress == 904.0
    assert math.isclose(level_1.progress_frac_mean, (900 / 904 + 40 / 904) / 2)
    assert level_1.invalid_rate == pytest.approx(2 / 3) and level_1.return_mean == 1.5
    assert metrics.overall.goal_rate == pytest.approx(1 / 3)
    assert metrics.overall.death_rate == pytest.approx(1 / 3)
    assert metrics.overall.invalid_rate == pytest.approx(3 / 6)
    assert metrics.overall.length_finish_rate == 1.0
    assert metrics.as_dict()["odland-1-2/progress_mean"] == 100.0


# -- turn budgets, save states, failures, env-driven play ----------------------------------------


def test_a_turn_budget_auto_resets_and_truncates_the_running_episodes(tiny_policy) -> None:
    """Two envs, 7 turns -> 4 rounds each; episodes of at most 3 turns restart at once."""
    with SyncVectorEnv(["odland-1-1"] * 2) as envs:
        batch, metrics = odland_collector(envs, tiny_policy).collect(TurnBudget(7), seed=2)
    assert len(batch) == 8  # rounded up to whole rounds
    batch.validate()
    assert batch.num_episodes >= 3  # every env restarted after its first cut episode
    for part in batch.episode_slices():
        last = part.stop - 1
        assert bool(batch.terminated[last]) != bool(batch.truncated[last])
        if batch.truncated[last]:
            assert batch.next_observations[last] is not None
            assert batch.next_observations[last].image.shape == batch.frames[last].shape
        assert all(batch.next_observations[i] is None for i in range(part.start, last))
    assert metrics.overall.turns == 8


def test_episodes_start_from_given_save_states(tiny_policy) -> None:
    from odyssey_core.envs.registry import make_env

    env = make_env("odland-1-1")
    env.reset(seed=0)
    for _ in range(12):  # run right for a while, then save
        observation, *_ = env.step("<answer>['right']</answer>")
    state = env.save_state()
    env.close()
    with SyncVectorEnv(["odland-1-1"]) as envs:
        collector = odland_collector(envs, tiny_policy, max_turns=1)
        from_state, _ = collector.collect(1, seed=0, starts=[EpisodeStart(state=state)])
        from_start, _ = collector.collect(1, seed=0)
    assert np.array_equal(from_state.frames[0], observation.image)
    assert not np.array_equal(from_start.frames[0], observation.image)


class _Recorder:
    def __init__(self) -> None:
        self.starts, self.turns, self.ends = [], [], {}

    def on_start(self, episode, begin) -> None:
        self.starts.append(episode)

    def on_turn(self, episode, outcome) -> None:
        self.turns.append((episode, outcome.generation))

    def on_end(self, episode, error) -> None:
        self.ends[episode] = error


def test_env_driven_play_and_tolerated_failures(tiny_policy) -> None:
    """With no policy the envs act on their own; a failing generate ends only its episodes."""
    import functools

    from odyssey_core.envs.registry import make_env
    from odyssey_core.eval.agents import agent_driven_env_fn

    driven = agent_driven_env_fn(functools.partial(make_env, "odland-1-1"), "random", {})
    with SyncVectorEnv([driven] * 2) as envs:
        recorder = _Recorder()
        Collector(envs, None, PARAMS, max_turns=2).play(EpisodeBudget(3), recorder, seed=0)
        assert recorder.starts == [0, 1, 2] and set(recorder.ends.values()) == {None}
        assert all(g is None for _, g in recorder.turns) and len(recorder.turns) == 6
    with SyncVectorEnv(["odland-1-1"] * 2) as envs:

        class Broken:
            tokenizer = tiny_policy.tokenizer

            def generate(self, observations, params):
                raise ConnectionError("teacher API is down")

        recorder = _Recorder()
        Collector(envs, Broken(), PARAMS, max_turns=2).play(
            EpisodeBudget(3), recorder, seed=0, tolerate_failures=True
        )
        # every episode got its end, the third too (started after the first two failed)
        assert recorder.starts == [0, 1, 2] and sorted(recorder.ends) == [0, 1, 2]
        assert all("ConnectionError: teacher API is down" in e for e in recorder.ends.values())
        with pytest.raises(ConnectionError):
            Collector(envs, Broken(), PARAMS, max_turns=2).play(EpisodeBudget(1), _Recorder())


class _FlakyEnv:
    """An odland env whose every third reset raises, as a broken save state would."""

    def __init__(self) -> None:
        from odyssey_core.envs.registry import make_env

        self.env, self.resets = make_env("odland-1-1"), 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        if self.resets % 3 == 0:
            raise RuntimeError("corrupt save state")
        return self.env.reset(seed=seed, options=options)


def test_a_failed_reset_ends_only_its_episode_and_the_env_plays_on(tiny_policy) -> None:
    with SyncVectorEnv([_FlakyEnv]) as envs:
        recorder = _Recorder()
        Collector(envs, tiny_policy, PARAMS, max_turns=1).play(
            EpisodeBudget(5), recorder, seed=0, tolerate_failures=True
        )
    assert sorted(recorder.ends) == [0, 1, 2, 3, 4]  # every episode reported once
    assert "corrupt save state" in recorder.ends[2] and recorder.ends[0] is None
    assert recorder.starts == [0, 1, 3, 4]  # episode 2 never started; the env went on
