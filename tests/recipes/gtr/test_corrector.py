"""GTR correctors (programmatic and OpenAI-compatible against a stub server), their preset
settings, and rewards."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import numpy as np
import pytest
from helpers_chat import ChatReply, ChatRequest, FakeChatServer

from odyssey_core.envs.base import Observation
from odyssey_core.envs.cards.games import (
    BlackjackEnv,
    EZPointsEnv,
    NumberlineEnv,
    Points24Env,
)
from odyssey_core.policy.openai_backend import RetrySettings
from odyssey_core.protocol.gtr_format import format_gtr_response, parse_gtr_response
from odyssey_core.recipes.gtr.corrector import (
    CORRECTOR_GAMES,
    CORRECTORS,
    Correction,
    CorrectorConfigError,
    EpisodeMemory,
    OpenAICorrector,
    StepToCorrect,
    build_corrector,
    check_corrector,
    claimed_formula,
    corrector_query,
    corrector_system_prompt,
    describe_corrector,
    make_corrector,
    parse_correction_json,
    solve24_tool,
)
from odyssey_core.recipes.gtr.dagger import DaggerBuffer
from odyssey_core.recipes.gtr.rewards import (
    EpisodeGuard,
    GTRRewardConfig,
    GTRWrapper,
    format_reward,
)

CARDS = ["QS", "3H", "4D", "2C"]


def points24(cards: list[str] = CARDS, typed: str = "") -> tuple[Any, Any, dict[str, Any]]:
    env = Points24Env()
    obs, info = env.reset(seed=0, options={"cards": cards})
    for token in typed.split():
        obs, _, _, _, info = env.step(token)
    return env, obs, info


# ------------------------------------------------------------------------------ programmatic
def test_programmatic_points24() -> None:
    corrector = make_corrector("programmatic")
    _, obs, info = points24(typed="10 +")
    good = '"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2", "thoughts": "next 3"'
    result = corrector.correct(obs, good, "3", info)
    assert result.agrees and result.solvable and result.action == "3"
    assert result.target_formula == "10+3*4+2" and "CORRECT" in result.evaluation
    # misread cards, a wrong plan and an off-track action: all flagged, then corrected
    bad = '"cards": ["K", "5", "4", "2"], "formula": "10+5*4", "thoughts": "..."'
    result = corrector.correct(obs, bad, "*", info)
    assert not result.agrees and result.details == {
        "cards_ok": False,
        "formula_ok": False,
        "action_ok": False,
    }
    assert result.solvable and result.action in {"3", "4", "2", "("}
    assert '"cards": ["Q", "3", "4", "2"]' in result.corrected_thought
    response = result.as_response()
    assert response is not None
    assert parse_gtr_response(response, info["legal_actions"]).action == result.action
    # a typed prefix that cannot be finished, and a deal with no solution
    _, obs, info = points24(typed="2 - 3")
    dead = corrector.correct(obs, "", "*", info)
    assert dead.solvable is False and not dead.agrees and dead.action is None
    _, obs, info = points24(["AS", "AH", "AD", "AC"])
    assert corrector.correct(obs, "", "1", info).solvable is False
    # a complete formula: the next step is "="; a thought that does not say which cards it
    # read is not a correct one (App. C's question 2 has no answer)
    _, obs, info = points24(typed="10 + 3 * 4 + 2")
    done = corrector.correct(obs, '"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2"', "=", info)
    assert done.agrees and done.action == "=" and done.thought_kept
    unread = corrector.correct(obs, '"formula": "10+3*4+2"', "=", info)
    assert not unread.agrees and unread.details["cards_ok"] is None
    assert unread.action == "=" and '"cards": ["Q", "3", "4", "2"]' in unread.corrected_thought
    assert corrector.metrics()["corrections"] == 6


def test_programmatic_other_games() -> None:
    corrector = make_corrector("programmatic")
    env = EZPointsEnv()
    obs, info = env.reset(seed=0, options={"cards": ["5S", "7H"]})
    assert corrector.correct(obs, '"cards": ["5", "7"], "formula": "5+7"', "5", info).agrees
    assert not corrector.correct(obs, '"cards": ["5", "8"]', "5", info).agrees
    env = NumberlineEnv()
    obs, info = env.reset(seed=0, options={"target": 4, "current": 1})
    assert corrector.correct(obs, "target 4, current 1", "+", info).agrees
    wrong = corrector.correct(obs, "target 2, current 1", "-", info)
    assert not wrong.agrees and wrong.action == "+"
    env = BlackjackEnv()
    obs, info = env.reset(seed=0)
    result = corrector.correct(obs, f"my total is {info['player_total']}", None, info)
    assert result.action in ("hit", "stand") and result.solvable is None
    assert str(info["player_total"]) in result.corrected_thought


def test_correction_json_and_tool() -> None:
    ok = '```json\n{"evaluation": "fine. CORRECT", "corrected_thought": "t", "solvable": true}\n```'
    assert parse_correction_json(ok)["solvable"] is True
    assert parse_correction_json('Sure! {"evaluation": "x", "corrected_thought": "y"} ok')
    assert parse_correction_json('{"evaluation": 3}') is None
    assert parse_correction_json("nope") is None and parse_correction_json(None) is None
    result = json.loads(solve24_tool('{"cards": ["Q", "3", "4", "2"]}'))
    assert result["solvable"] and "10+2+3*4" in result["formulas"]
    assert "error" in json.loads(solve24_tool('{"cards": ["Z"]}'))
    assert "error" in json.loads(solve24_tool("not json"))
    assert set(CORRECTORS.names()) >= {"programmatic", "openai"}


# ------------------------------------------------------------------------------ stub server
class StubAPI(FakeChatServer):
    """A chat-completions server on 127.0.0.1 that plays back scripted assistant messages
    (``{"content": ..., "tool_calls": ...}``), one per request."""

    def __init__(self) -> None:
        super().__init__()
        self.script: deque[dict[str, Any]] = deque()

    def answer(self, request: ChatRequest) -> ChatReply:
        message = self.script.popleft()
        return ChatReply(
            text=message.get("content"),
            tool_calls=message.get("tool_calls"),
            prompt_tokens=1,
            completion_tokens=1,
        )


@pytest.fixture
def stub() -> Any:
    with StubAPI() as api:
        yield api


def _openai(stub: StubAPI) -> OpenAICorrector:
    fast = RetrySettings(max_retries=1, initial_backoff=0.001, max_total_wait=1.0)
    return make_corrector("openai", model="stub-vlm", base_url=stub.url, retry=fast, timeout=10.0)


GOOD = {
    "evaluation": "Cards read right but the action is off. INCORRECT",
    "corrected_thought": '"formula": "10+3*4+2", "thoughts": "append 3", "action": "3"',
    "solvable": True,
}


def test_openai_tool_call_then_json(stub: StubAPI) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "solve24", "arguments": json.dumps({"cards": ["Q", 3, 4, 2]})},
    }
    stub.script.extend([{"content": None, "tool_calls": [call]}, {"content": json.dumps(GOOD)}])
    corrector = _openai(stub)
    _, obs, info = points24(typed="10 +")
    result = corrector.correct(obs, "I will multiply", "*", info)
    assert result.valid and not result.agrees and result.solvable is True
    assert result.action == "3" and result.target_formula == "10+3*4+2"
    assert result.corrected_thought.endswith('"thoughts": "append 3"')
    first, second = stub.bodies
    assert first["tools"][0]["function"]["name"] == "solve24"
    user = first["messages"][1]["content"]
    assert user[0]["image_url"]["url"].startswith("data:image/png;base64,")
    text = user[1]["text"]
    assert "[Current Formula] '10+'" in text and "[Thought] I will multiply" in text
    assert "[Target Formula] NOT DETERMINED" in text  # no memory: every step on its own
    tool_reply = second["messages"][-1]
    assert tool_reply["role"] == "tool" and tool_reply["tool_call_id"] == "call_1"
    assert "10+2+3*4" in json.loads(tool_reply["content"])["formulas"]
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_1"
    metrics = corrector.metrics()
    assert metrics["tool_calls"] == 1 and metrics["malformed"] == 0
    assert metrics["http_requests"] == 2


def test_openai_malformed_then_valid(stub: StubAPI) -> None:
    stub.script.extend(
        [{"content": "The thought looks fine to me!"}, {"content": json.dumps(GOOD)}]
    )
    corrector = _openai(stub)
    _, obs, info = points24()
    result = corrector.correct(obs, "x", "10", info)
    assert result.valid and result.action == "3"
    reminder = stub.bodies[1]["messages"][-1]
    assert reminder["role"] == "user" and "JSON" in reminder["content"]
    metrics = corrector.metrics()
    assert metrics["malformed"] == 1 and metrics["format_retries"] == 1
    assert metrics["no_correction"] == 0


def test_openai_malformed_twice_is_no_correction(stub: StubAPI) -> None:
    stub.script.extend([{"content": "{not json"}, {"content": '{"evaluation": "only"}'}])
    corrector = _openai(stub)
    env = BlackjackEnv()
    obs, info = env.reset(seed=0)
    result = corrector.correct(obs, "hit me", "hit", info)
    assert not result.valid and result.corrected_thought == "" and result.as_response() is None
    assert "tools" not in stub.bodies[0]  # the solver tool is only offered for formula games
    metrics = corrector.metrics()
    assert metrics["malformed"] == 2 and metrics["no_correction"] == 1


# ------------------------------------------------------------------------------ rewards
def test_format_reward_and_guard() -> None:
    legal = ["+", "-"]
    assert format_reward('"action": "+"', legal, value=0.5) == 0.5
    assert format_reward("nothing", legal, value=0.5, penalty=-0.2) == -0.2
    guard = EpisodeGuard(max_repeats=3)
    assert guard.check("s", "a") is None and guard.check("s", "b") is None
    assert guard.check("s", "a") is None and guard.check("s", "a") == "looping"
    lost = Correction("", "t", solvable=False, agrees=False, source="x")
    assert guard.check("t", "a", lost) == "unsolvable"
    assert EpisodeGuard(truncate_unsolvable=False).check("t", "a", lost) is None
    no_answer = Correction("", "", solvable=False, agrees=True, source="x", valid=False)
    assert EpisodeGuard().check("t", "a", no_answer) is None
    guard.reset()
    assert guard.check("s", "a") is None


def test_wrapper_truncates_and_rewards_format() -> None:
    config = GTRRewardConfig(format_reward=0.5, max_repeats=2)
    env = GTRWrapper(Points24Env(), make_corrector("programmatic"), config)
    env.reset(seed=0, options={"cards": CARDS})
    right = '"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2", "action": "10"'
    _, reward, _, truncated, info = env.step(right)
    assert reward == 0.5 and not truncated and info["gtr"]["correction"].agrees
    # an illegal number twice: same state, same action -> looping
    env.step('"action": "5"')
    _, reward, _, truncated, info = env.step('"action": "5"')
    assert reward == -1.0 + 0.5 and truncated and info["gtr"]["truncation"] == "looping"
    # a dead prefix: the corrector sees it at the next step and the episode is cut
    env.reset(seed=0, options={"cards": CARDS})
    env.step('"action": "*"')
    _, _, _, truncated, info = env.step('"action": "2"')
    assert truncated and info["gtr"]["truncation"] == "unsolvable"
    # an unusable answer earns no format reward and is played as a random legal action
    env.reset(seed=0, options={"cards": CARDS})
    _, _, _, _, info = env.step("???")
    assert info["gtr"]["format_reward"] == 0.0 and info["invalid_action"]


# ------------------------------------------------------------------ a correct thought is kept
def test_a_thought_judged_correct_is_kept_not_rewritten() -> None:
    """App. C: "correction: None if the thought is correct": the agent's own thought (and its
    action) is what thought cloning then clones."""
    corrector = make_corrector("programmatic")
    _, obs, info = points24(typed="10 +")
    own = '"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2", "thoughts": "now the 3"'
    kept = corrector.correct(obs, own, "3", info)
    assert kept.agrees and kept.valid and kept.thought_kept
    assert kept.corrected_thought == own and kept.action == "3"
    assert kept.as_response() == format_gtr_response(own, "3")
    wrong = corrector.correct(obs, own.replace("now the 3", "times"), "*", info)
    assert not wrong.thought_kept and wrong.corrected_thought != own
    buffer = DaggerBuffer()
    buffer.add(obs.image, [1], kept, "3", batch=0)
    assert buffer.examples[0].thought == own
    assert corrector.metrics()["kept"] == 1
    # the other games too: a right reading and a sound move keep the thought
    env = NumberlineEnv()
    obs, info = env.reset(seed=0, options={"target": 4, "current": 1})
    said = '"target": 4, "current": 1, "thoughts": "up"'
    assert corrector.correct(obs, said, "+", info).corrected_thought == said


def test_the_programmatic_corrector_keeps_its_target_formula_through_an_episode() -> None:
    corrector = make_corrector("programmatic")
    env, obs, info = points24()
    memory = EpisodeMemory()
    targets = []
    for _ in range(12):
        correction = corrector.correct(obs, "", None, info, memory)
        targets.append(memory.target_formula)
        obs, reward, terminated, _, info = env.step(correction.action)
        if terminated:
            break
    assert terminated and reward == 10.0
    assert len(set(targets)) == 1 and targets[0] is not None  # one plan, start to finish


def test_wrapper_gives_each_episode_a_fresh_memory() -> None:
    env = GTRWrapper(Points24Env(), make_corrector("programmatic"))
    env.reset(seed=0, options={"cards": CARDS})
    env.step('"action": "10"')
    assert env.memory.target_formula and env.memory.steps == 1
    env.reset(seed=0, options={"cards": CARDS})
    assert env.memory.target_formula is None and env.memory.steps == 0


def _paper_reply(**fields: Any) -> dict[str, Any]:
    """An answer in App. C's format."""
    return {"content": json.dumps({"answer1": "Q, 3, 4, 2", **fields})}


