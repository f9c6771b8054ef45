"""The build of the task suite in the AppWorld venv: deterministic, and rebuilt when damaged (needs the venv)."""

from __future__ import annotations

import json
import logging
import os
import shutil

from appworld_gate import appworld_venv  # noqa: F401  (every test needs the venv: skipped, or failed under CI)


def test_a_damaged_build_is_rebuilt_to_the_same_manifest(tmp_path, caplog):
    """A build of a few tasks (static and generated ones, of six apps), built in two installs at two times, hashes
    the same (and reports its progress task by task); in the second, one base database written to (as a SQLite write would) is refused
    and built again, to the same manifest."""
    from agentgym.envs.appworld.install import AppWorldInstall, require_install
    from agentgym.envs.appworld.tasks import ensure_build, load_tasks, verify_build

    wanted = ("agnoteadd_1", "agvenmopay_1", "gmailsend_1", "gphonetext_1", "gspotlist_1", "xsplitvenmo_1")
    few = tuple(t for t in load_tasks() if t.task_id in wanted)
    assert len(few) == len(wanted)
    shared = require_install()
    first = AppWorldInstall(root=tmp_path / "a", python=shared.python, version=shared.version)
    reports = []
    build = ensure_build(first, few, progress=reports.append)
    assert verify_build(build) is None
    # The builder's progress, read from its output while it runs: the base databases, then one report per task.
    assert [(r.step, r.done, r.total) for r in reports] == [("build tasks", i, len(few)) for i in range(len(few) + 1)]
    assert sorted(r.detail for r in reports[1:]) == sorted(wanted)
    second = AppWorldInstall(root=tmp_path / "b", python=shared.python, version=shared.version)
    shutil.copytree(build.root, second.builds_dir / build.root.name)
    db = second.builds_dir / build.root.name / "world" / "data" / "base_dbs" / "simple_note.db"
    os.chmod(db, 0o644)
    with open(db, "r+b") as f:
        f.seek(200)
        f.write(b"damage")
    with caplog.at_level(logging.WARNING, logger="agentgym.envs.appworld.tasks"):
        rebuilt = ensure_build(second, few)
    assert "is damaged" in caplog.text and "simple_note.db" in caplog.text
    assert rebuilt.root == second.builds_dir / build.root.name and verify_build(rebuilt) is None
    assert json.loads(rebuilt.manifest.read_text()) == json.loads(build.manifest.read_text())
    # Both trees are covered, and the API processes' databases are copies (a write through one never reaches the
    # evaluator's).
    manifest = json.loads(rebuilt.manifest.read_text())
    assert any(k.startswith("world/data/base_dbs/") for k in manifest)
    assert any(k.startswith("full/data/tasks/") and "/ground_truth/" in k for k in manifest)
    assert not any(k.startswith("world/") and "ground_truth" in k for k in manifest)
    assert os.stat(rebuilt.world_data / "base_dbs" / "simple_note.db").st_nlink == 1
