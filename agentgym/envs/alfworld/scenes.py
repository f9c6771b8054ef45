"""Procedural ALFRED scenes as PDDL problems for the ``alfred.pddl`` domain (no engine import here).

A scene is one room (kitchen, living room, bedroom, bathroom) with numbered receptacles, each at its own location,
and objects placed in receptacles that can hold them. The object/receptacle vocabulary and affordances are
ALFRED's own (``alfworld.gen.constants``: which receptacle types can contain which object types, and which objects
are heatable, coolable, cleanable, sliceable, toggleable), copied here as plain data so this module imports nothing
heavy; ``tests/alfworld`` checks the copy against the installed ``alfworld`` package. The goal formulas are
ALFRED's goal library (``alfworld.gen.goal_library``) for the six ALFWorld task families, and the problem text
follows ALFRED's ``initial_state.pddl`` layout (mangled ids such as ``Apple_bar__plus_01_dot_59_bar_...`` that
ALFWorld's demangler turns into ``apple 1``), so the unmodified engine plays it.

:func:`sample_scene` draws one scene for a family from a ``numpy`` generator; :func:`scene_to_pddl` renders it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["FAMILIES", "FAMILY_SHORT", "Scene", "Placed", "sample_scene", "scene_to_pddl", "task_description",
           "SceneError", "RECEPTACLE_OBJECTS", "HEATABLE", "COOLABLE", "CLEANABLE", "SLICEABLE", "TOGGLEABLE",
           "OPENABLE", "MOVABLE_RECEPTACLES"]

#: The six ALFWorld task families, in ALFWorld's task-type order (ids 1..6).
FAMILIES: tuple[str, ...] = (
    "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
#: Column names of the papers' tables.
FAMILY_SHORT: dict[str, str] = {
    "pick_and_place_simple": "Pick", "look_at_obj_in_light": "Look", "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat", "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2"}


class SceneError(ValueError):
    """The sampled constraints cannot be met (the caller draws again)."""


def _s(text: str) -> frozenset[str]:
    return frozenset(text.split())


# ALFRED's VAL_RECEPTACLE_OBJECTS restricted to unsliced objects (ALFWorld skips sliced trajectories).
RECEPTACLE_OBJECTS: dict[str, frozenset[str]] = {
    "ArmChair": _s("BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl"),
    "BathtubBasin": _s("Cloth DishSponge HandTowel SoapBar"),
    "Bed": _s("BaseballBat BasketBall Book CellPhone Laptop Newspaper Pillow TennisRacket"),
    "Cabinet": _s("Book Bowl Box CD Candle Cloth Cup DishSponge Glassbottle HandTowel Kettle Ladle Mug Newspaper Pan "
                  "PepperShaker Plate Plunger Pot SaltShaker SoapBar SoapBottle SprayBottle TissueBox ToiletPaper "
                  "ToiletPaperRoll Vase WateringCan WineBottle"),
    "Cart": _s("Candle Cloth DishSponge HandTowel Mug PaperTowel Plunger SoapBar SoapBottle SprayBottle Statue "
               "TissueBox ToiletPaper ToiletPaperRoll Vase"),
    "CoffeeMachine": _s("Mug"),
    "CoffeeTable": _s("AlarmClock Apple BaseballBat BasketBall Book Bowl Box Bread ButterKnife CD Candle CellPhone "
                      "Cloth CreditCard Cup DishSponge Egg Fork Glassbottle HandTowel Kettle KeyChain Knife Ladle "
                      "Laptop Lettuce Mug Newspaper Pan PaperTowel Pen Pencil PepperShaker Plate Pot Potato "
                      "RemoteControl SaltShaker SoapBar SoapBottle Spatula Spoon SprayBottle Statue TennisRacket "
                      "TissueBox ToiletPaper ToiletPaperRoll Tomato Vase Watch WateringCan WineBottle"),
    "Desk": _s("AlarmClock BasketBall Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup Glassbottle KeyChain "
               "Laptop Mug Newspaper Pen Pencil Plate RemoteControl SoapBottle SprayBottle Statue TennisRacket "
               "TissueBox ToiletPaper ToiletPaperRoll Vase Watch WateringCan WineBottle"),
    "Drawer": _s("Book ButterKnife CD Candle CellPhone Cloth CreditCard DishSponge Fork HandTowel KeyChain Knife "
                 "Ladle Newspaper Pen Pencil PepperShaker RemoteControl SaltShaker SoapBar SoapBottle Spatula Spoon "
                 "SprayBottle TissueBox ToiletPaper ToiletPaperRoll Watch WateringCan"),
    "Dresser": _s("AlarmClock BasketBall Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup Glassbottle "
                  "KeyChain Laptop Mug Newspaper Pen Pencil Plate RemoteControl SprayBottle Statue TennisRacket "
                  "TissueBox ToiletPaper ToiletPaperRoll Vase Watch WateringCan WineBottle"),
    "Fridge": _s("Apple Bowl Bread Cup Egg Glassbottle Lettuce Mug Pan Plate Pot Potato Tomato WineBottle"),
    "GarbageCan": _s("Apple Bread CD Cloth DishSponge Egg HandTowel Lettuce Newspaper PaperTowel Pen Pencil Potato "
                     "SoapBar SoapBottle SprayBottle TissueBox ToiletPaper ToiletPaperRoll Tomato WineBottle"),
    "HandTowelHolder": _s("HandTowel"),
    "LaundryHamper": _s("Cloth"),
    "Microwave": _s("Apple Bowl Bread Cup Egg Glassbottle Mug Plate Potato Tomato"),
    "Ottoman": _s("BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl"),
    "Safe": _s("CD CellPhone CreditCard KeyChain Statue Vase Watch"),
    "Shelf": _s("AlarmClock Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup DishSponge Glassbottle HandTowel "
                "Kettle KeyChain Mug Newspaper PaperTowel Pen Pencil PepperShaker Plate Pot RemoteControl SaltShaker "
                "SoapBar SoapBottle SprayBottle Statue TissueBox ToiletPaper ToiletPaperRoll Vase Watch WateringCan "
                "WineBottle"),
    "SideTable": _s("AlarmClock Apple BaseballBat BasketBall Book Bowl Box Bread ButterKnife CD Candle CellPhone "
                    "Cloth CreditCard Cup DishSponge Egg Fork Glassbottle HandTowel Kettle KeyChain Knife Ladle "
                    "Laptop Lettuce Mug Newspaper Pan PaperTowel Pen Pencil PepperShaker Plate Pot Potato "
                    "RemoteControl SaltShaker SoapBar SoapBottle Spatula Spoon SprayBottle Statue TennisRacket "
                    "TissueBox ToiletPaper ToiletPaperRoll Tomato Vase Watch WateringCan WineBottle"),
    "SinkBasin": _s("Apple Bowl ButterKnife Cloth Cup DishSponge Egg Fork Glassbottle HandTowel Kettle Knife Ladle "
                    "Lettuce Mug Pan Plate Pot Potato SoapBar Spatula Spoon Tomato"),
    "Sofa": _s("BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl"),
    "StoveBurner": _s("Kettle Pan Pot"),
    "TVStand": _s("TissueBox"),
    "Toaster": frozenset(),  # holds only sliced bread
    "Toilet": _s("Candle Cloth DishSponge HandTowel Newspaper PaperTowel SoapBar SoapBottle SprayBottle TissueBox "
                 "ToiletPaper ToiletPaperRoll"),
    "ToiletPaperHanger": _s("ToiletPaper ToiletPaperRoll"),
    "TowelHolder": _s("Towel"),
}
# The same copied from ALFRED's VAL_RECEPTACLE_OBJECTS for the counter-top-like types is identical; see above.
RECEPTACLE_OBJECTS["DiningTable"] = RECEPTACLE_OBJECTS["CounterTop"] = RECEPTACLE_OBJECTS["CoffeeTable"]

HEATABLE = _s("Apple Bread Cup Egg Mug Plate Potato Tomato")
COOLABLE = _s("Apple Bowl Bread Cup Egg Lettuce Mug Pan Plate Pot Potato Tomato WineBottle")
CLEANABLE = _s("Apple Bowl ButterKnife Cloth Cup DishSponge Egg Fork Kettle Knife Ladle Lettuce Mug Pan Plate Pot "
               "Potato SoapBar Spatula Spoon Tomato")
SLICEABLE = _s("Apple Bread Egg Lettuce Potato Tomato")
TOGGLEABLE = _s("DeskLamp FloorLamp")
OPENABLE = _s("Fridge Cabinet Microwave Drawer Safe Box")
MOVABLE_RECEPTACLES = _s("Bowl Box Cup Mug Plate Pan Pot")

# Receptacle types a room may have: type -> (min, max) count. Kept close to ALFRED's floor plans.
ROOMS: dict[str, dict[str, tuple[int, int]]] = {
    "Kitchen": {"Cabinet": (2, 9), "CounterTop": (1, 3), "Drawer": (1, 6), "Fridge": (1, 1), "Microwave": (1, 1),
                "SinkBasin": (1, 1), "StoveBurner": (2, 4), "CoffeeMachine": (1, 1), "Toaster": (0, 1),
                "GarbageCan": (1, 1), "DiningTable": (0, 2), "Shelf": (0, 3), "SideTable": (0, 1)},
    "LivingRoom": {"Sofa": (1, 1), "ArmChair": (0, 2), "CoffeeTable": (1, 2), "SideTable": (0, 2),
                   "TVStand": (0, 1), "Drawer": (0, 5), "Shelf": (0, 6), "Cabinet": (0, 4), "DiningTable": (0, 1),
                   "GarbageCan": (1, 1), "Dresser": (0, 1), "Ottoman": (0, 1), "Safe": (0, 1)},
    "Bedroom": {"Bed": (1, 1), "Desk": (0, 1), "Dresser": (0, 1), "Drawer": (1, 6), "SideTable": (1, 2),
                "Shelf": (0, 5), "GarbageCan": (1, 1), "LaundryHamper": (0, 1), "ArmChair": (0, 1), "Safe": (0, 1)},
    "Bathroom": {"Toilet": (1, 1), "SinkBasin": (1, 2), "BathtubBasin": (0, 1), "CounterTop": (1, 1),
                 "Cabinet": (1, 4), "Drawer": (0, 4), "TowelHolder": (0, 1), "HandTowelHolder": (0, 2),
                 "ToiletPaperHanger": (1, 1), "GarbageCan": (1, 1), "Shelf": (0, 2), "Cart": (0, 1)},
}
# Object types that occur in each room (filtered by what the room's receptacles can hold).
ROOM_OBJECTS: dict[str, frozenset[str]] = {
    "Kitchen": _s("Apple Bread Bowl ButterKnife Cup DishSponge Egg Fork Glassbottle Kettle Knife Ladle Lettuce Mug "
                  "Pan PepperShaker Plate Pot Potato SaltShaker SoapBottle Spatula Spoon Tomato WineBottle "
                  "PaperTowel Vase"),
    "LivingRoom": _s("Book Bowl Box CellPhone CreditCard KeyChain Laptop Newspaper Pillow RemoteControl Statue Vase "
                     "Watch WateringCan TissueBox Candle Plate"),
    "Bedroom": _s("AlarmClock BaseballBat BasketBall Book Bowl Box CD CellPhone Cloth CreditCard KeyChain Laptop Mug "
                  "Pen Pencil Pillow TennisRacket Watch Vase Statue"),
    "Bathroom": _s("Candle Cloth DishSponge HandTowel Plunger SoapBar SoapBottle SprayBottle TissueBox ToiletPaper "
                   "ToiletPaperRoll Towel"),
}
# ALFRED's GOALS_VALID: the rooms each family is posed in.
FAMILY_ROOMS: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
}
_LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")

# ALFRED's goal library formulas (alfworld.gen.goal_library.gdict[...]["pddl"] with '#' already mapped to '-').
_GOAL_PLACE = """(:goal (and (exists (?r - receptacle) (exists (?o - object) (and {extra}(objectType ?o {obj}Type)
    (receptacleType ?r {recep}Type) {state}(inReceptacle ?o ?r))))))"""
_GOAL_TWO = """(:goal (and (exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 {obj}Type)
    (receptacleType ?r {recep}Type) (inReceptacle ?o1 ?r) (exists (?o2 - object) (and (not (= ?o1 ?o2))
    (objectType ?o2 {obj}Type) (receptacleType ?r {recep}Type) (inReceptacle ?o2 ?r))))))))"""
_GOAL_LOOK = """(:goal (and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and
    (objectType ?ot {toggle}Type) (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l)
    (inReceptacle ?ot ?r))) (exists (?o - object ?a - agent) (and (objectType ?o {obj}Type) (holds ?a ?o)))))"""
_STATE = {"pick_clean_then_place_in_recep": ("cleanable", "isClean"),
          "pick_heat_then_place_in_recep": ("heatable", "isHot"),
          "pick_cool_then_place_in_recep": ("coolable", "isCool")}
# ALFRED's templated goal descriptions (goal_library templates).
TEMPLATES: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "pick_clean_then_place_in_recep": ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick_two_obj_and_place": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
    "look_at_obj_in_light": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
}


@dataclass(frozen=True)
class Placed:
    """One object instance: its type, mangled id and the receptacle id it starts in."""

    otype: str
    oid: str
    receptacle: str


@dataclass(frozen=True)
class Scene:
    """A sampled room and task (everything needed to write ``initial_state.pddl`` and ``traj_data.json``)."""

    family: str
    room: str
    object_target: str
    parent_target: str
    toggle_target: str
    receptacles: tuple[tuple[str, str, str], ...]  # (rtype, receptacle id, location)
    objects: tuple[Placed, ...]
    start_location: str
    template: int
    extra: dict = field(default_factory=dict)


def _coord(v: float) -> str:
    sign = "_plus_" if v >= 0 else "_minus_"
    return sign + f"{abs(v):05.2f}".replace(".", "_dot_")


def _loc_part(v: int) -> str:
    return f"_minus_{-v}" if v < 0 else str(v)


class _Ids:
    """Unique mangled ALFRED ids (``Type|+x.xx|+y.yy|-z.zz``) and locations (``loc|a|b|r|h``)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def object_id(self, otype: str, suffix: str = "") -> str:
        while True:
            x, y, z = (float(v) for v in np.round(self.rng.uniform(-4.0, 4.0, size=3), 2))
            oid = f"{otype}_bar_{_coord(x)}_bar_{_coord(y)}_bar_{_coord(z)}{suffix}"
            if oid not in self.used:
                self.used.add(oid)
                return oid

    def location(self) -> str:
        while True:
            a, b = (int(v) for v in self.rng.integers(-12, 13, size=2))
            r = int(self.rng.integers(0, 4))
            h = int(self.rng.choice([-30, -15, 0, 15, 30, 45, 60]))
            loc = f"loc_bar_{_loc_part(a)}_bar_{_loc_part(b)}_bar_{r}_bar_{_loc_part(h)}"
            if loc not in self.used:
                self.used.add(loc)
                return loc


