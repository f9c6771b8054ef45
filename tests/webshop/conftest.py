"""Shared WebShop fixtures: the staged data (skip with the reason when it is absent) and the loaded catalogue."""

from __future__ import annotations

import json

import pytest

from agentgym.data import find_data
from agentgym.errors import DataNotFoundError


def _find(name: str):
    try:
        return find_data(name)
    except DataNotFoundError as e:
        pytest.skip(f"WebShop data not staged here ({e}); set AGENTGYM_SHARED_DATA to the shared data directory")


@pytest.fixture(scope="session")
def ws_data():
    """Path of a file under webshop/ (skips when absent)."""
    return lambda name: _find(f"webshop/{name}")


@pytest.fixture(scope="session")
def ws_ref():
    """Path of a file under webshop/reference/ (skips when absent)."""
    return lambda name: _find(f"webshop/reference/{name}")


@pytest.fixture(scope="session")
def catalog():
    _find("webshop/documents_1k.jsonl")
    _find("webshop/reference/title_nouns_spacy_sm.json")
    from agentgym.envs.webshop.catalog import load_catalog

    return load_catalog()


@pytest.fixture(scope="session")
def reward_cases(ws_ref):
    with open(ws_ref("reward_cases_seed0.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
