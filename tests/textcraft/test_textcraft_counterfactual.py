"""TextCraft's counterfactual worlds (``TextCraft-v0(counterfactual=...)``, an opt-in training mode): the canonical
game over renamed items, played in lockstep with the real game; redrawn counts; excluded names never shown."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.envs.textcraft.counterfactual import context_names
from agentgym.envs.textcraft.env import TextCraftEnv
from agentgym.envs.textcraft.recipes import display_name
from agentgym.errors import TaskError

HELD = [f"gen-d1-{i}" for i in range(40)]
_GET = re.compile(r"^get (\d+) (.+)$")
_CRAFT = re.compile(r"^craft (\d+) (.+?) using (.+)$")


def _rename(words: dict[str, str], name: str) -> str:
    return " ".join(words[w] for w in name.split(" "))


def _to_game(inverse: dict[str, str], command: str) -> str:
    """A command of the renamed world written with the game's names (names only: counts and keywords stay)."""
    def back(name: str) -> str:
        return " ".join(inverse.get(w, w) for w in name.split(" "))
    m = _GET.match(command)
    if m:
        return f"get {m.group(1)} {back(m.group(2))}"
    m = _CRAFT.match(command)
    if m:
        parts = [p.split(" ", 1) for p in m.group(3).split(", ")]
        ins = ", ".join(f"{p[0]} {back(p[1])}" if len(p) == 2 else p[0] for p in parts)
        return f"craft {m.group(1)} {back(m.group(2))} using {ins}"
    return command


def _perturb(command: str, rng: np.random.Generator) -> str:
    """What an RL policy writes: the command, a count off by one, a dropped ingredient, or the command again."""
    u = rng.random()
    if u < 0.25:
        return re.sub(r"\d+", lambda m: str(int(m.group()) + 1), command, count=1)
    if u < 0.4 and ", " in command:
        return command.rsplit(", ", 1)[0]
    return command


@pytest.mark.parametrize("task_index", [40, 57, 71, 90, 120, 146])
def test_counterfactual_world_plays_the_canonical_game_in_lockstep(task_index):
    """counts=False: every step of the renamed world (oracle, random and perturbed commands) does what the same
    command, written with the game's names, does in the real game: reward, termination, validity, verdict and
    inventory (renamed) agree; ``Got``/``Crafted`` observations name the renamed items."""
    tid = f"gen-d1-{task_index}"
    cf = TextCraftEnv("gen-depth1", counterfactual={"exclude_tasks": HELD, "counts": False}, max_turns=12)
    game = TextCraftEnv("gen-depth1", max_turns=12)
    rng = np.random.default_rng(task_index)
    for seed in range(3):
        cf.reset(seed=seed, options={"task_id": tid})
        game.reset(seed=seed, options={"task_id": tid})
        words = cf.counterfactual_words
        inverse = {v: k for k, v in words.items()}
        assert len(inverse) == len(words)  # a bijection
        assert cf.task.context != game.task.context
        for _ in range(12):
            u = rng.random()
            response = cf.oracle_action() if u < 0.5 else cf.random_action(rng)
            command = _perturb(response.removeprefix("<action>").removesuffix("</action>"), rng)
            o1, r1, t1, tr1, i1 = cf.step(f"<action>{command}</action>")
            o2, r2, t2, tr2, i2 = game.step(f"<action>{_to_game(inverse, command)}</action>")
            assert (r1, t1, tr1) == (r2, t2, tr2)
            assert (i1["action_valid"], i1["process_ok"]) == (i2["action_valid"], i2["process_ok"])
            assert cf.inventory == {"_".join(words[w] for w in k.split("_")): v for k, v in game.inventory.items()}
            if o2.startswith("Got "):
                n, name = o2[4:].split(" ", 1)
                assert o1 == f"Got {n} {_rename(words, name)}"
            if o2.startswith("Crafted "):
                n, iid = o2[8:].split(" ", 1)
                assert o1 == f"Crafted {n} minecraft:" + "_".join(words[w] for w in iid[10:].split("_"))
            if t1 or tr1:
                break


def test_counterfactual_counts_are_redrawn_and_read_from_the_context():
    """counts=True: the shown lines carry new counts; the oracle (which reads the renamed graph) wins every
    episode, and the goal line's game counts fail wherever they differ from the shown ones."""
    env = TextCraftEnv("gen-depth1", counterfactual={"exclude_tasks": HELD})
    game = TextCraftEnv("gen-depth1")
    differ = 0
    for k, tid in enumerate(f"gen-d1-{i}" for i in range(40, 100)):
        env.reset(seed=k, options={"task_id": tid})
        game.reset(seed=k, options={"task_id": tid})
        shown = [re.findall(r"\d+", line) for line in env.task.context]
        real = [re.findall(r"\d+", line) for line in game.task.context]
        differ += shown != real
        for _ in range(8):
            _o, r, term, _tr, _i = env.step(env.oracle_action())
            if term:
                break
        assert term and r == 1.0
    assert differ >= 50  # counts drawn from the game's: most episodes show other counts than the game's


def test_counterfactual_never_shows_an_excluded_goal_and_seeds_reproduce():
    env = TextCraftEnv("gen-depth1", counterfactual={"exclude_tasks": HELD})
    excluded = {t for tid in HELD for t in env.get_task(tid).targets}
    for k in range(300):
        env.reset(seed=k, options={"task_id": f"gen-d1-{40 + k % 107}"})
        assert not set(context_names(env.task)) & excluded
        assert not any(display_name(x) in env.last_observation.split("\n")[-1] for x in excluded
                       if env.last_observation.split("\n")[-1] == f"Goal: craft {display_name(x)}.")
    a = TextCraftEnv("gen-depth1", counterfactual=True).reset(seed=7)[0]
    b = TextCraftEnv("gen-depth1", counterfactual=True).reset(seed=7)[0]
    c = TextCraftEnv("gen-depth1", counterfactual=True).reset(seed=8)[0]
    assert a == b and a != c


def test_counterfactual_is_recorded_and_checked():
    on = TextCraftEnv("gen-depth1", counterfactual={"exclude_tasks": HELD})
    ident = on.run_identity()
    assert ident["rules"] == "canonical"
    assert ident["counterfactual"]["excluded_tasks"] == len(HELD) and ident["counterfactual"]["counts"] is True
    assert TextCraftEnv("gen-depth1").run_identity() == {"rules": "canonical"}
    with pytest.raises(ValueError, match="canonical"):
        TextCraftEnv("gen-depth1", rules="lenient", counterfactual=True)
    with pytest.raises(ValueError, match="unknown keys"):
        TextCraftEnv("gen-depth1", counterfactual={"exclude": HELD})
    with pytest.raises(TaskError, match="not tasks of"):
        TextCraftEnv("gen-depth1", counterfactual={"exclude_tasks": ["gen-d1-9999"]}).reset(seed=0)
    # the real names mean nothing in a renamed world (here: no item), and the game graph is left as it was
    on.reset(seed=0, options={"task_id": "gen-d1-60"})
    game_goal = TextCraftEnv("gen-depth1").get_task("gen-d1-60").targets
    assert set(on.task.targets) != set(game_goal)
    check_env(TextCraftEnv("gen-depth1", counterfactual=True), skip_render_check=True)