def _receptacle_id(ids: _Ids, rtype: str) -> str:
    # ALFRED names basins after their sink/bathtub: Sink|..|SinkBasin, which the demangler reads as "sinkbasin".
    if rtype == "SinkBasin":
        return ids.object_id("Sink", "_bar_SinkBasin")
    if rtype == "BathtubBasin":
        return ids.object_id("Bathtub", "_bar_BathtubBasin")
    return ids.object_id(rtype)


def _pick(rng: np.random.Generator, items) -> str:
    items = sorted(items)
    if not items:
        raise SceneError("nothing to choose from")
    return items[int(rng.integers(len(items)))]


def sample_scene(rng: np.random.Generator, family: str) -> Scene:
    """Draw a room, a task of ``family`` and a placement of objects; raise :class:`SceneError` if infeasible."""
    if family not in FAMILIES:
        raise ValueError(f"unknown ALFWorld family {family!r}; choose from {FAMILIES}")
    room = _pick(rng, FAMILY_ROOMS[family])
    # Pick-two rooms are kept smaller: alfworld's handcoded expert (the verifier) searches receptacle by receptacle
    # twice, and games it cannot win within 40 steps are redrawn.
    small = family == "pick_two_obj_and_place"
    counts = {rt: int(rng.integers(lo, (min(hi, lo + 2) if small else hi) + 1))
              for rt, (lo, hi) in sorted(ROOMS[room].items())}
    if family == "look_at_obj_in_light" and not any(counts.get(t, 0) for t in _LAMP_HOLDERS):
        counts["SideTable"] = 1
    ids = _Ids(rng)
    receptacles = []
    for rtype, n in counts.items():
        for _ in range(n):
            receptacles.append((rtype, _receptacle_id(ids, rtype), ids.location()))
    order = rng.permutation(len(receptacles))
    receptacles = [receptacles[i] for i in order]  # the order of the intro's receptacle list varies too
    rtypes = {r[0] for r in receptacles}
    holders = {o: sorted(rt for rt in rtypes if o in RECEPTACLE_OBJECTS[rt]) for o in ROOM_OBJECTS[room]}
    placeable = {o for o, h in holders.items() if h}

    # --- the task ---
    toggle = ""
    if family == "look_at_obj_in_light":
        toggle = "DeskLamp"
        candidates = placeable
    elif family in _STATE:
        pool = {"pick_clean_then_place_in_recep": CLEANABLE, "pick_heat_then_place_in_recep": HEATABLE,
                "pick_cool_then_place_in_recep": COOLABLE}[family]
        candidates = placeable & pool
    else:
        candidates = placeable
    obj = _pick(rng, candidates)
    parent = ""
    if family != "look_at_obj_in_light":
        banned = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
                  "pick_cool_then_place_in_recep": "Fridge"}.get(family)
        parents = [rt for rt in holders[obj] if rt != banned]
        # The target object must start outside every receptacle of the parent type, so one more holder is needed.
        parents = [p for p in parents if any(h != p for h in holders[obj])]
        if family == "pick_two_obj_and_place":
            # Both objects must end in the *same* receptacle; alfworld's handcoded expert puts each in the first
            # one of the type it reaches, so pick-two targets a receptacle type the room has once.
            # It also handles open/close poorly between the two puts, so open-able types are avoided.
            single = [p for p in parents if counts.get(p, 0) == 1 and p not in OPENABLE]
            parents = single or parents
        parent = _pick(rng, parents)

    # --- objects ---
    objects: list[Placed] = []
    by_type = {}
    for rt, rid, _ in receptacles:
        by_type.setdefault(rt, []).append(rid)

    def place(otype: str, avoid: str = "") -> None:
        options = [rid for rt in holders[otype] if rt != avoid for rid in by_type[rt]]
        if not options:
            raise SceneError(f"no receptacle for {otype}")
        objects.append(Placed(otype, ids.object_id(otype), options[int(rng.integers(len(options)))]))

    if family == "pick_two_obj_and_place":
        # Both instances start together: alfworld's handcoded expert, which verifies every game, finds a second
        # object reliably only if it has already seen it (it does not resume its search after the first put).
        place(obj, avoid=parent)
        objects.append(Placed(obj, ids.object_id(obj), objects[-1].receptacle))
    else:
        for _ in range(int(rng.integers(1, 4))):
            place(obj, avoid=parent)
    distractor_types = sorted(placeable - {obj})
    n_distractors = int(rng.integers(6, 17))
    for _ in range(n_distractors):
        place(distractor_types[int(rng.integers(len(distractor_types)))])
    if family == "look_at_obj_in_light":
        lamp_rids = [rid for rt in _LAMP_HOLDERS for rid in by_type.get(rt, [])]
        objects.append(Placed("DeskLamp", ids.object_id("DeskLamp"), lamp_rids[int(rng.integers(len(lamp_rids)))]))
    perm = rng.permutation(len(objects))
    objects = [objects[i] for i in perm]
    return Scene(family=family, room=room, object_target=obj, parent_target=parent, toggle_target=toggle,
                 receptacles=tuple(receptacles), objects=tuple(objects), start_location=ids.location(),
                 template=int(rng.integers(2)))