def test_openai_correct_thought_returns_no_correction(stub: StubAPI) -> None:
    stub.script.append(
        _paper_reply(
            evaluation="YES", possible_solution=None, target_formula="10+3*4+2", correction=None
        )
    )
    corrector = _openai(stub)
    _, obs, info = points24(typed="10 +")
    own = '"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2", "thoughts": "the 3"'
    result = corrector.correct(obs, own, "3", info)
    assert result.valid and result.agrees and result.thought_kept
    assert result.corrected_thought == own and result.action == "3"
    assert result.target_formula == "10+3*4+2" and result.solvable is None
    metrics = corrector.metrics()
    assert metrics["kept"] == 1 and metrics["malformed"] == 0


def test_openai_wrong_thought_without_a_correction_is_malformed(stub: StubAPI) -> None:
    stub.script.extend([_paper_reply(evaluation="NO", correction=None)] * 2)
    corrector = _openai(stub)
    _, obs, info = points24()
    result = corrector.correct(obs, '"cards": ["K"]', "5", info)
    assert not result.valid and corrector.metrics()["malformed"] == 2


def test_openai_json_object_correction_becomes_an_agent_thought(stub: StubAPI) -> None:
    fix = {"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2", "thoughts": "start with 10"}
    stub.script.append(
        _paper_reply(
            evaluation="NO",
            possible_solution=True,
            target_formula="10+3*4+2 = 24",
            correction=fix,
            action="10",
        )
    )
    corrector = _openai(stub)
    _, obs, info = points24()
    result = corrector.correct(obs, "dunno", "*", info)
    assert result.valid and not result.agrees and not result.thought_kept
    assert result.corrected_thought == json.dumps(fix)[1:-1] and result.action == "10"
    assert result.target_formula == "10+3*4+2" and result.solvable is True
    assert "answer1" in result.details["raw"] and result.evaluation.startswith("Q, 3, 4, 2")
    parsed = parse_gtr_response(result.as_response(), info["legal_actions"])
    assert parsed.action == "10" and claimed_formula(parsed.thought) == "10+3*4+2"


