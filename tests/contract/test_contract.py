"""The environment contract, run over every registered env id (later envs inherit it by registering)."""

from __future__ import annotations

import re
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
from agentgym.envs.textcraft.env import MAX_COUNT
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
    assert info["invalid_reason"]
    if env.run_identity().get("rules") == "canonical":
        # Canonical rules play it as the empty command: the agent reads only the canonical env's own answer.
        assert "invalid action" not in obs.lower()
    else:
        assert "Invalid action" in obs or "invalid" in obs.lower()


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


def first_well_formed(response: str, tags) -> tuple[str | None, str | None]:
    """The action the parser's documented rule (agentgym/parsing.py) picks, written independently of its regex:
    among ``tags`` (case-insensitive), the earliest ``<tag>`` whose next ``</tag>`` comes before any other ``<tag>``
    of the same name; returns (tag, stripped body), body None when that body is empty, (None, None) when none."""
    best = None
    for tag in tags:
        open_re = re.compile(re.escape(f"<{tag}>"), re.IGNORECASE)
        close_re = re.compile(re.escape(f"</{tag}>"), re.IGNORECASE)
        for m in open_re.finditer(response):
            close = close_re.search(response, m.end())
            if close is None:
                break  # no later opening tag can close either
            again = open_re.search(response, m.end())
            if again is None or again.start() >= close.start():
                if best is None or m.start() < best[0]:
                    best = (m.start(), tag, response[m.end():close.start()].strip())
                break
    if best is None:
        return None, None
    return best[1], best[2] or None


def flagged(info: dict) -> bool:
    return info["action_valid"] is False or info["process_ok"] is False or info["action_admissible"] is False


#: Tags whose body is free text rather than a command of a fixed grammar (a search query, an answer, a message to
#: the user, a code cell): any body is an action of the env, so made-up commands are checked on the other tags only.
FREE_TEXT_TAGS = {"WikiSearch-v0": {"search", "answer"}, "TauAirline-v0": {"response"},
                  "AppWorld-v0": {"code", "action"}}
#: A first word that is no command in any env's grammar (no "<", so the tag around it stays the one parsed).
NOT_A_COMMAND = st.text(alphabet=st.characters(blacklist_characters="<"), max_size=40).map(lambda s: "xq§ " + s)


def test_reference_parser_agrees_with_the_documented_examples():
    # The fuzz test's expectation (first_well_formed) and agentgym.parsing must both give the documented answers.
    from agentgym.parsing import parse_first_tag

    examples = [("<action>get 1 x", ("action",), (None, None)),
                ("<action><action>inner</action>", ("action",), ("action", "inner")),
                ("<ACTION> a </Action><action>b</action>", ("action",), ("action", "a")),
                ("<action> </action><action>b</action>", ("action",), ("action", None)),
                ("<answer>Paris</answer> <search>q</search>", ("search", "answer"), ("answer", "Paris"))]
    for text, tags, expected in examples:
        assert first_well_formed(text, tags) == expected, text
        parsed = parse_first_tag(text, tags)
        assert (parsed.tag, parsed.body) == expected, text


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_fuzz_step_never_raises(env_id):
    env = make(env_id)
    tags = list(env.action_tags)
    pieces = [f"<{t}>" for t in tags] + [f"</{t}>" for t in tags] + ["<", ">", "</", "<ACTION>", "</Action>"]
    # Bodies mixing free text with stray, nested and unbalanced tags.
    body_text = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(pieces)), max_size=6).map("".join)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=st.one_of(body_text, NOT_A_COMMAND), tag=st.sampled_from(tags + ["", "act"]), seed=st.integers(0, 5))
    def fuzz(body, tag, seed):
        env.reset(seed=seed)
        response = f"<{tag}>{body}</{tag}>" if tag else body
        obs, r, term, trunc, info = env.step(response)
        check_info(info)
        assert isinstance(obs, str) and obs and env.observation_space.contains(obs)
        want_tag, want_body = first_well_formed(response, tags)
        if want_body is None:
            assert info["action"] is None and info["action_valid"] is False
        else:
            assert (info["action_tag"], info["action"]) == (want_tag, want_body)
            if want_body.startswith("xq§") and want_tag not in FREE_TEXT_TAGS.get(env_id, ()):
                assert flagged(info), f"{want_body!r} in <{want_tag}> was not flagged: {info}"
        if flagged(info):
            assert isinstance(info["invalid_reason"], str) and info["invalid_reason"].strip()

    fuzz()


COUNT = st.one_of(st.integers(-3, 70).map(str), st.sampled_from(["0", "-0", "00", "10000", "10001", "1" + "0" * 4400]),
                  st.integers(5, 6000).map(lambda n: "9" * n))


def count_ok(text: str) -> bool:
    return len(text) <= 5 and 1 <= int(text) <= MAX_COUNT


# Batch crafting on: the train split's default, and a generated split (always available) that turns it on.
@pytest.mark.parametrize("split, kwargs", [("train", {}), ("gen-depth2", {"allow_batch_craft": True})])
def test_fuzz_textcraft_counts_with_batch_crafting(split, kwargs):
    ok, why = ENTRIES["TextCraft-v0"].split_available(split)
    if not ok:
        pytest.skip(f"TextCraft split {split!r} unavailable here: {why}")
    env = agentgym.make("TextCraft-v0", split=split, **kwargs)
    assert env.allow_batch_craft

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 50), warmup=st.integers(0, 3), line=st.integers(0, 50), kind=st.sampled_from(
        ["craft", "get"]), counts=st.lists(COUNT, min_size=1, max_size=4), item=st.sampled_from(
        ["oak planks", "oak log", "stick", "planks", "iron ingot", "cobblestone", "quartz"]))
    def fuzz(seed, warmup, line, kind, counts, item):
        env.reset(seed=seed)
        for _ in range(warmup):  # a few oracle steps, so that crafted intermediates are in the inventory
            *_, term, trunc, _ = env.step(env.oracle_action())
            if term or trunc:
                env.reset(seed=seed)
                break
        # A recipe of the task's context (or a get) with its counts replaced by fuzzed ones.
        recipe = env.task.context[line % len(env.task.context)]
        head, _, ins = recipe.partition(" using ")
        out = head.split(" ", 2)[2]
        names = [p.split(" ", 1)[1] for p in ins.split(", ")]
        if kind == "get":
            used, cmd = counts[:1], f"get {counts[0]} {item}"
        else:
            used = (counts * 4)[:1 + len(names)]
            cmd = f"craft {used[0]} {out} using " + ", ".join(f"{c} {n}" for c, n in zip(used[1:], names))
        inventory, progress, oracle = dict(env.inventory), env.progress(), env.oracle_action()
        obs, r, term, trunc, info = env.step(f"<think>x</think><action>{cmd}</action>")
        check_info(info)
        assert all(n >= 1 for n in env.inventory.values()), env.inventory
        if not all(count_ok(c) for c in used):
            assert info["process_ok"] is False and info["action_valid"] is True and info["invalid_reason"]
            assert "invalid count" in obs and r == 0 and not term
            assert env.inventory == inventory and env.progress() == progress and env.oracle_action() == oracle

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
            "'sentence_transformers', 'alfworld', 'textworld', 'appworld') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
