"""GTR correctors (programmatic and OpenAI-compatible against a stub server) and rewards."""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from odyssey_core.envs.cards import (
    BlackjackEnv,
    EZPointsEnv,
    NumberlineEnv,
    Points24Env,
)
from odyssey_core.policy.openai_backend import RetrySettings
from odyssey_core.protocol.gtr_format import parse_gtr_response
from odyssey_core.recipes.gtr.corrector import (
    CORRECTORS,
    Correction,
    OpenAICorrector,
    make_corrector,
    parse_correction_json,
    solve24_tool,
)
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
    # a complete formula: the next step is "="
    _, obs, info = points24(typed="10 + 3 * 4 + 2")
    done = corrector.correct(obs, '"formula": "10+3*4+2"', "=", info)
    assert done.agrees and done.action == "="
    assert corrector.metrics()["corrections"] == 5


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
class StubAPI:
    """A chat-completions server on 127.0.0.1 that plays back scripted assistant messages."""

    def __init__(self) -> None:
        self.script: deque[dict[str, Any]] = deque()
        self.bodies: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.bodies.append(body)
                message = api.script.popleft()
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                payload = json.dumps(
                    {
                        "id": "stub",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", **message},
                                "finish_reason": finish,
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Any:
    api = StubAPI()
    yield api
    api.close()


def _openai(stub: StubAPI) -> OpenAICorrector:
    fast = RetrySettings(max_retries=1, initial_backoff=0.001, max_total_wait=1.0)
    return make_corrector(
        "openai", model="stub-vlm", base_url=stub.base_url, retry=fast, timeout=10.0
    )


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
    assert "Current formula: '10+'" in user[1]["text"] and "I will multiply" in user[1]["text"]
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
    _, reward, _, truncated, info = env.step('"formula": "10+3*4+2", "action": "10"')
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
