"""Hostile model servers against ``agentgym eval``'s client, on both transports (issue 33, rows 10-12).

Each attack runs on aiohttp (the ``openai`` extra) and on stdlib urllib (without it), from a real server on
127.0.0.1 (tests/policies/openai_server.py):

* a 302 to another origin (a second server that records who came, and with which ``Authorization``): never
  followed, a typed ``policy_error`` naming the status and the Location; the key goes nowhere;
* an answer dripped a byte at a time (body, or headers and body): cut at ``--request-timeout`` (a deadline for the
  whole attempt, not a per-read socket timeout), long before the drip would end;
* an answer streamed without end (with or without a Content-Length): a ``policy_error`` naming the cap
  (``--max-response-bytes``), read no further; the eval's peak RSS stays far below the flood (measured in a child
  process: before the cap, 2.2 GB on aiohttp and 2.9 GB on urllib for two requests);
* a 5,000-digit ``usage`` count: a ``policy_error`` naming the field.

Bounded: every server stops at its own limit or when the test ends, the client's timeouts are a few seconds, and each
CLI run has a wall-clock limit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentgym.eval.results import ResultsFile
from agentgym.rollout.openai_policy import OpenAIConfig, OpenAIPolicy, PolicyRequestError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policies"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from measured import agentgym, run_measured  # noqa: E402
from openai_server import ScriptedServer, drip, flood, redirect  # noqa: E402

pytest.importorskip("aiohttp")  # the aiohttp half of every pair; the urllib half runs in the same tests

TRANSPORTS = ["aiohttp", "urllib"]
KEY_ENV, KEY = "AGENTGYM_TEST_KEY", "sk-test-secret-0123456789"
ANSWER = b'{"choices": [{"message": {"content": "<action>inventory</action>"}, "finish_reason": "stop"}]}'


def _one(srv: ScriptedServer, transport: str, **config) -> PolicyRequestError:
    pol = OpenAIPolicy(OpenAIConfig(model="m", base_url=srv.base_url, transport=transport, api_key_env=KEY_ENV,
                                    **{"max_retries": 0, "timeout_s": 2.0, **config}))
    try:
        (out,) = pol(["p"])
    finally:
        pol.close()
    assert isinstance(out, PolicyRequestError), out
    assert out.kind == "policy_error"
    return out


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_redirect_to_another_origin_is_never_followed(transport, status, key):
    with ScriptedServer() as other:
        target = other.base_url + "/chat/completions"
        with ScriptedServer(hostile=lambda p, a: redirect(target, status)) as srv:
            err = _one(srv, transport)
            assert srv.log[0]["auth"] == f"Bearer {key}"  # the key went to the configured server, once
        assert other.log == []  # and nowhere else: the redirect was not followed
    assert err.status == status and err.attempts == 1
    assert f"HTTP {status} redirect to {target!r}" in str(err) and "not followed" in str(err)


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers+body"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_dripped_answer_is_cut_at_the_request_timeout(transport, headers_too, key):
    # one byte every 0.2 s: each read returns within any socket timeout, the whole answer would take ~20 s
    with ScriptedServer(hostile=lambda p, a: drip(ANSWER, 0.2, headers_too=headers_too)) as srv:
        err = _one(srv, transport, timeout_s=1.5)
    assert "timed out after 1.5s" in str(err) and err.status is None
    # stopped at its deadline, not when the drip ended (20 s): a bound with room for any loaded machine
    assert err.latency_s < 10


@pytest.mark.parametrize("declare", [False, True], ids=["no-length", "content-length"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_endless_answer_is_cut_at_the_size_cap(transport, declare, key):
    with ScriptedServer(hostile=lambda p, a: flood(declare=declare)) as srv:
        err = _one(srv, transport, max_response_bytes=256 * 1024)
    assert err.details["field"] == "(body)" and "262144-byte cap" in str(err) and "--max-response-bytes" in str(err)
    assert err.attempts == 1  # not retried: the same server would send the same answer


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens", "total_tokens"])
def test_a_5000_digit_usage_count_names_its_field(transport, field, key):
    body = (b'{"choices": [{"message": {"content": "x"}}], "usage": {"' + field.encode() + b'": '
            + b"7" * 5000 + b"}}")
    with ScriptedServer(raw=lambda p, a: body) as srv:
        err = _one(srv, transport)
    assert err.details["field"] == f"usage.{field}" and "5000 digits" in str(err)


def _eval(srv: ScriptedServer, out: Path, *extra: str, urllib_only: bool, episodes: int = 2):
    return run_measured(agentgym("eval", "TextCraft-v0", "--split", "gen-depth1", "--episodes", str(episodes),
                                 "--max-turns", "2", "--policy", "openai:m", "--base-url", srv.base_url,
                                 "--api-key-env", KEY_ENV, "--max-retries", "0", "--no-transcripts",
                                 "--out", str(out), *extra, urllib_only=urllib_only),
                        timeout_s=90, env=_env())


def _env() -> dict:
    import os

    return {**os.environ, KEY_ENV: KEY}


def _errors(out: Path) -> list[dict]:
    return [r["error"] for r in ResultsFile(out).read() if r["error"] is not None]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cli_eval_redirect_drip_and_long_number(tmp_path, transport):
    """The whole command, each attack in turn: exit 1, typed policy_error rows, no traceback, the key never sent to
    the redirect's target; the drip (one byte a second, ~100 s long) ends at --request-timeout."""
    urllib_only = transport == "urllib"
    with ScriptedServer() as other:
        with ScriptedServer(hostile=lambda p, a: redirect(other.base_url + "/chat/completions")) as srv:
            res = _eval(srv, tmp_path / "redirect.jsonl", urllib_only=urllib_only)
        assert other.log == []
    assert res.returncode == 3, res.stderr[-2000:]  # a redirect is systemic: the run stops with a hint
    assert "Traceback" not in res.stderr and "HTTP 302 redirect" in res.stderr and "--base-url" in res.stderr
    assert {e["details"]["status"] for e in _errors(tmp_path / "redirect.jsonl")} == {302}

    with ScriptedServer(hostile=lambda p, a: drip(ANSWER, 1.0, headers_too=True)) as srv:
        res = _eval(srv, tmp_path / "drip.jsonl", "--request-timeout", "2", urllib_only=urllib_only)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = _errors(tmp_path / "drip.jsonl")
    assert len(errors) == 2 and all("timed out after 2.0s" in e["message"] for e in errors)
    assert res.wall_s < 60  # the drip would last ~100 s per request; the deadline ended each at 2 s

    body = b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": ' + b"1" * 5000 + b"}}"
    with ScriptedServer(raw=lambda p, a: body) as srv:
        res = _eval(srv, tmp_path / "long.jsonl", urllib_only=urllib_only)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert {e["details"]["field"] for e in _errors(tmp_path / "long.jsonl")} == {"usage.prompt_tokens"}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cli_eval_flood_is_capped_in_memory(tmp_path, transport):
    """Two requests in flight, each answered by an endless stream: the eval ends with policy_errors naming the cap
    and its peak RSS stays near an ordinary eval's (before the cap: 2.2 GB on aiohttp, 2.9 GB on urllib)."""
    out = tmp_path / "flood.jsonl"
    with ScriptedServer(hostile=lambda p, a: flood(total_bytes=4 << 30)) as srv:
        res = _eval(srv, out, "--concurrency", "2", urllib_only=transport == "urllib", episodes=4)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = _errors(out)
    assert len(errors) == 4 and all("8388608-byte cap" in e["message"] for e in errors)
    assert res.peak_rss_mb < 400, f"peak RSS {res.peak_rss_mb:.0f} MB"
    print(f"{transport}: flood eval peak RSS {res.peak_rss_mb:.0f} MB in {res.wall_s:.1f}s")
