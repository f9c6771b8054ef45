"""Generated splits never repeat a task silently (issue 32): within each, no two task ids give the same task
(``AgentEnv.task_identity``), a generator whose pool is smaller than its id range lists exactly its pool and refuses
ids past it, and a seed still draws a task of the split, reproducibly.

What "the same task" means is each env's (see its ``_task_identity``): TextCraft the targets, initial inventory and
``get`` rule (one goal item per generated task); ALFWorld the game (family, goal and task text, room, receptacles
and the object types in each); AppWorld the instruction, initial app state and expected outcome.

Every split is enumerated whole, except ALFWorld's ``generated``, whose games cost about a second each to build: its
listed split (the default 60 ids) is proven free of repeats without building a game, by checking every scene the
generator may keep for each index against all the others' (``find_repeated_games``); the first 12 games are built
to check that a written game has the identity of the scene it was drawn from. The whole id range (10,000) was checked
the same way with ``agentgym alfworld check-distinct --n 10000`` (agentgym/envs/alfworld/README.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import agentgym
from agentgym.core import AgentEnv
from agentgym.errors import TaskError
from agentgym.registration import ENVS

ENTRIES = {e.env_id: e for e in ENVS}
#: (env id, split) of every generated split
TEXTCRAFT = [("TextCraft-v0", f"gen-depth{d}") for d in (1, 2, 3, 4)]
APPWORLD = [("AppWorld-v0", s) for s in ("gen-train", "gen-dev", "gen-test", "gen-all")]
ALFWORLD = ("ALFWorld-v0", "generated")


def make(env_id: str, split: str, **kwargs) -> AgentEnv:
    ok, why = ENTRIES[env_id].split_available(split)
    if not ok:
        pytest.skip(f"{env_id} split {split!r} unavailable here: {why}")
    return agentgym.make(env_id, split=split, **kwargs)


def repeated(env: AgentEnv, ids: list[str]) -> dict[str, list[str]]:
    by_identity: dict[str, list[str]] = {}
    for tid in ids:
        by_identity.setdefault(env.task_identity(tid), []).append(tid)
    return {k: v for k, v in by_identity.items() if len(v) > 1}


@pytest.mark.parametrize("env_id, split", TEXTCRAFT + APPWORLD)
def test_no_two_ids_of_a_generated_split_give_the_same_task(env_id, split):
    env = make(env_id, split)
    ids = env.task_ids()
    assert len(ids) == len(set(ids)) > 0
    assert not repeated(env, ids)


@pytest.mark.parametrize("env_id, split", TEXTCRAFT)
def test_textcraft_generated_split_is_one_task_per_goal_item_and_says_how_many(env_id, split):
    env = make(env_id, split)
    depth = int(split[-1])
    ids = env.task_ids()
    goals = [next(iter(env.get_task(t).targets)) for t in ids]
    assert sorted(goals) == env.graph.items_with_depth(depth)  # every goal item of the depth, once
    # The evidence was repeated first observations: none now.
    first = [env.reset(seed=0, options={"task_id": t})[0] for t in ids]
    assert len(set(first)) == len(ids)
    # The split says how many tasks it has: in `agentgym list` and in the refusal of the id past its end.
    assert ENTRIES[env_id].splits[split].startswith(f"{len(ids)} seeded generated tasks, one per goal item")
    with pytest.raises(TaskError, match=rf"has {len(ids)} tasks, one per goal item of crafting depth {depth}"):
        env.get_task(f"gen-d{depth}-{len(ids)}")
    with pytest.raises(TaskError, match=rf"out of range .* \({len(ids)} tasks\)$"):
        env.reset(options={"task_index": len(ids)})
    assert env.task_ids(len(ids) + 5) == ids  # a limit past the end lists the pool, never repeats it
    # A seed draws a task of the split, the same one every time.
    drawn = [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    assert drawn == [env.reset(seed=s)[1]["task_id"] for s in range(8)] and set(drawn) <= set(ids)


def test_alfworld_generated_split_cannot_repeat_a_game():
    env = make(*ALFWORLD)
    from agentgym.envs.alfworld.games import GENERATED_LIMIT, GENERATED_SEED
    from agentgym.envs.alfworld.generate import candidate_identities, find_repeated_games, game_identity

    ids = env.task_ids()
    assert ids == [f"gen-{i}" for i in range(60)]
    # The whole listed split, whichever attempt alfworld's expert keeps for each game.
    check = find_repeated_games(GENERATED_SEED, len(ids))
    assert check.repeats == () and check.candidates >= len(ids)
    # Built games: each has the identity of the scene it was drawn from, and they are distinct.
    built = ids[:12]
    for tid in built:
        gamefile = Path(env.get_task(tid).gamefile)
        traj = json.loads((gamefile.parent / "traj_data.json").read_text())
        index, attempt = traj["agentgym"]["index"], traj["agentgym"]["attempt"]
        candidates = dict(candidate_identities(GENERATED_SEED, index))
        assert game_identity(traj) == candidates[attempt], tid
    assert not repeated(env, built)
    # Past the checked range: refused, not played unchecked.
    last = f"gen-{GENERATED_LIMIT - 1}"
    with pytest.raises(TaskError, match=rf"^no task 'gen-{GENERATED_LIMIT}' in ALFWorld split 'generated': "
                                        rf"its ids are gen-0 \.\. {re.escape(last)}"):
        env.get_task(f"gen-{GENERATED_LIMIT}")
    with pytest.raises(TaskError, match="the range checked free of repeated games"):
        env.reset(options={"task_index": GENERATED_LIMIT})
    with pytest.raises(ValueError, match=rf"generated_size must be 1\.\.{GENERATED_LIMIT}"):
        agentgym.make("ALFWorld-v0", generated_size=GENERATED_LIMIT + 1)
    # A seed draws a game of the listed split, the same one every time.
    drawn = [env.reset(seed=s)[1]["task_id"] for s in (0, 1)]
    assert drawn == [env.reset(seed=s)[1]["task_id"] for s in (0, 1)] and set(drawn) <= set(ids)


def test_appworld_tasks_that_share_an_instruction_differ_in_their_start():
    """The suite's generators may repeat an instruction (organise my files) over different app states: different
    tasks. Its identity tells them apart; a copy of a task with a new id does not."""
    env = make(*APPWORLD[-1])
    from agentgym.envs.appworld.tasks import task_identity

    tasks = [env.get_task(t) for t in env.task_ids()]
    by_instruction: dict[str, list] = {}
    for t in tasks:
        by_instruction.setdefault(t.instruction, []).append(t)
    shared = [group for group in by_instruction.values() if len(group) > 1]
    assert shared  # the case exists in the suite
    for group in shared:
        assert len({json.dumps(task_identity(t), sort_keys=True) for t in group}) == len(group)
    copy = type(tasks[0])(**{**tasks[0].__dict__, "task_id": "copy_1"})
    assert task_identity(copy) == task_identity(tasks[0])