def test_openai_corrector_keeps_the_target_formula_across_an_episode(stub: StubAPI) -> None:
    """The target formula the first step settles on is the second step's [Target Formula];
    a new episode, or a formula typed off it, starts NOT DETERMINED again."""
    fix = {"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2", "thoughts": "start with 10"}
    stub.script.extend(
        [
            _paper_reply(evaluation="NO", target_formula="10+3*4+2", correction=fix, action="10"),
            _paper_reply(evaluation="YES", target_formula="10+3*4+2", correction=None),
            _paper_reply(evaluation="NO", target_formula="10+3*4+2", correction=fix, action="10"),
            _paper_reply(evaluation="NO", target_formula=None, correction=fix, action="3"),
        ]
    )
    env = GTRWrapper(Points24Env(), _openai(stub))
    env.reset(seed=0, options={"cards": CARDS})
    env.step('"thoughts": "hmm", "action": "10"')
    env.step('"cards": ["Q", "3", "4", "2"], "formula": "10+3*4+2", "action": "+"')
    texts = [body["messages"][1]["content"][1]["text"] for body in stub.bodies]
    assert "[Target Formula] NOT DETERMINED" in texts[0]
    assert "[Target Formula] 10+3*4+2" in texts[1] and "[Current Formula] '10'" in texts[1]
    assert env.memory.target_formula == "10+3*4+2"
    env.reset(seed=0, options={"cards": CARDS})
    env.step('"action": "2"')  # "2" is not how 10+3*4+2 starts: the target no longer holds
    env.step('"action": "+"')
    texts = [body["messages"][1]["content"][1]["text"] for body in stub.bodies]
    assert "[Target Formula] NOT DETERMINED" in texts[2]
    assert "[Target Formula] NOT DETERMINED" in texts[3] and "[Current Formula] '2'" in texts[3]


