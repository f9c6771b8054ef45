"""The chat-model user: an OpenAI-compatible server started by the test on 127.0.0.1, the on-disk cache, exact
offline replay, typed failures, and the callable plug-in."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import agentgym
from agentgym.envs.tau_airline import ENTRY
from agentgym.errors import AgentGymError

_ok, _why = ENTRY.split_available("base")
if _ok:  # the chat user needs τ²'s guideline file too (staged, or derived after `agentgym tau setup`)
    from agentgym.envs.tau_airline.user import simulation_guidelines

    try:
        simulation_guidelines()
    except AgentGymError as e:
        _ok, _why = False, str(e)
if not _ok and os.environ.get("CI"):  # .ci/run stages the data and sets up the tau2-2025-06 task set
    raise RuntimeError(f"the τ² chat-user tests cannot run in CI: {_why}")
pytestmark = pytest.mark.skipif(not _ok, reason=f"τ² airline data not available: {_why}")

if _ok:
    from agentgym.envs.tau_airline.oracle import tool_call_text
    from agentgym.envs.tau_airline.user import (AGENT_GREETING, ChatUser, LLMUserConfig, ReplayMissError,
                                                UserSimulatorError, llm_user)


class _FakeChatServer:
    """A tiny OpenAI-compatible endpoint whose replies change with every call (so only a cache can replay them)."""

    def __init__(self):
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, **body})
                last = body["messages"][-1]["content"]
                n = len(outer.requests)
                text = "###STOP###" if "goodbye" in last else f"user turn {n}: re {last[:24]}"
                payload = {"id": f"c{n}", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


AGENT = [
    tool_call_text("get_user_details", {"user_id": "mohamed_silva_9265"}),
    "<response>I can help. Which reservation?</response>",
    "<response>Let me check the balances.</response>",
    "<response>Thanks, goodbye!</response>",
]


def _run(env, task_id="14"):
    obs, _ = env.reset(seed=0, options={"task_id": task_id})
    trace = [obs]
    for a in AGENT:
        obs, r, term, trunc, info = env.step(a)
        trace.append(obs)
        if term or trunc:
            return trace, r, info
    raise AssertionError("did not end")


def test_llm_user_is_cached_and_replays_exactly(tmp_path):
    with _FakeChatServer() as srv:
        cfg = LLMUserConfig(base_url=srv.url, model="user-model", temperature=0.0, seed=7,
                            cache_dir=str(tmp_path / "cache"), timeout_s=10)
        env = agentgym.make("TauAirline-v0", user=cfg)
        trace1, r1, info1 = _run(env)
        assert len(srv.requests) == 4  # the greeting reply + 3 messages; the tool call is not shown to the user
        for req in srv.requests:
            assert req["path"] == "/v1/chat/completions"
            assert (req["model"], req["temperature"], req["seed"]) == ("user-model", 0.0, 7)
            assert req["messages"][0]["role"] == "system" and "<scenario>" in req["messages"][0]["content"]
        assert srv.requests[0]["messages"][1] == {"role": "user", "content": AGENT_GREETING}
        assert trace1[0] == "User: user turn 1: re " + AGENT_GREETING[:24]
        assert info1["reward_info"]["termination_reason"] == "user_stop"
        # The same run again, with the server still up: every turn comes from the cache.
        trace2, *_ = _run(agentgym.make("TauAirline-v0", user=cfg))
        assert trace2 == trace1 and len(srv.requests) == 4
    # Server gone: offline replay reproduces the conversation exactly...
    offline = LLMUserConfig(base_url=srv.url, model="user-model", temperature=0.0, seed=7,
                            cache_dir=str(tmp_path / "cache"), offline=True)
    env = agentgym.make("TauAirline-v0", user=offline)
    trace3, r3, _ = _run(env)
    assert trace3 == trace1 and r3 == r1
    # ...and a conversation that departs from the recording is a typed harness error, not a made-up reply.
    env.reset(seed=0, options={"task_id": "14"})
    with pytest.raises(ReplayMissError) as e:
        env.step("<response>Something never said before</response>")
    assert isinstance(e.value, AgentGymError)
    # Other settings (another seed) are another cache key.
    other = LLMUserConfig(base_url=srv.url, model="user-model", seed=8, cache_dir=str(tmp_path / "cache"),
                          offline=True)
    with pytest.raises(ReplayMissError):
        agentgym.make("TauAirline-v0", user=other).reset(options={"task_id": "14"})


def test_unreachable_endpoint_is_a_typed_error(tmp_path):
    with _FakeChatServer() as srv:
        url = srv.url
    cfg = LLMUserConfig(base_url=url, model="m", cache_dir=str(tmp_path), timeout_s=2, max_retries=1)
    with pytest.raises(UserSimulatorError):
        llm_user(cfg).start(agentgym.make("TauAirline-v0").get_task("14"))


def test_callable_user_plugs_in_and_can_transfer():
    seen = []

    def user(messages):
        seen.append(messages)
        return "###TRANSFER###" if "human" in messages[-1]["content"].lower() else "Hi, I need help."

    env = agentgym.make("TauAirline-v0", user=user)
    obs, _ = env.reset(options={"task_id": "13"})
    assert obs == "User: Hi, I need help." and isinstance(env.user, ChatUser)
    env.step(tool_call_text("transfer_to_human_agents", {"summary": "wants a nonstop"}))
    _, r, term, _, info = env.step("<response>YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
                                   "</response>")
    assert term and info["reward_info"]["termination_reason"] == "user_transfer" and r == 1.0
    assert [m["role"] for m in seen[-1]] == ["system", "user", "assistant", "user"]


def test_failing_callable_is_a_typed_error():
    def broken(messages):
        raise RuntimeError("model exploded")

    env = agentgym.make("TauAirline-v0", user=broken)
    with pytest.raises(UserSimulatorError, match="model exploded"):
        env.reset(options={"task_id": "14"})


def test_chat_user_system_prompt_is_tau2s_layout():
    """τ²'s SYSTEM_PROMPT: the guideline file as read (not stripped), a blank line, then the scenario under an
    ``Instructions:`` header with tab indents (byte equality with τ²'s code: test_tau2_conformance.py)."""
    from agentgym.envs.tau_airline.user import simulation_guidelines, user_system_prompt

    seen = []
    env = agentgym.make("TauAirline-v0", user=lambda messages: seen.append(messages) or "Hi.")
    env.reset(options={"task_id": "0"})
    prompt = seen[0][0]["content"]
    assert prompt == user_system_prompt(env.task, simulation_guidelines("tau3-1.0"))
    guidelines = simulation_guidelines("tau3-1.0")
    assert prompt.startswith(guidelines + "\n\n<scenario>\nInstructions:\n\tDomain: airline\n\tReason for call:\n\t\t")
    assert "\tKnown info:\n\t\tYou are Emma Kim.\n\t\tYour user id is emma_kim_9957.\n\tTask instructions:\n" in prompt
    assert prompt.endswith("\n</scenario>") and "Unknown info" not in prompt  # None in task 0: left out
