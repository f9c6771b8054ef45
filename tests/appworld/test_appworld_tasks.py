"""Our generated AppWorld task suite (size, apps, scenarios, levels, disjoint splits, deterministic build), failure
classification, goal completion per level, and where setup records the venv: no AppWorld venv needed."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

import pytest

from agentgym.envs.appworld.env import FAILURE_MARKER, is_failure
from agentgym.envs.appworld.tasks import load_tasks, scenario_of, split_tasks


def test_suite_size_apps_scenarios_levels_and_splits():
    tasks = load_tasks()
    assert len(tasks) >= 200 and len({t.task_id for t in tasks}) == len(tasks)
    assert len({a for t in tasks for a in t.apps}) >= 6
    scenarios = Counter(t.scenario for t in tasks)
    assert len(scenarios) >= 30 and all(n >= 2 for n in scenarios.values()), scenarios  # SGC is meaningful
    by_split = {s: split_tasks(s) for s in ("gen-train", "gen-dev", "gen-test")}
    assert sum(map(len, by_split.values())) == len(tasks) == len(split_tasks("gen-all"))
    sets = {s: {t.scenario for t in ts} for s, ts in by_split.items()}
    assert not (sets["gen-train"] & sets["gen-dev"] or sets["gen-train"] & sets["gen-test"]
                or sets["gen-dev"] & sets["gen-test"]), "splits share a scenario"
    for split, ts in by_split.items():
        assert {t.difficulty for t in ts} == {1, 2, 3}, split  # every split has the three levels
    # Level 3 is multi-app, as AppWorld's is.
    assert all(len(t.apps) >= 2 for t in tasks if t.difficulty == 3)
    for t in tasks:
        assert t.task_id == f"{t.scenario}_{t.task_id.rsplit('_', 1)[1]}" and t.task_id.count("_") == 1
        assert scenario_of(t.task_id) == t.scenario and t.scenario.isalnum()
        assert t.solution and t.wrong_solution and t.instruction and t.difficulty in (1, 2, 3)
        assert not any(re.search(r"\$[a-z_{]", text) for text in (t.instruction, *t.solution, *t.wrong_solution))
        assert "complete_task" in t.solution[-1] and t.solution != t.wrong_solution
        for cell in (*t.solution, *t.wrong_solution):
            compile(cell, t.task_id, "exec")  # every cell is Python


def test_the_suite_builds_deterministically_across_processes():
    """The build's content hash (over every task's spec) is the same in a fresh interpreter with another hash seed:
    nothing random but the generators' own seeded draws feeds the suite."""
    import subprocess

    from agentgym.envs.appworld.tasks import suite_digest

    code = "from agentgym.envs.appworld.tasks import suite_digest; print(suite_digest())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.strip()
    assert out == suite_digest() and len(out) == 16


def test_old_split_names_say_where_they_went():
    from agentgym.envs.appworld import ENTRY
    from agentgym.errors import TaskError

    for old, new in (("test", "gen-test"), ("all", "gen-all")):
        with pytest.raises(TaskError, match=new):
            split_tasks(old)
        ok, why = ENTRY.split_available(old)
        assert not ok and new in why
    # Each split lists every scenario's first task before any second one (--first N samples scenarios).
    dev = split_tasks("gen-dev")
    n_scen = len({t.scenario for t in dev})
    assert {t.task_id.rsplit("_", 1)[1] for t in dev[:n_scen]} == {"1"}


def test_difficulty_levels_follow_the_gold_solutions_calls():
    from agentgym.envs.appworld.suite import level_of

    assert level_of({"supervisor": 3, "simple_note": 4}) == 1
    assert level_of({"supervisor": 3, "simple_note": 5}) == 2
    assert level_of({"simple_note": 2, "todoist": 3, "api_docs": 9}) == 2
    assert level_of({"simple_note": 4, "todoist": 6}) == 3
    assert level_of({"phone": 1, "venmo": 1, "gmail": 1}) == 3


def test_goal_completion_per_level():
    from agentgym.eval.summary import format_goal_completion, goal_completion_by_level

    rows = [{"scenario_id": "a", "difficulty": 1, "won": True, "error": None},
            {"scenario_id": "a", "difficulty": 1, "won": True, "error": None},
            {"scenario_id": "b", "difficulty": 1, "won": False, "error": None},
            {"scenario_id": "b", "difficulty": 1, "won": True, "error": None},
            {"scenario_id": "c", "difficulty": 3, "won": True, "error": None},
            {"scenario_id": "c", "difficulty": 3, "won": False, "error": {"kind": "env_crash"}}]
    table = goal_completion_by_level(rows)
    assert table == [{"level": 1, "episodes": 4, "tgc": 0.75, "scenarios": 2, "sgc": 0.5},
                     {"level": 3, "episodes": 1, "tgc": 1.0, "scenarios": 1, "sgc": 1.0},
                     {"level": "All", "episodes": 5, "tgc": 0.8, "scenarios": 3, "sgc": 2 / 3}]
    assert "| 1 | 4 | 75.0 | 2 | 50.0 |" in format_goal_completion(table)
    assert goal_completion_by_level([{"won": True}]) is None


@pytest.mark.parametrize("output,failed", [
    ("Execution failed. Traceback:\nSyntax error in line:\nx = \nMessage: invalid syntax", True),
    ("Execution failed. Traceback:\n  File \"<python-input>\", line 1\nZeroDivisionError: division by zero", True),
    ("Execution failed. Traceback:\nUsage of the following module is not allowed: socket.", True),
    ("Execution failed. Traceback:\nException: Execution timed out after 10 seconds.", True),
    ("Execution failed. Traceback:\nException: Response status code is 401:\n{\"message\": \"x\"}", True),
    ("{\"message\": \"Note created.\", \"note_id\": 2}\n", False),
    ("Execution successful.", False),
    ("\n  Execution failed. Traceback:\nNameError: name 'x' is not defined", True),
    ("the text Execution failed. inside normal output", False),
    ("print('" + FAILURE_MARKER + "')", False),
])
def test_failure_marker_classification(output, failed):
    assert is_failure(output) == failed


def test_scenario_goal_completion():
    from agentgym.eval.summary import scenario_goal_completion as sgc

    res = [("a_1", True), ("a_2", True), ("b_1", True), ("b_2", False)]
    assert sgc([{"scenario_id": scenario_of(t), "won": w} for t, w in res]) == (0.5, 2)
    assert sgc([]) is None


def test_setup_root_is_found_afterwards(tmp_path, monkeypatch):
    """``agentgym appworld setup --root DIR`` records DIR where a plain lookup finds it (the pip install itself is
    not re-run here: the record and the lookup are what this checks)."""
    from agentgym.envs.appworld.install import find_install, record_install

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AGENTGYM_APPWORLD_HOME", raising=False)
    root = tmp_path / "elsewhere"
    root.mkdir()
    assert find_install() is None
    record_install(root, sys.executable)
    found = find_install()
    assert found is not None and found.root == root.resolve() and str(found.python) == sys.executable
    # $AGENTGYM_APPWORLD_HOME still decides when set; an install in the default home wins over the pointer.
    monkeypatch.setenv("AGENTGYM_APPWORLD_HOME", str(tmp_path / "nothing-here"))
    assert find_install() is None
    monkeypatch.delenv("AGENTGYM_APPWORLD_HOME")
    home = tmp_path / "home" / ".cache" / "agentgym" / "appworld"
    record_install(home, sys.executable)
    assert find_install().root == home.resolve()
