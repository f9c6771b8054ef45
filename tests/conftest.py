"""Shared fixtures: where the staged research data lives (``AGENTGYM_SHARED_DATA`` or ``../shared/data``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

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


@pytest.fixture(scope="session")
def shared_data_or_none() -> Path | None:
    """The staged data folder, or None: for tests that skip only some of their cases without it."""
    return shared_data_dir()


def _wait_until(cond: Callable[[], object], what: str, timeout_s: float = 30.0, interval_s: float = 0.05) -> None:
    """Poll ``cond`` until it is true; fail the test after ``timeout_s`` (a broken component fails instead of hanging
    CI, and a slow machine gets all that time)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """``wait_until(cond, what, timeout_s=30)``: the one bounded polling loop of the tests."""
    return _wait_until
