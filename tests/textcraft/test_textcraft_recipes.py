"""The recipe loader and crafting graph."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentgym.envs.textcraft.recipes import Ingredient, load_recipes
from agentgym.errors import DataNotFoundError


def write(d, name, data):
    (d / f"{name}.json").write_text(json.dumps(data))


@pytest.fixture
def small(tmp_path):
    write(tmp_path, "oak_planks", {"type": "minecraft:crafting_shapeless", "group": "planks",
                                   "ingredients": [{"tag": "minecraft:oak_logs"}],
                                   "result": {"item": "minecraft:oak_planks", "count": 4}})
    write(tmp_path, "birch_planks", {"type": "minecraft:crafting_shapeless", "group": "planks",
                                     "ingredients": [{"tag": "minecraft:birch_logs"}],
                                     "result": {"item": "minecraft:birch_planks", "count": 4}})
    write(tmp_path, "stick", {"type": "minecraft:crafting_shaped", "group": "sticks", "pattern": ["#", "#"],
                              "key": {"#": {"tag": "minecraft:planks"}},
                              "result": {"item": "minecraft:stick", "count": 4}})
    write(tmp_path, "torch", {"type": "minecraft:crafting_shaped", "pattern": ["X", "#"],
                              "key": {"#": {"item": "minecraft:stick"},
                                      "X": [{"item": "minecraft:coal"}, {"item": "minecraft:charcoal"}]},
                              "result": {"item": "minecraft:torch", "count": 4}})
    write(tmp_path, "dye", {"type": "minecraft:crafting_shapeless",
                            "ingredients": [{"item": "minecraft:rose"}, {"item": "minecraft:rose"}],
                            "result": {"item": "minecraft:red_dye", "count": 1}})
    write(tmp_path, "coal_from_block", {"type": "minecraft:crafting_shapeless",
                                        "ingredients": [{"item": "minecraft:coal_block"}],
                                        "result": {"item": "minecraft:coal", "count": 9}})
    write(tmp_path, "a_to_b", {"type": "minecraft:crafting_shapeless", "ingredients": [{"item": "minecraft:x"}],
                               "result": {"item": "minecraft:y"}})
    write(tmp_path, "b_to_a", {"type": "minecraft:crafting_shapeless", "ingredients": [{"item": "minecraft:y"}],
                               "result": {"item": "minecraft:x"}})
    write(tmp_path, "smelt", {"type": "minecraft:smelting", "ingredient": {"item": "minecraft:sand"},
                              "result": "minecraft:glass"})
    return load_recipes(tmp_path)


def test_shaped_counts_from_pattern_and_first_alternative(small):
    (torch,) = small.recipes["torch"]
    assert dict((i.name, n) for i, n in torch.inputs) == {"stick": 1, "coal": 1}
    (stick,) = small.recipes["stick"]
    assert stick.inputs == ((Ingredient("planks", is_tag=True), 2),) and stick.count == 4
    assert stick.text == "craft 4 stick using 2 planks"


def test_shapeless_duplicates_merge(small):
    (dye,) = small.recipes["red_dye"]
    assert dye.inputs == ((Ingredient("rose"), 2),)


def test_tags_groups_and_demoted_tags(small):
    assert small.is_tag("planks") and small.tag_members("planks") == ["birch_planks", "oak_planks"]
    # oak_logs is carried by no craftable item: it becomes a plain, fetchable item.
    assert not small.is_tag("oak_logs") and small.is_base("oak_logs")
    assert small.matches(Ingredient("planks", True), "oak_planks")
    assert small.matches(Ingredient("oak_logs"), "oak_log")  # vanilla 1.16.5 tag member
    assert not small.matches(Ingredient("planks", True), "stick")


def test_block_uncrafting_cycle_and_non_crafting_rules(small):
    assert "coal" not in small.recipes          # single *_block input: dropped
    assert "glass" not in small.recipes         # smelting: ignored
    # x <-> y is a cycle; files are read in reverse-sorted order so b_to_a (x from y) survives.
    assert "x" in small.recipes and "y" not in small.recipes


def test_depths(small):
    assert small.depth("oak_logs") == 0 and small.depth("oak_planks") == 1
    assert small.depth("stick") == 2 and small.depth("torch") == 3
    assert small.items_with_depth(2) == ["stick"]


def test_missing_directory(tmp_path):
    with pytest.raises(DataNotFoundError):
        load_recipes(tmp_path / "nope")
    with pytest.raises(DataNotFoundError):
        load_recipes(tmp_path)  # exists but empty


def test_real_recipes_reproduce_adapt_graph(shared_data):
    """Every crafting command listed in ADaPT's 200 tasks is a recipe of our graph; goals come in descending depth."""
    graph = load_recipes(shared_data / "textcraft" / "recipes")
    texts = {r.text for rs in graph.recipes.values() for r in rs}
    rows = [json.loads(l) for l in open(shared_data / "textcraft" / "tasks" / "adapt_test_200.jsonl")]
    commands = [c for r in rows for c in r["crafting_commands"]]
    assert len(commands) > 2000 and all(c in texts for c in commands)
    depths = [graph.depth(r["goal"].removeprefix("craft ").rstrip(".").replace(" ", "_")) for r in rows]
    assert depths == sorted(depths, reverse=True) and min(depths) >= 2
    assert Counter(graph.depth(i) for i in graph.recipes)[4] == depths.count(4)


def test_packaged_recipes_equal_staged(shared_data):
    from agentgym.envs.textcraft.env import get_graph

    pkg = get_graph()
    staged = load_recipes(shared_data / "textcraft" / "recipes")
    assert {k: [r.text for r in v] for k, v in pkg.recipes.items()} == \
           {k: [r.text for r in v] for k, v in staged.recipes.items()}
