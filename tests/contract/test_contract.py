"""The environment contract, run over every registered env id (later envs inherit it by registering)."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.core import INFO_TYPES, AgentEnv
from agentgym.registration import ENVS

ENTRIES = {e.env_id: e for e in ENVS}


def make(env_id: str) -> AgentEnv:
    entry = ENTRIES[env_id]
    ok, why = entry.split_available(entry.default_split)
    if not ok:
        pytest.skip(f"{env_id} default split {entry.default_split!r} unavailable here: {why}")
    return agentgym.make(env_id)


def check_info(info: dict) -> None:
    missing = set(INFO_TYPES) - set(info)
    assert not missing, f"info lacks {sorted(missing)}"
    for key, types in INFO_TYPES.items():
        assert isinstance(info[key], types), f"info[{key!r}] is {type(info[key]).__name__}, expected {types}"
    assert 0.0 <= info["score"] <= 1.0
    assert info["progress"] is None or 0.0 <= info["progress"] <= 1.0
    assert 0 <= info["obs_hash"] < 2**63 and 0 <= info["action_key"] < 2**63


def rollout(env: AgentEnv, seed: int, policy_seed: int, n: int = 8) -> list:
    rng = np.random.default_rng(policy_seed)
    obs, info = env.reset(seed=seed)
    trace = [(obs, info["obs_hash"])]
    for _ in range(n):
        obs, r, term, trunc, info = env.step(env.random_action(rng))
        trace.append((obs, r, term, trunc, info["obs_hash"], info["action_key"]))
        if term or trunc:
            break
    return trace


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_registered_with_gymnasium(env_id):
    assert env_id in gym.registry


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_check_env(env_id):
    check_env(make(env_id), skip_render_check=True)


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_same_seed_same_episode(env_id):
    a, b = make(env_id), make(env_id)
    assert rollout(a, 7, 1) == rollout(b, 7, 1)
    # And the env's own generator decides the task: another seed usually gives another first observation.
    firsts = {make(env_id).reset(seed=s)[0] for s in range(6)}
    assert len(firsts) > 1


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_info_keys_and_types(env_id):
    env = make(env_id)
    obs, info = env.reset(seed=3)
    check_info(info)
    assert info["turn"] == 0 and info["action"] is None
    rng = np.random.default_rng(0)
    for k in range(1, 6):
        obs, r, term, trunc, info = env.step(env.random_action(rng))
        check_info(info)
        assert info["turn"] == k
        assert isinstance(r, float) and not (term and trunc)
        if term or trunc:
            break
    assert isinstance(env.prompt(), str) and env.prompt()


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_task_selection_by_id(env_id):
    env = make(env_id)
    _, info = env.reset(seed=0)
    obs1, info1 = env.reset(seed=99, options={"task_id": info["task_id"]})
    obs2, info2 = make(env_id).reset(seed=99, options={"task_id": info["task_id"]})
    assert info1["task_id"] == info["task_id"] and obs1 == obs2


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_untagged_response_is_flagged_not_raised(env_id):
    env = make(env_id)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("I think I should do something clever here.")
    assert info["action_valid"] is False and info["action"] is None
    assert "Invalid action" in obs or "invalid" in obs.lower()
    assert info["invalid_reason"]


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_invalid_action_penalty_applies(env_id):
    entry = ENTRIES[env_id]
    make(env_id)  # skips when unavailable
    env = agentgym.make(env_id, invalid_action_penalty=0.25)
    env.reset(seed=0)
    _, r, *_ = env.step("no tags at all")
    assert r == pytest.approx(-0.25)


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_step_after_end_requires_reset(env_id):
    env = make(env_id)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<action>x</action>")


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_fuzz_step_never_raises(env_id):
    env = make(env_id)
    tags = list(env.action_tags)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=st.text(max_size=80), tag=st.sampled_from(tags + ["", "act"]), seed=st.integers(0, 5))
    def fuzz(body, tag, seed):
        env.reset(seed=seed)
        response = f"<{tag}>{body}</{tag}>" if tag else body
        obs, r, term, trunc, info = env.step(response)
        check_info(info)
        assert isinstance(obs, str) and obs
        if tag not in tags or not body.strip() or "<" + tag + ">" in body:
            assert info["action_valid"] is False
        assert env.observation_space.contains(obs)

    fuzz()


def test_obs_hash_is_stable_across_processes():
    from agentgym.hashing import action_key, obs_hash

    code = ("from agentgym.hashing import obs_hash, action_key; "
            "print(obs_hash('Got 2 oak logs\\nInventory: x'), action_key('get 1 x', ''), action_key(None, 'a b c'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.split()
    assert [int(x) for x in out] == [obs_hash("Got 2 oak logs\nInventory: x"), action_key("get 1 x", ""),
                                    action_key(None, "a b c")]


def test_import_is_light():
    code = ("import sys, agentgym; heavy = [m for m in ('torch', 'transformers', 'faiss', 'trl', 'verl', "
            "'sentence_transformers', 'alfworld', 'textworld') if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
