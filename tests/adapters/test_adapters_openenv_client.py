"""openenv's own client against ``agentgym serve``: ``GenericEnvClient`` (an ``EnvClient``) plays TextCraft, WebShop
and TauAirline episodes over the /ws session to the same observations, rewards, ``obs_hash``es and ``info`` as
in-process play, with the oracle and a random policy; 32 concurrent sessions (and a 33rd refused); a killed client's
session freed.

openenv cannot share the main test venv (0.10 needs mcp<2 through fastmcp 3, verifiers[openenv] pins mcp==2.0.0), so
.ci/run runs this file in two venvs of its own: ``.ci-openenv-venv`` (openenv 0.10) and ``.ci-verifiers-venv``
(openenv 0.4.1, what verifiers[openenv] 0.4 resolves to). Elsewhere it skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

openenv = pytest.importorskip("openenv", reason="openenv's client runs in its own venv (.ci/run: .ci-openenv-venv "
                                                "with openenv 0.10, .ci-verifiers-venv with openenv 0.4.1)")
pytest.importorskip("fastapi", reason="agentgym serve needs the serve extra: pip install -e '.[serve]'")

import agentgym  # noqa: E402
from agentgym.serve import LocalServer  # noqa: E402
from agentgym.registration import get_entry  # noqa: E402
from openenv import GenericEnvClient  # noqa: E402

# (env id, split, env kwargs, tasks played per policy). max_turns keeps random episodes short on both sides.
CASES = {
    "TextCraft-v0": ("adapt-test", {}, 2),
    "WebShop-v0": ("test", {"max_turns": 10}, 2),
    "TauAirline-v0": ("test", {"max_turns": 16}, 2),
}


def _jsonable(x):
    return json.loads(json.dumps(x))


def _play_in_process(env_id: str, task_id: str, seed: int, policy: str) -> dict:
    """One in-process episode: the responses, and every (observation, reward, terminated, truncated, info)."""
    split, kwargs, _ = CASES[env_id]
    env = agentgym.make(env_id, split=split, **kwargs)
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    rng = np.random.default_rng([seed, 7])
    first = {"text": obs, "info": _jsonable(info), "prompt": env.prompt()}
    steps, done = [], False
    while not done:
        action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
        obs, r, term, trunc, info = env.step(action)
        steps.append({"action": action, "text": obs, "reward": r, "terminated": term, "truncated": trunc,
                      "info": _jsonable(info), "prompt": env.prompt()})
        done = term or trunc
    env.close()
    return {"first": first, "steps": steps}


def _check_remote(result, want: dict) -> None:
    ob = result.observation
    assert ob["text"] == want["text"] and ob["info"] == want["info"] and ob["prompt"] == want["prompt"]
    assert ob["info"]["obs_hash"] == want["info"]["obs_hash"]
    if "reward" in want:
        assert result.reward == want["reward"]
        assert (ob["terminated"], ob["truncated"]) == (want["terminated"], want["truncated"])
        assert result.done == (want["terminated"] or want["truncated"])


@pytest.fixture(scope="module", params=list(CASES))
def served(request):
    env_id = request.param
    split, kwargs, _ = CASES[env_id]
    ok, why = get_entry(env_id).split_available(split)
    if not ok:
        pytest.skip(f"{env_id} {split}: {why}")
    with LocalServer(env_id, split=split, env_args=kwargs, max_sessions=32) as srv:
        yield env_id, srv


@pytest.mark.parametrize("policy", ["oracle", "random"])
def test_openenv_client_plays_like_in_process(served, policy):
    env_id, srv = served
    split, kwargs, n = CASES[env_id]
    task_ids = agentgym.make(env_id, split=split).task_ids(n)
    rewards = []
    for i, task_id in enumerate(task_ids):
        want = _play_in_process(env_id, task_id, seed=i, policy=policy)
        with GenericEnvClient(base_url=srv.url).sync() as client:
            result = client.reset(seed=i, task_id=task_id)
            assert result.done is False and result.reward is None
            _check_remote(result, want["first"])
            for step in want["steps"]:
                result = client.step({"action": step["action"]})
                _check_remote(result, step)
            assert result.done
            state = client.state()
            assert state["task_id"] == task_id and state["step_count"] == len(want["steps"])
        rewards.append(sum(s["reward"] for s in want["steps"]))
    if policy == "oracle":  # the replay is not vacuous: the oracle solves these tasks
        assert all(r > 0 for r in rewards), rewards


@pytest.mark.parametrize("served", ["TextCraft-v0"], indirect=True)
def test_openenv_client_32_concurrent_sessions(served):
    env_id, srv = served
    split, kwargs, _ = CASES[env_id]
    task_ids = agentgym.make(env_id, split=split).task_ids(32)
    wants = [_play_in_process(env_id, t, seed=100 + i, policy="oracle") for i, t in enumerate(task_ids)]

    async def main():
        clients = [GenericEnvClient(base_url=srv.url) for _ in task_ids]
        try:
            firsts = await asyncio.gather(*(c.reset(seed=100 + i, task_id=t)
                                            for i, (c, t) in enumerate(zip(clients, task_ids))))
            assert srv.get("/sessions")["active_sessions"] == 32
            extra = GenericEnvClient(base_url=srv.url)
            with pytest.raises(Exception, match="CAPACITY_REACHED"):  # the 33rd session is refused
                await extra.reset(seed=0)
            await extra.close()

            async def play(c, first, want):
                _check_remote(first, want["first"])
                for step in want["steps"]:
                    _check_remote(await c.step({"action": step["action"]}), step)

            await asyncio.gather(*(play(c, f, w) for c, f, w in zip(clients, firsts, wants)))
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

    asyncio.run(asyncio.wait_for(main(), timeout=240))
    deadline = time.monotonic() + 30
    while srv.get("/sessions")["active_sessions"]:
        assert time.monotonic() < deadline, "sessions not freed after the clients closed"
        time.sleep(0.05)


@pytest.mark.parametrize("served", ["TextCraft-v0"], indirect=True)
def test_openenv_killed_client_frees_its_session(served):
    env_id, srv = served
    code = ("import sys, time\nfrom openenv import GenericEnvClient\n"
            f"c = GenericEnvClient(base_url={srv.url!r}).sync()\nc.connect()\nc.reset(seed=0)\n"
            "print('ready', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"  # bounded: the child's client times out within 60 s
        assert srv.get("/sessions")["active_sessions"] == 1
        os.kill(proc.pid, signal.SIGKILL)  # no close frame, no graceful anything
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    deadline = time.monotonic() + 60
    while srv.get("/sessions")["active_sessions"]:
        assert time.monotonic() < deadline, "the killed client's session was not freed"
        time.sleep(0.05)
