"""Which tasks an eval plays (agentgym.eval.sample): ``--episodes N`` a stratified, seeded, nested sample; ``--first N``
the split's first N; ``--tasks`` / ``--tasks-file`` exact ids; the selection in the run identity."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

import agentgym  # noqa: F401 - registers the env ids
from agentgym.errors import TaskError
from agentgym.eval.grid import EvalGrid, run_grid
from agentgym.eval.results import ResultsFile, ResultsMismatchError
from agentgym.eval.sample import read_tasks_file, select_tasks
from agentgym.registration import get_entry
from agentgym.rollout.policy import OraclePolicy


@dataclass(frozen=True)
class _Task:
    task_id: str
    depth: int | None = None


class FileBackedEnv:
    """The task-selection surface of an env (task_ids, get_task) over a fixed list: 60 depth-2, 30 depth-3 and 10
    depth-4 tasks, in depth order (the first N of the file are all depth 2)."""

    def __init__(self, with_depth: bool = True):
        depths = [2] * 60 + [3] * 30 + [4] * 10
        self.tasks = [_Task(f"t{i:03d}", d if with_depth else None) for i, d in enumerate(depths)]

    def task_ids(self, n=None):
        ids = [t.task_id for t in self.tasks]
        return ids if n is None else ids[:n]

    def get_task(self, task_id):
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise TaskError(f"no task {task_id!r}")


def depths(env, ids):
    return collections.Counter(env.get_task(t).depth for t in ids)


def test_episodes_is_a_proportional_nested_deterministic_sample():
    env = FileBackedEnv()
    ids, sel = select_tasks(env, episodes=10)
    assert sel == {"rule": "stratified", "by": "depth", "seed": 0}
    assert depths(env, ids) == {2: 6, 3: 3, 4: 1}  # proportional shares; first-10 would be all depth 2
    assert select_tasks(env, episodes=10)[0] == ids  # deterministic
    for n in (1, 5, 17, 33, 99):
        got = select_tasks(env, episodes=n)[0]
        assert len(got) == n and (set(got) <= set(ids) if n <= 10 else set(ids) <= set(got))  # nested
        share = depths(env, got)
        for d, size in ((2, 60), (3, 30), (4, 10)):
            assert abs(share[d] - n * size / 100) <= 1, (n, share)
    small, large = select_tasks(env, episodes=20)[0], select_tasks(env, episodes=50)[0]
    assert set(small) <= set(large)  # growing N only adds tasks
    assert select_tasks(env, episodes=20, seed=1)[0] != small  # the seed picks another sample
    assert select_tasks(env, episodes=100) == (env.task_ids(), None)  # the whole split
    with pytest.raises(TaskError, match="more than"):
        select_tasks(env, episodes=101)


def test_without_a_stratum_the_sample_is_seeded_uniform():
    env = FileBackedEnv(with_depth=False)
    ids, sel = select_tasks(env, episodes=10, seed=3)
    assert sel == {"rule": "uniform", "seed": 3} and len(ids) == 10 and ids != env.task_ids(10)


def test_first_tasks_and_tasks_file(tmp_path):
    env = FileBackedEnv()
    assert select_tasks(env, first=4) == (["t000", "t001", "t002", "t003"], {"rule": "first"})
    ids, sel = select_tasks(env, tasks=["t050", "t007"])
    assert ids == ["t050", "t007"] and sel["rule"] == "tasks" and sel["n"] == 2
    assert select_tasks(env, tasks=["t007", "t050"])[1] != sel  # another list is another selection
    with pytest.raises(TaskError, match="no task"):
        select_tasks(env, tasks=["t050", "nope"])
    with pytest.raises(TaskError, match="more than once"):
        select_tasks(env, tasks=["t050", "t050"])
    with pytest.raises(TaskError, match="one task selection"):
        select_tasks(env, first=3, episodes=3)
    f = tmp_path / "ids.txt"
    f.write_text("# a comment\nt001\n\n t002  # why\n")
    assert read_tasks_file(f) == ["t001", "t002"]


def test_generated_split_plays_its_first_n():
    import agentgym as ag

    env = ag.make("TextCraft-v0", split="gen-depth1")
    assert select_tasks(env, episodes=3) == (["gen-d1-0", "gen-d1-1", "gen-d1-2"], {"rule": "first"})
    # The split has an end (one task per goal item): all of it, or refused past it, never repeated.
    everything, record = select_tasks(env)
    assert record is None and everything == env.task_ids() and len(everything) == 147
    assert select_tasks(env, episodes=147)[0] == everything
    with pytest.raises(TaskError, match=r"--episodes 148 is more than the split's 147 tasks"):
        select_tasks(env, episodes=148)


def _adapt_test_or_skip():
    ok, why = get_entry("TextCraft-v0").split_available("adapt-test")
    if not ok:
        pytest.skip(f"TextCraft-v0 adapt-test is not available here: {why}")


def test_adapt_test_sample_covers_every_depth_and_resume_refuses_another_selection(tmp_path):
    _adapt_test_or_skip()
    import agentgym as ag

    env = ag.make("TextCraft-v0", split="adapt-test")
    ids, sel = select_tasks(env, episodes=20)
    assert depths(env, ids) == {2: 8, 3: 11, 4: 1}  # 77/112/11 of 200; the first 20 are depth 3/4 only
    out = tmp_path / "r.jsonl"
    rows = run_grid(EvalGrid("TextCraft-v0", "adapt-test", episodes=4), OraclePolicy(), out)
    assert len(rows) == 4 and all(r["selection"] == sel for r in rows)
    # a larger sample of the same rule extends the run (the 4 are kept); another rule is refused
    rows = run_grid(EvalGrid("TextCraft-v0", "adapt-test", episodes=6), OraclePolicy(), out)
    assert len(rows) == 6 and len(ResultsFile(out).read()) == 6
    with pytest.raises(ResultsMismatchError, match="selection"):
        run_grid(EvalGrid("TextCraft-v0", "adapt-test", first=6), OraclePolicy(), out)
    with pytest.raises(ResultsMismatchError, match="selection"):
        run_grid(EvalGrid("TextCraft-v0", "adapt-test", episodes=6, sample_seed=1), OraclePolicy(), out)


def test_cli_tasks_and_tasks_file(tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("gen-d1-5\ngen-d1-2\n")
    base = [sys.executable, "-m", "agentgym.cli", "eval", "TextCraft-v0", "--split", "gen-depth1", "--format", "json"]
    res = subprocess.run(base + ["--tasks-file", str(ids), "--out", str(tmp_path / "a.jsonl")], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(r["task_id"] for r in ResultsFile(tmp_path / "a.jsonl").read()) == ["gen-d1-2", "gen-d1-5"]
    res = subprocess.run(base + ["--tasks", "gen-d1-5,gen-d1-2", "--out", str(tmp_path / "a.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr  # the same ids in the same order: the same selection, resumed
    res = subprocess.run(base + ["--tasks", "gen-d1-2", "--out", str(tmp_path / "a.jsonl")], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "selection" in res.stderr  # another selection: refused
    res = subprocess.run(base + ["--tasks", "gen-d1-2", "--first", "2", "--out", str(tmp_path / "b.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "not allowed with" in res.stderr
    row = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])
    assert row["selection"]["rule"] == "tasks" and row["selection"]["n"] == 2