def task_description(scene: Scene) -> str:
    """ALFRED's templated goal text (``add_task_to_grammar`` without human annotations)."""
    tpl = TEMPLATES[scene.family][scene.template]
    return tpl.format(obj=scene.object_target.lower(), recep=scene.parent_target.lower(),
                      toggle=scene.toggle_target.lower())


def _goal(scene: Scene) -> str:
    f = scene.family
    if f == "look_at_obj_in_light":
        return _GOAL_LOOK.format(obj=scene.object_target, toggle=scene.toggle_target)
    if f == "pick_two_obj_and_place":
        return _GOAL_TWO.format(obj=scene.object_target, recep=scene.parent_target)
    extra, state = ("", "")
    if f in _STATE:
        extra, state = f"({_STATE[f][0]} ?o) ", f"({_STATE[f][1]} ?o) "
    return _GOAL_PLACE.format(obj=scene.object_target, recep=scene.parent_target, extra=extra, state=state)


ALL_RTYPES: tuple[str, ...] = tuple(sorted(RECEPTACLE_OBJECTS))
ALL_OTYPES: tuple[str, ...] = tuple(sorted(set().union(*RECEPTACLE_OBJECTS.values(), *ROOM_OBJECTS.values(),
                                                       TOGGLEABLE, MOVABLE_RECEPTACLES)))


