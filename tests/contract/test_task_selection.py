"""Task selection, the part of the env contract written once in :class:`agentgym.core.AgentEnv`: the same cases on
every registered env (each skipped only where its default split's data or extra is absent here)."""

from __future__ import annotations

import re

import pytest

import agentgym
from agentgym.core import AgentEnv
from agentgym.errors import TaskError
from agentgym.registration import ENVS

ENTRIES = {e.env_id: e for e in ENVS}
BAD_ID = "no-such-task-§"


def make(env_id: str, **kwargs) -> AgentEnv:
    entry = ENTRIES[env_id]
    ok, why = entry.split_available(entry.default_split)
    if not ok:
        pytest.skip(f"{env_id} default split {entry.default_split!r} unavailable here: {why}")
    return agentgym.make(env_id, **kwargs)


def first_ids(env: AgentEnv, k: int = 3) -> list[str]:
    return env.task_ids(k)  # a limit works on every split, generated ones included


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_task_ids_and_limit(env_id):
    env = make(env_id)
    ids = first_ids(env, 3)
    assert len(ids) == 3 and all(isinstance(t, str) and t for t in ids) and len(set(ids)) == 3
    assert env.task_ids(1) == ids[:1] and env.task_ids(0) == []
    try:
        everything = env.task_ids()
    except TaskError as e:  # a generated split without a default size
        assert re.fullmatch(r"split '.+' is unbounded: give the number of tasks", str(e)), str(e)
    else:
        assert everything[:3] == ids and len(set(everything)) == len(everything)
    for bad in (-1, "three", 1.5, True):
        with pytest.raises(TaskError, match="limit must be a non-negative integer"):
            env.task_ids(bad)


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_select_by_id_and_index(env_id):
    env = make(env_id)
    ids = first_ids(env, 2)
    for i, tid in enumerate(ids):
        assert env._task_id(env.get_task(tid)) == tid
        _, info = env.reset(seed=5, options={"task_id": tid})
        assert info["task_id"] == tid and env.current_task_id() == tid
        _, info = env.reset(seed=5, options={"task_index": i})
        assert info["task_id"] == tid
    # Index and id agree whatever the seed, and a numpy integer or a numeral is an index too.
    import numpy as np

    assert env.reset(seed=1, options={"task_index": np.int64(1)})[1]["task_id"] == ids[1]
    assert env.reset(seed=2, options={"task_index": "1"})[1]["task_id"] == ids[1]


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_bad_selections_raise_task_error_with_one_wording(env_id):
    env = make(env_id)
    name = type(env).__name__.removesuffix("Env")
    with pytest.raises(TaskError, match=rf"^no task '{BAD_ID}' in {name} split '.+'$"):
        env.get_task(BAD_ID)
    with pytest.raises(TaskError, match=rf"^no task '{BAD_ID}' in {name} split '.+'$"):
        env.reset(options={"task_id": BAD_ID})
    for bad in (-1, "first", None, 2.0, False):
        with pytest.raises(TaskError, match=r"^task_index must be a non-negative integer, got "):
            env.reset(options={"task_index": bad})
    try:
        n = len(env.task_ids())
    except TaskError:
        n = None
    if n is not None and env.task_ids(n + 1) == env.task_ids():  # a split with an end
        with pytest.raises(TaskError, match=rf"^task_index {n} out of range for {name} split '.+' \({n} tasks\)$"):
            env.reset(options={"task_index": n})
    with pytest.raises(TaskError, match=rf"^unknown reset options \['bogus'\]; {name} accepts \[.*'task_id'.*\]$"):
        env.reset(options={"bogus": 1})
    with pytest.raises(TaskError, match=r"each select a task; give one"):
        env.reset(options={"task_id": env.task_ids(1)[0], "task_index": 0})
    with pytest.raises(TaskError):
        env.reset(options={"task": 42})  # not a task dict (or the env takes none)
    with pytest.raises(TaskError, match="options must be a dict"):
        env.reset(options=["task_id"])
    # After all these refusals the env still plays the task it is asked for.
    tid = env.task_ids(1)[0]
    assert env.reset(seed=0, options={"task_id": tid})[1]["task_id"] == tid


@pytest.mark.parametrize("env_id", sorted(ENTRIES))
def test_seed_draw_lies_in_the_split(env_id):
    env = make(env_id)
    try:
        ids = set(env.task_ids())
    except TaskError:
        pytest.skip("a generated split without a default size: any id can be drawn")
    for seed in range(4):
        assert env.reset(seed=seed)[1]["task_id"] in ids


def test_webshop_selects_any_goal_of_the_seed_list_by_task_id_only():
    env = make("WebShop-v0")
    _, info = env.reset(options={"task_id": "ws0-4321"})  # goal 4321 of the seed list, outside the test split
    assert info["task_id"] == "ws0-4321"
    # WebShop's former goal_index option is gone (no release carried it): it is an unknown option like any other.
    accepted = r"unknown reset options \['goal_index'\]; WebShop accepts \['task', 'task_id', 'task_index'\]"
    with pytest.raises(TaskError, match=accepted):
        env.reset(options={"goal_index": 4321})


def test_alfworld_plays_a_game_file_by_task_id_only():
    env = make("ALFWorld-v0")
    game = env.get_task("gen-0").gamefile
    _, info = env.reset(options={"task_id": f"file:{game}"})
    assert info["task_id"].startswith("file:") and env.task.gamefile == game
    with pytest.raises(TaskError, match="does not exist"):
        env.reset(options={"task_id": "file:/nonexistent/game.tw-pddl"})
    with pytest.raises(TaskError, match=r"unknown reset options \['game'\]"):
        env.reset(options={"game": game})
