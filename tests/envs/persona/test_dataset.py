"""Dataset generation and folders (byte-identical for one seed, 8:1:1 splits, the paper's
counts) and the SmartSpot-style loader's rescaling of points and boxes."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from odyssey_core.envs.persona.app import PersonaApp
from odyssey_core.envs.persona.dataset import (
    PRESETS,
    SmartSpotFormatError,
    assign_splits,
    content_hash,
    generate_episodes,
    load_smartspot,
    load_step_image,
    read_dataset,
    read_manifest,
    write_dataset,
)
from odyssey_core.envs.persona.env import PersonaEnv
from odyssey_core.envs.persona.render import FastRenderer
from odyssey_core.envs.persona.users import TOP_M, User


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_the_same_seed_writes_a_byte_identical_folder(tmp_path: Path) -> None:
    a = write_dataset(tmp_path / "a", generate_episodes("tiny", 3), preset="tiny", seed=3)
    b = write_dataset(tmp_path / "b", generate_episodes("tiny", 3), preset="tiny", seed=3)
    files = _files(a)
    assert files == _files(b)
    pngs = [name for name in files if name.endswith(".png")]
    assert len(pngs) == sum(len(e.steps) for e in read_dataset(a))
    manifest = read_manifest(a)
    assert manifest["content_hash"] == content_hash(a)
    assert manifest["preset"] == "tiny" and manifest["seed"] == 3 and manifest["episodes"] == 14
    assert manifest["splits"] == {"train": 12, "val": 1, "test": 1}
    assert manifest["channels"] == dict.fromkeys(sorted(manifest["channels"]), 2)
    other = write_dataset(tmp_path / "c", generate_episodes("tiny", 4), preset="tiny", seed=4)
    assert read_manifest(other)["content_hash"] != manifest["content_hash"]
    with pytest.raises(FileExistsError):
        write_dataset(a, generate_episodes("tiny", 3))


def test_a_folder_reads_back_as_the_same_records_and_screenshots(tmp_path: Path) -> None:
    episodes = generate_episodes("tiny", 0)
    folder = write_dataset(tmp_path / "d", episodes)
    assert read_dataset(folder) == episodes
    assert read_dataset(folder, split="val") == [e for e in episodes if e.split == "val"]
    step = episodes[2].steps[4]
    image = load_step_image(folder, step)
    assert np.array_equal(image, FastRenderer().render(step.screen))  # PNG is lossless
    (folder / "episodes.jsonl").write_text('{"episode_id": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"episodes.jsonl:1: not an episode record"):
        read_dataset(folder)


def test_smartspot_like_has_the_papers_shape() -> None:
    episodes = generate_episodes("smartspot_like", 0)
    assert len(episodes) == 122
    assert Counter(e.split for e in episodes) == {"train": 98, "val": 12, "test": 12}
    by_channel = Counter(e.channel for e in episodes)  # per channel: test_statistics.py
    assert len(by_channel) == 7
    for channel in by_channel:  # every channel is in every split
        assert {e.split for e in episodes if e.channel == channel} == {"train", "val", "test"}
    steps = sum(len(e.steps) for e in episodes)
    assert 15.5 <= steps / len(episodes) <= 18.0  # SmartSpot: 1713 steps / 102 episodes
    assert {(e.width, e.height) for e in episodes} == {(448, 896)}
    assert any(s.detour for e in episodes for s in e.steps)

    paper = generate_episodes("smartspot_like", 0, exclude_channels=("medicine",))
    assert len(paper) == 102
    assert paper == generate_episodes("smartspot_like", 0, drop_channel="medicine")
    assert Counter(e.split for e in paper) == {"train": 82, "val": 10, "test": 10}
    kept = {e.episode_id: e.steps for e in episodes}
    assert all(e.steps == kept[e.episode_id] for e in paper)  # the other episodes do not change
    with pytest.raises(ValueError, match="cannot drop"):
        generate_episodes("tiny", 0, drop_channel="cars")


def test_assign_splits_takes_val_then_test_from_each_channels_end_in_turn() -> None:
    channels = ["a"] * 10 + ["b"] * 10
    # n = 20: 2 val and 2 test; a9 and b9 (last of each) are val, a8 and b8 test
    expected = ["train"] * 20
    expected[9], expected[19], expected[8], expected[18] = "val", "val", "test", "test"
    assert assign_splits(channels) == expected
    assert assign_splits(["a"] * 4) == ["train"] * 4  # round(0.4) = 0


def _screenshot(path: Path, size: tuple[int, int], red: tuple[int, int, int, int]) -> None:
    """A grey screenshot with a red rectangle (inclusive corners ``red``)."""
    pixels = np.full((size[1], size[0], 3), 200, np.uint8)
    x0, y0, x1, y1 = red
    pixels[y0 : y1 + 1, x0 : x1 + 1] = (255, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def _smartspot_folder(root: Path, steps: list[dict] | None = None) -> Path:
    _screenshot(root / "shots" / "0.png", (1080, 2400), (100, 200, 300, 400))
    _screenshot(root / "shots" / "1.png", (540, 1200), (250, 280, 290, 320))
    steps = steps or [
        {
            "screenshot": "shots/0.png",
            "action": "click",
            "point": [540, 1200],
            "bbox": [100, 200, 300, 400],
        },
        {
            "screenshot": "shots/1.png",
            "action": "type",
            "point": [270, 300],
            "input_text": "New York",
        },
        {"screenshot": "shots/0.png", "action": "click", "bbox": [100, 200, 300, 400]},
        {"screenshot": "shots/1.png", "action": "complete", "input_text": "a hotel in New York"},
        {
            "screenshot": "shots/0.png",
            "action": "recommendation",
            "candidate": "h1",
            "label": "Yes",
        },
        {
            "screenshot": "shots/1.png",
            "action": "recommendation",
            "candidate": "h2",
            "label": "no",
            "stage": "recommend",
        },
    ]
    episode = {
        "episode_id": "ep1",
        "channel": "hotel",
        "request": "Any hotels in New York?",
        "steps": steps,
    }
    (root / "episodes.json").write_text(json.dumps({"episodes": [episode]}), encoding="utf-8")
    return root


def test_load_smartspot_rescales_every_point_and_box(tmp_path: Path) -> None:
    episodes, images = load_smartspot(_smartspot_folder(tmp_path / "raw"), 448, 896)
    (episode,) = episodes
    click, typed, boxed, pool, yes, no = episode.steps
    # 1080 x 2400 -> 448 x 896: x * 448/1080, y * 896/2400
    assert click.gold.point == (224, 448)  # 540 * .4148 = 224, 1200 * .3733 = 448
    assert click.target_box == (41, 75, 124, 149)  # 41.48, 74.67, 124.44, 149.33 rounded
    # 540 x 1200 -> 448 x 896: (270, 300) -> (224, 224); no bbox: a square of 2% of the width
    assert typed.gold.point == (224, 224) and typed.gold.text == "New York"
    assert typed.target_box == (215, 215, 233, 233)  # 224 -/+ round(0.02 * 448) = 9
    assert boxed.gold.point == ((41 + 124) // 2, (75 + 149) // 2)  # no point: the box centre
    assert (pool.stage, pool.gold.action, episode.intent) == (
        "pool",
        "pool_found",
        "a hotel in New York",
    )
    assert (yes.gold.text, no.gold.text, episode.yes_items) == ("Yes", "No", ("h1",))
    # the screenshots are resized the same way: the red box lands on the rescaled box
    shot = images[click.image]
    assert shot.shape == (896, 448, 3) and shot.dtype == np.uint8
    assert tuple(shot[112, 82]) == (255, 0, 0)  # the middle of (41, 75, 124, 149)
    assert tuple(shot[160, 82]) == (200, 200, 200)  # below it
    assert tuple(images[typed.image][224, 224]) == (255, 0, 0)  # (270, 300) was in the red box

    # a dataset folder of the loaded data replays in the env with the rescaled targets
    folder = write_dataset(tmp_path / "ds", episodes, images=images)
    env = PersonaEnv(dataset=folder, split=episode.split)
    observation, _ = env.reset(options={"episode": "ep1"})
    assert np.array_equal(observation.image, shot)
    _, _, _, _, info = env.step(click.gold)
    assert info["target_box"] == [41, 75, 124, 149] and info["gold"]["point"] == [224, 448]
    env.close()


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (
            {"screenshot": "shots/none.png", "action": "exit"},
            r"step 0: cannot read screenshot .*none.png",
        ),
        (
            {"screenshot": "shots/0.png", "action": "click"},
            r"step 0: a click needs a 'point' or a 'bbox'",
        ),
        (
            {"screenshot": "shots/0.png", "action": "click", "point": [5]},
            r"step 0: point must be a list of 2",
        ),
        (
            {"screenshot": "shots/0.png", "action": "click", "point": [2000, 5]},
            r"off the \(1080, 2400\)",
        ),
        ({"screenshot": "shots/0.png", "action": "click", "bbox": [9, 9, 1, 1]}, "is not"),
        ({"screenshot": "shots/0.png", "action": "swipe"}, r"unknown action 'swipe'"),
        ({"screenshot": "shots/0.png", "action": "exit", "stage": "pool"}, "does not fit"),
        ({"action": "exit"}, r"missing 'screenshot'"),
    ],
)
def test_load_smartspot_names_the_file_and_the_fault(
    tmp_path: Path, step: dict, message: str
) -> None:
    root = _smartspot_folder(tmp_path, [step])
    with pytest.raises(SmartSpotFormatError, match=message) as caught:
        load_smartspot(root, 448, 896)
    assert "episodes.json: episode 0 (ep1)" in str(caught.value)


def test_load_smartspot_rejects_bad_labels_and_pools(tmp_path: Path) -> None:
    shot = {"screenshot": "shots/0.png"}
    maybe = [
        {**shot, "action": "pool_found", "input_text": "x"},
        {**shot, "action": "recommendation", "candidate": "a", "label": "Maybe"},
    ]
    with pytest.raises(SmartSpotFormatError, match="label must be Yes or No"):
        load_smartspot(_smartspot_folder(tmp_path / "a", maybe), 448, 896)
    with pytest.raises(SmartSpotFormatError, match="exactly one pool_found step, has 0"):
        load_smartspot(_smartspot_folder(tmp_path / "b", [{**shot, "action": "exit"}]), 448, 896)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "episodes.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SmartSpotFormatError, match=r"episodes\.json: not JSON"):
        load_smartspot(tmp_path / "c", 448, 896)


def test_gold_search_actions_are_the_first_optimal_move_where_several_are() -> None:
    """Step SR and the step reward score one gold action; where both "focus, then type" and
    "type straight in" are optimal, the gold is always the first (the focusing click)."""
    episodes = generate_episodes("smartspot_like", 0)
    several = 0
    for episode in episodes:
        for step in episode.stage_steps("search"):
            if step.detour:
                continue
            several += len(step.optimal) > 1
            assert (step.gold.action, step.target_id) == step.optimal[0], (
                episode.episode_id,
                step.index,
            )
    assert several > 100  # the choice does arise
    # the coin is still an option of the preset (and then the gold varies)
    coin = replace(PRESETS["smartspot_like"], type_directly_p=0.5)
    assert any(
        (s.gold.action, s.target_id) != s.optimal[0]
        for e in generate_episodes(coin, 0)
        for s in e.stage_steps("search")
        if not s.detour
    )


def visible_labels(episode) -> list[str]:
    """The labels as the agent can decide them: Yes iff the candidate meets every explicit
    slot (what the search typed and chose) and is among the TOP_M best of the listed items
    meeting them by the preference the intent names; nothing about the user beyond that."""
    user = User.from_json(episode.scenario["user"])
    app = PersonaApp(episode.scenario, episode.width, episode.height)
    listed = [app.item(c) for c in episode.candidates]  # the pool screen, one card each
    meeting = [i for i in listed if user.meets(user.pool_app, i)]
    assert meeting == listed  # the search's slots are what the list filters on
    best = [i.id for i in user.preference(user.pool_app).rank(meeting)[:TOP_M]]
    assert user.preference(user.pool_app).phrase in episode.intent
    return ["Yes" if s.candidate in best else "No" for s in episode.stage_steps("recommend")]


def test_yes_no_labels_follow_from_what_the_agent_is_shown() -> None:
    episodes = generate_episodes("smartspot_like", 0)
    for episode in episodes:
        gold = [s.gold.text for s in episode.stage_steps("recommend")]
        assert gold == visible_labels(episode), episode.episode_id
    labels = Counter(s.gold.text for e in episodes for s in e.stage_steps("recommend"))
    assert set(labels) == {"Yes", "No"}
    assert {User.from_json(e.scenario["user"]).top_m for e in episodes} == {TOP_M}