def scene_to_pddl(scene: Scene, problem_name: str) -> str:
    """The ``initial_state.pddl`` text of ``scene`` (every object and receptacle type is declared, as ALFRED does)."""
    otypes, rtypes = ALL_OTYPES, ALL_RTYPES
    loc_of = {rid: loc for _, rid, loc in scene.receptacles}
    lines_obj = ["agent1 - agent"]
    lines_obj += [f"{t}Type - otype" for t in otypes]
    lines_obj += [f"{t}Type - rtype" for t in rtypes]
    lines_obj += [f"{o.oid} - object" for o in scene.objects]
    lines_obj += [f"{rid} - receptacle" for _, rid, _ in scene.receptacles]
    locations = [loc for _, _, loc in scene.receptacles] + [scene.start_location]
    lines_obj += [f"{loc} - location" for loc in locations]

    init = [f"(atLocation agent1 {scene.start_location})"]
    present_rtypes = sorted({rt for rt, _, _ in scene.receptacles})
    for rt in present_rtypes:
        init += [f"(canContain {rt}Type {ot}Type)" for ot in sorted(RECEPTACLE_OBJECTS[rt])]
    for rt, rid, loc in scene.receptacles:
        init.append(f"(receptacleType {rid} {rt}Type)")
        init.append(f"(receptacleAtLocation {rid} {loc})")
        if rt in OPENABLE:
            init.append(f"(openable {rid})")
    for o in scene.objects:
        init.append(f"(objectType {o.oid} {o.otype}Type)")
        init.append(f"(inReceptacle {o.oid} {o.receptacle})")
        init.append(f"(objectAtLocation {o.oid} {loc_of[o.receptacle]})")
        if o.otype in TOGGLEABLE:
            init.append(f"(toggleable {o.oid})")
            continue
        init.append(f"(pickupable {o.oid})")
        for flag, pool in (("cleanable", CLEANABLE), ("heatable", HEATABLE), ("coolable", COOLABLE),
                           ("sliceable", SLICEABLE), ("isReceptacleObject", MOVABLE_RECEPTACLES)):
            if o.otype in pool:
                init.append(f"({flag} {o.oid})")
    body = "\n        ".join(lines_obj)
    facts = "\n        ".join(init)
    return (f"\n(define (problem {problem_name})\n(:domain alfred)\n(:objects\n        {body}\n        )\n"
            f"    (:init\n        {facts}\n        )\n    {_goal(scene)}\n)\n")