def test_corrector_system_prompt_lists_the_env_actions() -> None:
    for env in (Points24Env(), EZPointsEnv(), EZPointsEnv(operators=("+", "*"))):
        _, info = env.reset(seed=0)
        prompt = corrector_system_prompt(info)
        listed = prompt[prompt.index("[") + 1 : prompt.index("]")]
        assert [a.strip().strip("'") for a in listed.split(",")] == env.legal_actions
        assert f"evaluates to {env.target}" in prompt


# ------------------------------------------------------------------ a corrector from a preset
def test_preset_configures_the_openai_corrector(stub: StubAPI, monkeypatch) -> None:
    """rollout.corrector as a mapping: the name and its arguments reach the requests."""
    from odyssey_core.recipes.gtr.settings import load_gtr_settings

    monkeypatch.setenv("TEST_CORRECTOR_URL", stub.url)
    spec = {
        "name": "openai",
        "model": "stub-vlm",
        "base_url": "http://127.0.0.1:9/unused",
        "base_url_env": "TEST_CORRECTOR_URL",  # set: wins over base_url
        "api_key_env": None,  # a local server without keys
        "temperature": 0.4,
        "max_tokens": 600,
        "max_retries": 1,
    }
    settings = load_gtr_settings("tiny", {"rollout": {"corrector": spec}})
    r = settings.rollout
    assert r.corrector == "openai" and r.corrector_kwargs["model"] == "stub-vlm"
    corrector = build_corrector(r.corrector, r.corrector_kwargs)
    assert isinstance(corrector, OpenAICorrector)
    stub.script.append({"content": json.dumps(GOOD)})
    _, obs, info = points24(typed="10 +")
    assert corrector.correct(obs, "x", "*", info).action == "3"
    body = stub.bodies[0]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("stub-vlm", 0.4, 600)
    assert body["tools"][0]["function"]["name"] == "solve24"
    # the paper's preset: GPT-4o at the OpenAI API, temperature 0.4, 600 tokens, the tool
    paper = load_gtr_settings("points24").rollout
    assert paper.corrector == "openai" and paper.corrector_kwargs["model"] == "gpt-4o"
    assert paper.corrector_kwargs["temperature"] == 0.4
    assert paper.corrector_kwargs["max_tokens"] == 600 and paper.corrector_kwargs["use_tools"]
    oracle = load_gtr_settings("points24_oracle").rollout
    assert oracle.corrector == "programmatic" and oracle.corrector_kwargs == {}


