"""TextCraft-v0: Minecraft crafting by text commands (see :mod:`.env`, :mod:`.tasks`, :mod:`.recipes`)."""

from ...registration import EnvEntry

_TC_RECIPES = ("textcraft/recipes", ("textcraft", "data", "recipes"))

ENTRY = EnvEntry(
    env_id="TextCraft-v0",
    entry_point="agentgym.envs.textcraft.env:TextCraftEnv",
    splits={
        "adapt-test": "the 200 ADaPT evaluation goals (depth 2-4), built from the recipes by ADaPT's rule",
        "adapt-test-recorded": "the same 200 goals with the crafting commands ADaPT's published run showed",
        "train": "952 multi-target tasks (of 1,000) with initial inventory and gold trajectory",
        "val": "98 multi-target tasks (of 100) with initial inventory and gold trajectory",
        "gen-depth1": "147 seeded generated tasks, one per goal item of crafting depth 1",
        "gen-depth2": "274 seeded generated tasks, one per goal item of crafting depth 2",
        "gen-depth3": "112 seeded generated tasks, one per goal item of crafting depth 3",
        "gen-depth4": "11 seeded generated tasks, one per goal item of crafting depth 4",
    },
    default_split="adapt-test",
    extra="textcraft",
    data={
        "adapt-test": _TC_RECIPES,  # built from the recipes by ADaPT's rule (adapt.py)
        "adapt-test-recorded": ("textcraft/tasks/adapt_test_200.jsonl", None),
        "train": ("textcraft/tasks/textcraft_train.jsonl", None),
        "val": ("textcraft/tasks/textcraft_val.jsonl", None),
        "gen-depth1": _TC_RECIPES, "gen-depth2": _TC_RECIPES, "gen-depth3": _TC_RECIPES,
        "gen-depth4": _TC_RECIPES,
    },
    description="Minecraft crafting by text commands (ADaPT's TextCraft), with an oracle planner",
)
