"""Official AppWorld splits: need APPWORLD_ROOT with a downloaded bundle (and the AppWorld venv); skip otherwise."""

from __future__ import annotations

import pytest

from agentgym.envs.appworld import ENTRY, OFFICIAL_SPLITS
from agentgym.envs.appworld.tasks import official_root


def test_official_splits_unavailable_without_bundle_says_why(monkeypatch):
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    for split in OFFICIAL_SPLITS:
        ok, why = ENTRY.split_available(split)
        assert not ok and ("APPWORLD_ROOT" in why or "appworld setup" in why)


@pytest.mark.skipif(official_root() is None, reason="APPWORLD_ROOT does not point at downloaded AppWorld data")
@pytest.mark.skipif(not ENTRY.split_available("dev")[0], reason=ENTRY.split_available("dev")[1])
def test_official_dev_task_runs_and_a_do_nothing_agent_fails():
    import agentgym

    env = agentgym.make("AppWorld-v0", split="dev", max_turns=3)
    try:
        tid = env.task_ids(1)[0]
        obs, info = env.reset(options={"task_id": tid})
        assert obs and info["task_id"] == tid
        obs, r, term, trunc, info = env.step("<code>apis.supervisor.complete_task()</code>")
        assert term and not info["won"] and info["evaluation"]["num_tests"] >= 1
    finally:
        env.close()