def test_a_missing_corrector_setting_is_named_before_any_work(tmp_path, monkeypatch) -> None:
    from odyssey_core.recipes.gtr import train
    from odyssey_core.recipes.gtr.pipeline import load_gtr_pipeline_config, stage_gtr_train
    from odyssey_core.recipes.gtr.settings import load_gtr_settings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GTR_CORRECTOR_MODEL", raising=False)

    def no_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was built before the corrector was checked")

    monkeypatch.setattr(train, "build_policy", no_work)
    base = {"model": {"path": str(tmp_path)}}  # the paper preset's base model is set
    with pytest.raises(CorrectorConfigError, match="OPENAI_API_KEY"):
        train.build_trainer(load_gtr_settings("points24", base), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(CorrectorConfigError, match=r"rollout\.corrector\.model"):
        check_corrector("openai", {"base_url": "http://x/v1", "api_key_env": None})
    with pytest.raises(CorrectorConfigError, match=r"base_url .*GTR_URL"):
        check_corrector("openai", {"model": "m", "base_url_env": "GTR_URL", "api_key_env": None})
    with pytest.raises(CorrectorConfigError, match=r"model .*GTR_CORRECTOR_MODEL"):
        check_corrector("openai", {"model_env": "GTR_CORRECTOR_MODEL", "base_url": "http://x"})
    # the pipeline stops before its first stage (the SFT one) creates anything
    cfg = load_gtr_pipeline_config(
        "points24", {"run_dir": str(tmp_path / "run"), "train": {"overrides": base}}
    )
    with pytest.raises(CorrectorConfigError, match="OPENAI_API_KEY"):
        stage_gtr_train(cfg)
    assert not (tmp_path / "run").exists()


def test_corrector_presets_are_validated_when_loaded() -> None:
    from odyssey_core.recipes.gtr.settings import load_gtr_settings

    bad = [
        {"name": "openai", "modle": "gpt-4o"},  # a typo in an argument
        {"name": "openai", "temperature": -1},
        {"name": "programmatic", "model": "x"},  # takes no arguments
        {"name": "nope"},
        {"model": "no name"},
    ]
    for spec in bad:
        with pytest.raises(ValueError):
            load_gtr_settings("tiny", {"rollout": {"corrector": spec}})
    with pytest.raises(ValueError, match="unknown corrector"):
        load_gtr_settings("tiny", {"rollout": {"corrector": "nope"}})
    with pytest.raises(ValueError, match="nothing to clone"):
        load_gtr_settings("tiny", {"rollout": {"corrector": "none"}})
    assert load_gtr_settings("tiny", {"rollout": {"corrector": "none"}, "sft": {"coef": 0}})
    assert build_corrector("none") is None


def test_reports_name_the_corrector_and_whether_it_is_an_oracle() -> None:
    programmatic = describe_corrector("programmatic")
    assert programmatic["oracle"] and "oracle" in programmatic["label"]
    openai = describe_corrector("openai", {"model": "gpt-4o", "model_env": "GTR_CORRECTOR_MODEL"})
    assert not openai["oracle"] and "not an oracle" in openai["label"]
    assert "gpt-4o" in openai["label"] and "$GTR_CORRECTOR_MODEL" in openai["label"]
    assert describe_corrector("alfworld")["oracle"] and not describe_corrector("none")["oracle"]


# ------------------------------------------------------------------ each game's corrector prompt
CARD_WORDS = ("card", "formula", "solve24", "24")


def _step(info: dict[str, Any], text: str = "the task") -> StepToCorrect:
    return StepToCorrect(Observation(np.zeros((4, 4, 3), np.uint8), text), "t", "a", info)


def _prompt_text(info: dict[str, Any]) -> tuple[str, str]:
    return corrector_system_prompt(info), corrector_query(_step(info))


def test_each_card_game_has_its_own_corrector_prompt() -> None:
    _, numberline = NumberlineEnv().reset(seed=0)
    system, query = _prompt_text(numberline)
    assert "Numberline" in system and "'+'" in system and "'-'" in system
    assert "Target" in system and "Current" in system
    assert "target number and which current number" in query
    assert '"target": <n>, "current": <n>' in query  # the agent's Numberline thought format
    assert not any(w in (system + query).lower() for w in CARD_WORDS)
    _, blackjack = BlackjackEnv().reset(seed=0)
    system, query = _prompt_text(blackjack)
    assert "Blackjack" in system and "'hit'" in system and "'stand'" in system
    assert "21" in system and "dealer" in system and "ace counts 11" in system
    assert '"dealer": "<rank>", "player": [...], "total": <n>' in query
    assert "formula" not in (system + query).lower()
    for env, title in ((Points24Env(), "Points24"), (EZPointsEnv(), "EZPoints")):
        _, info = env.reset(seed=0)
        system, query = _prompt_text(info)
        assert title in system and f"evaluates to {env.target}" in system
        assert "[Current Formula]" in query and "solve24" in query
    assert set(CORRECTOR_GAMES) == {"numberline", "blackjack", "points24", "ezpoints", "alfworld"}
    with pytest.raises(ValueError, match=r"no prompt for game 'chess'.*alfworld"):
        corrector_system_prompt({"game": "chess"})


@pytest.fixture(scope="module")
def alfworld_heat() -> Any:
    from odyssey_core.envs.registry import make_env

    env = make_env("alfworld-heat", max_steps=6)
    yield env
    env.close()


def test_the_alfworld_corrector_prompt_is_about_household_tasks(alfworld_heat: Any) -> None:
    _, info = alfworld_heat.reset(seed=2)
    system, query = _prompt_text(info)
    assert "ALFWorld" in system and "household" in system
    for appliance in ("sink", "microwave", "fridge", "lamp"):
        assert appliance in system
    assert f"[Task] {info['task']}" in query and "[Previous Actions] none yet" in query
    assert f"[Admissible Actions] {', '.join(info['legal_actions'])}" in query
    assert "sub-goal" in query and "admissible" in query
    assert '"location": ' in query and '"holding": ' in query and '"subgoal": ' in query
    assert not any(w in (system + query).lower() for w in CARD_WORDS)
    first = info["legal_actions"][0]
    _, _, _, _, info = alfworld_heat.step(f'"thoughts": "look", "action": "{first}"')
    assert f"[Previous Actions] 1. {first}" in corrector_query(_step(info, "x"))


def test_the_openai_corrector_sends_alfworld_its_own_prompt(
    stub: StubAPI, alfworld_heat: Any
) -> None:
    obs, info = alfworld_heat.reset(seed=2)
    right = info["expert_plan"][0]
    wrong = next(a for a in info["legal_actions"] if a != right)
    reply = {
        "answer1": "In the middle of the room, holding nothing.",
        "answer2": "The next sub-goal is to find the object.",
        "answer3": "The action does not help.",
        "evaluation": "NO",
        "correction": {
            "location": "the middle of the room",
            "holding": "nothing",
            "subgoal": info["subgoals"][0],
            "thoughts": "go where the object may be",
        },
        "action": right,
    }
    stub.script.append({"content": json.dumps(reply)})
    result = _openai(stub).correct(obs, '"thoughts": "wander"', wrong, info)
    assert result.valid and not result.agrees and result.action == right
    assert '"subgoal": ' in result.corrected_thought
    (body,) = stub.bodies
    assert "tools" not in body  # solve24 is for the formula games only
    system = body["messages"][0]
    assert system["role"] == "system" and "household" in system["content"]
    image, text = body["messages"][1]["content"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    assert f"[Task] {info['task']}" in text["text"] and f"[Action] {wrong}" in text["text"]
    assert "card" not in (system["content"] + text["text"]).lower()


def test_the_openai_corrector_sends_numberline_and_blackjack_their_prompts(stub: StubAPI) -> None:
    corrector = _openai(stub)
    for env, action, words in (
        (NumberlineEnv(), "+", ("Numberline", "current number")),
        (BlackjackEnv(), "hit", ("Blackjack", "dealer")),
    ):
        obs, info = env.reset(seed=0)
        stub.script.append({"content": json.dumps({"evaluation": "YES", "correction": None})})
        result = corrector.correct(obs, '"thoughts": "go"', action, info)
        assert result.valid and result.agrees
        body = stub.bodies[-1]
        sent = body["messages"][0]["content"] + body["messages"][1]["content"][1]["text"]
        assert all(w in sent for w in words) and "tools" not in body
        assert "formula" not in sent.lower()


def test_the_paper_alfworld_preset_asks_gpt_4o_and_the_oracle_is_a_named_option(
    stub: StubAPI, alfworld_heat: Any, monkeypatch
) -> None:
    from odyssey_core.recipes.gtr.settings import load_gtr_settings

    paper = load_gtr_settings("alfworld").rollout
    assert paper.corrector == "openai" and paper.corrector_kwargs["model"] == "gpt-4o"
    assert paper.corrector_kwargs["temperature"] == 0.4  # Table 2, as on Points24
    assert paper.corrector_kwargs["max_tokens"] == 600 and not paper.corrector_kwargs["use_tools"]
    assert not describe_corrector(paper.corrector, paper.corrector_kwargs)["oracle"]
    for oracle in ("alfworld_oracle", "alfworld_tiny"):
        rollout = load_gtr_settings(oracle).rollout
        assert rollout.corrector == "alfworld" and rollout.corrector_kwargs == {}
        assert describe_corrector(rollout.corrector)["oracle"]
    # the preset's corrector, pointed at the stub server by its environment variables
    monkeypatch.setenv("GTR_CORRECTOR_BASE_URL", stub.url)
    monkeypatch.setenv("GTR_CORRECTOR_MODEL", "stub-vlm")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    corrector = build_corrector(paper.corrector, paper.corrector_kwargs)
    obs, info = alfworld_heat.reset(seed=2)
    stub.script.append({"content": json.dumps({"evaluation": "YES", "correction": None})})
    assert corrector.correct(obs, '"thoughts": "go"', info["expert_plan"][0], info).valid
    (body,) = stub.bodies
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("stub-vlm", 0.4, 600)
    assert "tools" not in body and "household" in body["messages"][0]["content"]
