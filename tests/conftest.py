"""Shared fixtures: where the staged research data lives (``AGENTGYM_SHARED_DATA`` or ``../shared/data``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

try:
    from hypothesis import settings
except ImportError:  # the property tests skip themselves
    pass
else:
    # .ci/run sets HYPOTHESIS_PROFILE=ci: the property tests draw the same examples on every CI run, so CI never
    # passes or fails by chance; local runs keep drawing new ones (and Hypothesis replays any failure it found).
    settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("HYPOTHESIS_PROFILE"):
        settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


def shared_data_dir() -> Path | None:
    for cand in (os.environ.get("AGENTGYM_SHARED_DATA"), REPO.parent / "shared" / "data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    d = shared_data_dir()
    if d is None:
        pytest.skip("staged research data not found: set AGENTGYM_SHARED_DATA or place shared/data beside the repo")
    return d
