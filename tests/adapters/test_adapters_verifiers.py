"""verifiers' ``OpenEnvTaskset`` evaluates an agentgym env through ``agentgym serve``: the real ``vf-eval`` CLI, its
``openenv`` taskset (openenv 0.4.1's ``GenericEnvClient``, the schema fetch, its action parsing, the summed per-step
reward), its interception server, eval client and null-harness chat program, against a scripted OpenAI-compatible
model on 127.0.0.1 that answers each turn with the in-process oracle's action (and, on one task, garbage first).
The run's ``openenv_reward`` per task must equal the in-process episode's total reward.

verifiers[openenv] 0.4 pins mcp==2.0.0 (openenv 0.10 needs mcp<2) and Python >= 3.11, so .ci/run runs this file in
``.ci-verifiers-venv``; elsewhere it skips. The chat program runs with that venv's Python
(``agentgym_vf_chat.VenvChatHarness``) instead of a uv-provisioned one, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1", reason="verifiers runs in its own venv (.ci/run: .ci-verifiers-venv)")
pytest.importorskip("openenv", reason="verifiers[openenv] brings openenv 0.4.1")
pytest.importorskip("fastapi", reason="agentgym serve needs the serve extra: pip install -e '.[serve]'")

import agentgym  # noqa: E402
from agentgym.serve import LocalServer  # noqa: E402

HERE = Path(__file__).resolve().parent


class _ScriptedModel:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 (streaming and not) whose reply to a
    conversation is ``script[task_id][k]``: ``task_id`` read from the conversation's first observation payload,
    ``k`` the number of assistant turns so far. At most ``max_requests`` requests (then 503), so no loop is
    unbounded."""

    def __init__(self, script: dict[str, list[str]], max_requests: int = 500):
        self.script, self.max_requests, self.log = script, max_requests, []
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                model.log.append(body)
                if len(model.log) > model.max_requests or not self.path.endswith("/chat/completions"):
                    return self._send(503, b'{"error": {"message": "scripted model: no"}}')
                msgs = body["messages"]
                first_user = next(m for m in msgs if m["role"] == "user")
                content = first_user["content"]
                if isinstance(content, list):
                    content = "".join(p.get("text", "") for p in content)
                task_id = json.loads(content)["observation"]["info"]["task_id"]
                turn = sum(1 for m in msgs if m["role"] == "assistant")
                replies = model.script[task_id]
                text = replies[turn] if turn < len(replies) else ""
                base = {"id": "chatcmpl-scripted", "created": 0, "model": body["model"]}
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                if not body.get("stream"):
                    return self._send(200, json.dumps({**base, "object": "chat.completion", "usage": usage,
                                                       "choices": [{"index": 0, "finish_reason": "stop",
                                                                    "message": {"role": "assistant",
                                                                                "content": text}}]}).encode())
                chunks = [{**base, "object": "chat.completion.chunk",
                           "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                        "finish_reason": None}]},
                          {**base, "object": "chat.completion.chunk",
                           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                          {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}]
                sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                return self._send(200, sse.encode(), "text/event-stream")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def _in_process(task_id: str, seed: int, garbage: int) -> tuple[list[str], float]:
    """The scripted replies (``garbage`` unparseable ones, then the oracle's) and the episode's total reward."""
    env = agentgym.make("TextCraft-v0", split="adapt-test")
    env.reset(seed=seed, options={"task_id": task_id})
    replies, total, done = [], 0.0, False
    while not done:
        a = "I would rather not say." if len(replies) < garbage else env.oracle_action()
        replies.append(a)
        _, r, term, trunc, _ = env.step(a)
        total += r
        done = term or trunc
    return replies, total


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def test_verifiers_openenv_taskset_evaluates_through_agentgym_serve(tmp_path):
    # two of the shortest oracle episodes (4 steps): the chat program is relaunched on every turn
    episodes = [("adapt.test.22", 0, 1), ("adapt.test.45", 1, 0)]  # (task, seed, garbage replies first)
    script, want = {}, {}
    for task_id, seed, garbage in episodes:
        script[task_id], want[task_id] = _in_process(task_id, seed, garbage)
    assert all(v == 1.0 for v in want.values())
    with LocalServer("TextCraft-v0", split="adapt-test") as srv, _ScriptedModel(script) as model:
        config = tmp_path / "eval.toml"
        out = tmp_path / "out"
        resets = [{"seed": seed, "task_id": t} for t, seed, _ in episodes]
        config.write_text("\n".join([
            'model = "scripted-oracle"', "push = false", f"output_dir = {_toml(str(out))}", "max_concurrent = 2",
            "[client]", f"base_url = {_toml(model.base_url)}", 'api_key_var = "AGENTGYM_TEST_KEY"',
            "[env.taskset]", 'id = "openenv"', f"base_url = {_toml(srv.url)}", f"resets = {_toml(resets)}",
            "[env.player]", 'harness = {id = "agentgym_vf_chat"}', 'runtime = {type = "subprocess"}',
            "max_turns = 60", ""]))
        run_env = {**os.environ, "HOME": str(tmp_path / "home"), "AGENTGYM_TEST_KEY": "sk-local",
                   "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
                   "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        vf_eval = Path(sys.executable).with_name("vf-eval")
        proc = subprocess.run([str(vf_eval), "@", str(config), "--no-rich"], env=run_env, capture_output=True,
                              text=True, timeout=240, cwd=tmp_path)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
        assert srv.get("/sessions")["active_sessions"] == 0
    episodes_out = [json.loads(line) for p in out.rglob("traces.jsonl") for line in p.read_text().splitlines()
                    if line.strip()]
    assert len(episodes_out) == len(episodes), list(out.rglob("*"))
    got = {}
    for ep in episodes_out:
        assert ep["ok"] and not ep["errors"], ep["errors"]
        (trace,) = ep["traces"]
        assert trace["ok"] and not trace["errors"], trace["errors"]
        got[ep["task"]["data"]["reset"]["task_id"]] = trace["rewards"]["openenv_reward"]["score"]
    assert got == want
    # every scripted reply was asked for: garbage turns were the env's invalid actions, not errors
    assert len(model.log) == sum(len(v) for v in script.values())
