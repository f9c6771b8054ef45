"""The noun table of the type reward: the staged one and a custom one."""

from __future__ import annotations

import pytest

import agentgym
from agentgym.envs.webshop.catalog import load_catalog, save_noun_table


def test_noun_table_is_exact_for_the_reward(catalog):
    # WebShop tags the names with spaCy; spot values from en_core_web_sm-3.8.0 (the default).
    assert catalog.noun_model == "en_core_web_sm-3.8.0"
    assert catalog.nouns["B06Y3VLDFB"] == ["vhomes", "lights", "reclaimed", "wood", "console", "table", "genessis",
                                           "collection", "sofa", "tables"]


def test_custom_noun_table_changes_only_the_type_factor(catalog, tmp_path):
    pytest.importorskip("regex", reason="WebShop search needs regex: pip install -e '.[webshop]'")
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


# Building the table with spaCy (all 1,000 titles, equal to the staged table) is tested through `agentgym webshop
# prepare` in test_webshop_catalog.py::test_webshop_data_alone_with_a_noun_table_built_by_spacy.
