"""Our AppWorld task set, failure classification and where setup records the venv: no AppWorld venv needed."""

from __future__ import annotations

import re
import sys
from collections import Counter

import pytest

from agentgym.envs.appworld.env import FAILURE_MARKER, is_failure, scenario_goal_completion
from agentgym.envs.appworld.tasks import load_tasks, scenario_of, split_task_ids


def test_task_set_size_apps_and_scenarios():
    tasks = load_tasks()
    assert len(tasks) >= 20
    assert len({a for t in tasks for a in t.apps}) >= 3
    per_scenario = Counter(t.scenario for t in tasks)
    assert all(n >= 2 for n in per_scenario.values()), per_scenario  # SGC is meaningful
    assert len({t.task_id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.task_id.count("_") == 1 and scenario_of(t.task_id) == t.scenario
        assert t.solution and t.wrong_solution and t.instruction
        assert not any(re.search(r"\$[a-z_{]", text) for text in (t.instruction, *t.solution, *t.wrong_solution))
        assert "complete_task" in t.solution[-1]


def test_splits_are_disjoint_and_cover_three_apps_in_test():
    train, test = set(split_task_ids("train")), set(split_task_ids("test"))
    assert train and test and not (train & test)
    assert set(split_task_ids("all")) == train | test
    apps = {a for t in load_tasks() if t.task_id in test for a in t.apps}
    assert len(apps) >= 3


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
    res = [("a_1", True), ("a_2", True), ("b_1", True), ("b_2", False)]
    assert scenario_goal_completion(res) == 0.5
    assert scenario_goal_completion([]) == 0.0


def test_setup_root_is_found_afterwards(tmp_path, monkeypatch):
    """``agentgym appworld setup --root DIR`` records DIR where a plain lookup finds it (the pip install itself is
    not re-run here: the record and the lookup are what this checks)."""
    from agentgym.envs.appworld.setup import find_install, record_install

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
