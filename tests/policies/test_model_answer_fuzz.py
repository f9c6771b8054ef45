"""Hostile model answers (issue 26 item 4): whatever an OpenAI-compatible server on 127.0.0.1 sends back, an
``openai:`` policy returns a response or a typed :class:`PolicyRequestError` naming the offending field, the runner
records a typed ``policy_error`` on that episode, and ``agentgym eval`` never crashes.

The answers come from a local fake server (tests/policies/openai_server.py, ``raw=``); Hypothesis draws them (bounded
example counts, derandomized under CI by tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import agentgym  # noqa: E402,F401 - registers the env ids
from agentgym.eval.results import ResultsFile  # noqa: E402
from agentgym.rollout.openai_policy import (OpenAIConfig, OpenAIPolicy, PolicyRequestError,  # noqa: E402
                                            check_answer_fields)
from agentgym.rollout.policy import PolicyResponse  # noqa: E402
from agentgym.rollout.progress import RolloutStats  # noqa: E402
from agentgym.eval.results import episode_fields  # noqa: E402
from agentgym.rollout.records import Trajectory, TurnRecord  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import ScriptedServer  # noqa: E402

FAST = dict(backoff_s=0.01, backoff_max_s=0.05, timeout_s=5.0, max_retries=0)

# Any JSON value, a few levels deep.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70) | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12)
token_counts = st.none() | st.integers(min_value=-5, max_value=2 ** 45) | json_values
usages = st.none() | json_values | st.fixed_dictionaries(
    {}, optional={"prompt_tokens": token_counts, "completion_tokens": token_counts, "total_tokens": token_counts})
contents = st.none() | st.text(max_size=40) | json_values | st.just("<action>inventory</action>") | st.just("\ud800")
messages = json_values | st.fixed_dictionaries({"content": contents}, optional={"role": json_values})
choice = json_values | st.fixed_dictionaries(
    {"message": messages}, optional={"finish_reason": st.none() | st.sampled_from(["stop", "length"]) | json_values})
answers = json_values | st.fixed_dictionaries(
    {"choices": json_values | st.lists(choice, max_size=2)}, optional={"usage": usages, "model": json_values})

#: Answers seen in the wild or in the issue, each with the field its error must name (None: a valid answer).
NAMED = [
    ({"choices": [{"message": {"content": "<action>inventory</action>"}}], "usage": {"completion_tokens": {"x": 1}}},
     "usage.completion_tokens"),
    ({"choices": [{"message": {"content": "<action>inventory</action>"}}], "usage": [1, 2]}, "usage"),
    ({"choices": [{"message": {"content": "<action>inventory</action>"}}], "usage": {"prompt_tokens": -3}},
     "usage.prompt_tokens"),
    ({"choices": [{"message": {"content": "<action>inventory</action>"}}], "usage": {"prompt_tokens": True}},
     "usage.prompt_tokens"),
    ({"choices": [{"message": {"content": "x"}, "finish_reason": 7}]}, "choices[0].finish_reason"),
    ({"choices": [{"message": {"content": ["a"]}}]}, "choices[0].message.content"),
    ({"choices": [{"message": {"content": "\ud800"}}]}, "choices[0].message.content"),
    ({"choices": [{"message": "text"}]}, "choices[0].message"),
    ({"choices": ["text"]}, "choices[0]"),
    ({"choices": []}, "choices"),
    ({"choices": {"0": {}}}, "choices"),
    ([1, 2, 3], "(body)"),
    ({"choices": [{"message": {"content": "<action>inventory</action>"}, "finish_reason": None}], "usage": None},
     None),
]


def _encode(payload) -> bytes:
    # allow_nan: servers do send NaN/Infinity; ensure_ascii keeps lone surrogates as \ud800 escapes (valid JSON text)
    return json.dumps(payload).encode("utf-8")


@pytest.mark.parametrize("payload, field", NAMED, ids=[f or "valid" for _, f in NAMED])
def test_named_fields(payload, field):
    if field is None:
        content, finish, usage = check_answer_fields("u", payload)
        assert content == "<action>inventory</action>" and finish is None and usage == {}
        return
    with pytest.raises(PolicyRequestError) as e:
        check_answer_fields("u", json.loads(_encode(payload)))
    assert e.value.field == field and e.value.status == 200 and field in str(e.value)
    assert e.value.details["field"] == field


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers)
def test_any_answer_is_a_response_or_a_typed_error(payload):
    try:
        content, finish, usage = check_answer_fields("u", payload)
    except PolicyRequestError as e:
        assert e.kind == "policy_error" and e.field
        return
    assert isinstance(content, str) and (finish is None or isinstance(finish, str)) and isinstance(usage, dict)
    for key in ("prompt_tokens", "completion_tokens"):
        assert usage.get(key) is None or (type(usage[key]) is int and usage[key] >= 0)


@pytest.fixture(scope="module")
def fuzz_server():
    """One server for the module; each test sets ``srv.payload`` (what every request is answered with)."""
    state = {"body": b"{}"}
    with ScriptedServer(raw=lambda prompt, attempt: state["body"], max_requests=100_000) as srv:
        srv.state = state
        yield srv


@pytest.mark.parametrize("transport", ["aiohttp", "urllib"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(payload=answers)
def test_policy_over_http_never_raises(fuzz_server, transport, payload):
    fuzz_server.state["body"] = _encode(payload)
    pol = OpenAIPolicy(OpenAIConfig(model="m", base_url=fuzz_server.base_url, transport=transport, **FAST))
    try:
        (out,) = pol(["p"])
    finally:
        pol.close()
    assert isinstance(out, (PolicyResponse, PolicyRequestError)), out
    # What the runner does with an answer: count it, record it in a turn, summarize the episode.
    stats = RolloutStats()
    stats.answer(out)
    if isinstance(out, PolicyResponse):
        traj = Trajectory(traj_id=0, group_id=0, task=None, seed=0, member=0)
        traj.turns.append(TurnRecord(0, "p", 0, str(out), "obs", 0.0, True, False, {}, out.usage))
        json.dumps(episode_fields(traj))


def test_custom_policy_usage_of_any_shape_never_crashes_the_counters():
    """A custom policy's PolicyResponse is not checked like an openai: answer: bad counts count 0."""
    stats = RolloutStats()
    for usage in ({"completion_tokens": {"x": 1}}, {"completion_tokens": [1]}, {"completion_tokens": "7"},
                  {"completion_tokens": -1}, {"completion_tokens": 3}):
        r = PolicyResponse("a", usage)
        stats.answer(r)
        traj = Trajectory(traj_id=0, group_id=0, task=None, seed=0, member=0)
        traj.turns.append(TurnRecord(0, "p", 0, "a", "o", 0.0, True, False, {}, dict(usage, latency_s="x")))
        row = episode_fields(traj)
        assert type(row["completion_tokens"]) is int and row["policy_latency_s"] == 0.0
    assert stats.completion_tokens == 3


