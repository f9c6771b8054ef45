"""The build of our task set in the AppWorld venv: deterministic, and rebuilt when damaged (needs the venv)."""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest

from agentgym.envs.appworld import ENTRY

ok, why = ENTRY.split_available("test")
pytestmark = pytest.mark.skipif(not ok, reason=f"AppWorld venv unavailable: {why}")


def test_a_damaged_build_is_rebuilt_to_the_same_manifest(tmp_path, caplog):
    """A copy of the cached build with one base database written to (as a SQLite write through a worker would) is
    refused and built again from scratch, in another process at another time: the fresh build hashes exactly like
    the cached one (the build is deterministic) and verifies."""
    from agentgym.envs.appworld.setup import AppWorldInstall, require_install
    from agentgym.envs.appworld.tasks import ensure_build, verify_build

    shared = require_install()
    cached = ensure_build(shared)
    assert verify_build(cached) is None
    install = AppWorldInstall(root=tmp_path, python=shared.python, version=shared.version)
    shutil.copytree(cached.root, install.builds_dir / cached.root.name)
    db = install.builds_dir / cached.root.name / "world" / "data" / "base_dbs" / "simple_note.db"
    os.chmod(db, 0o644)
    with open(db, "r+b") as f:
        f.seek(200)
        f.write(b"damage")
    with caplog.at_level(logging.WARNING, logger="agentgym.envs.appworld.tasks"):
        build = ensure_build(install)
    assert "is damaged" in caplog.text and "simple_note.db" in caplog.text
    assert build.root == install.builds_dir / cached.root.name and verify_build(build) is None
    assert json.loads(build.manifest.read_text()) == json.loads(cached.manifest.read_text())
    # Both trees are covered, and the workers' databases are copies (a write through one never reaches the other).
    manifest = json.loads(build.manifest.read_text())
    assert any(k.startswith("world/data/base_dbs/") for k in manifest)
    assert any(k.startswith("full/data/tasks/") and "/ground_truth/" in k for k in manifest)
    assert not any(k.startswith("world/") and "ground_truth" in k for k in manifest)
    assert os.stat(build.world_data / "base_dbs" / "simple_note.db").st_nlink == 1
