"""Goal generation against verl-agent's goal lists for seeds 0 and 1000, and the splits."""

from __future__ import annotations

import json

import pytest

from agentgym.envs.webshop.goals import (SPLIT_RANGES, goal_content, goal_list, split_indices,
                                        verl_agent_goal_indices, verl_agent_val_tasks, verl_agent_worker_seed)


@pytest.fixture(scope="module")
def goal_ref(ws_ref):
    with open(ws_ref("synthetic_goals_seed0_seed1000.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("seed", [0, 1000])
def test_goal_list_equals_verl_agent(catalog, goal_ref, seed):
    goals, prices = goal_list(catalog, seed)
    ref = goal_ref["seeds"][str(seed)]
    assert goal_ref["fields"] == ["asin", "price_upper", "instruction_text", "goal_options"]
    mine = [[g.asin, g.price_upper, g.instruction, g.goal_options] for g in goals]
    assert len(mine) == 6910 and mine == ref["goals"]
    assert {a: prices[a] for a in ref["ranged_product_prices"]} == ref["ranged_product_prices"]
    assert [g.index for g in goals] == list(range(6910)) and {g.seed for g in goals} == {seed}


def test_goal_facts(catalog):
    goals, _ = goal_list(catalog, 0)
    g0 = goals[0]
    assert (g0.asin, g0.price_upper) == ("B07GYWW3NY", 80.0)
    assert g0.instruction == ("Find me straight leg, machine washable men's jeans with color: coal grey, and size: "
                              "36w x 32l, and price lower than 80.00 dollars")
    assert len({g.asin for g in goals}) == 415
    assert sum(g.price_upper == 1000000 for g in goals) == 15
    counts = [len(g.goal_options) for g in goals]
    assert [counts.count(k) for k in range(4)] == [185, 538, 4729, 1458]
    human, _ = goal_list(catalog, 0, "human")
    assert len(human) == 13 and all(isinstance(g.goal_options, list) for g in human)


@pytest.mark.parametrize("seed", [0, 1000])
def test_test_split_is_held_out_by_content(catalog, seed):
    """WebShop's list repeats goals (a product whose option list repeats a value); train drops the goals whose
    content equals a test goal, so no test task is trained on. Indices stay those of the global list."""
    goals, _ = goal_list(catalog, seed)
    test, train, everything = (split_indices(s, catalog, seed) for s in ("test", "train", "all"))
    assert test == tuple(range(500)) and everything == tuple(range(6910))
    assert not {goal_content(goals[i]) for i in test} & {goal_content(goals[i]) for i in train}
    dropped = sorted(set(range(500, 6910)) - set(train))
    assert all(goal_content(goals[i]) in {goal_content(goals[k]) for k in test} for i in dropped)
    if seed == 0:
        assert dropped == [4933, 5641] and len(train) == 6408  # = test goals 33 and 85
        assert (goals[33].asin, goals[85].asin) == ("B099WH1RTM", "B08G14B779")
        # The other repeats lie inside train (9 repeated pairs in all), as in WebShop.
        contents = [goal_content(g) for g in goals]
        assert len(contents) - len(set(contents)) == 9
    assert set(SPLIT_RANGES) == {"test", "train", "all"}


def test_verl_agent_worker_seeds():
    assert [verl_agent_worker_seed(i, group_n=8) for i in (0, 7, 8, 15, 16)] == [0, 0, 1, 1, 2]
    assert verl_agent_worker_seed(3, validation=True) == 1003


def test_goal_lists_are_seeded_not_global(catalog):
    import random

    random.seed(12345)
    state = random.getstate()
    a, _ = goal_list(catalog, 7)
    assert random.getstate() == state  # the global RNG is untouched
    b, _ = goal_list(catalog, 8)
    assert [g.instruction for g in a] != [g.instruction for g in b]


def test_verl_agent_samplers():
    import numpy as np

    first = np.random.RandomState(1000).choice(range(500), 128, replace=False).tolist()
    assert verl_agent_goal_indices(1000, 128, validation=True)[0] == first
    assert verl_agent_val_tasks() == [(1000 + i, k) for i, k in enumerate(first)]
    train = verl_agent_goal_indices(0, 16, validation=False, group_n=8, rounds=2)
    assert len(train) == 2 and len(train[0]) == 128 and all(500 <= k < 6910 for k in train[0])
    assert train[0][:8] == [train[0][0]] * 8 and train[0] != train[1]


def test_verl_agent_val_split_plays_each_workers_goal(catalog, goal_ref):
    import agentgym

    env = agentgym.make("WebShop-v0", split="verl-agent-val")
    ids = env.task_ids()
    assert len(ids) == 128 and ids[0].startswith("ws1000-")
    index0 = int(ids[0].split("-")[1])
    _, info = env.reset(options={"task_id": ids[0]})
    ref = goal_ref["seeds"]["1000"]["goals"][index0]
    assert (env.task.asin, env.task.price_upper, env.task.instruction) == tuple(ref[:3])
    env.reset(options={"task_id": ids[1]})
    assert env.task.seed == 1001