def test_cli_eval_survives_malformed_answers_and_names_the_fields(tmp_path):
    """`agentgym eval` against a server whose answers are malformed in turn: no crash, exit 1, every failed episode a
    typed policy_error naming its field, the valid answers played."""
    bodies = [_encode(p) for p, _ in NAMED]
    bodies += [b"[" * 100_000, b"\xff\xfe", b'{"choices": [{"message": {"content": "x"}}], "usage": {"total_tokens": '
               b"1e999}}", b"null"]
    counter = {"n": 0}

    def raw(prompt, attempt):
        counter["n"] += 1
        return bodies[counter["n"] % len(bodies)]

    out = tmp_path / "fuzz.jsonl"
    n = 12
    with ScriptedServer(raw=raw, max_requests=2000) as srv:
        res = subprocess.run([sys.executable, "-m", "agentgym.cli", "eval", "TextCraft-v0", "--split", "gen-depth1",
                              "--episodes", str(n), "--seeds", "2", "--max-turns", "3", "--policy", "openai:m",
                              "--base-url", srv.base_url, "--max-retries", "0", "--out", str(out)],
                             capture_output=True, text=True, timeout=240)
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    rows = ResultsFile(out).read()
    assert len(rows) == 2 * n
    errors = [r["error"] for r in rows if r["error"] is not None]
    assert errors and all(e["kind"] == "policy_error" and e["details"]["field"] for e in errors)
    assert "policy_error x" in res.stderr and "malformed answer" in res.stderr
    assert any(r["turns"] > 0 for r in rows)  # the valid answers were played
