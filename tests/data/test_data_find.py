"""agentgym.data's search order: an explicit path, $AGENTGYM_DATA, the data cache, an installed package, then the
staged data ($AGENTGYM_SHARED_DATA, and ../shared/data beside a source checkout only); and the error a miss raises."""

from __future__ import annotations

import pytest

import agentgym.data as data
from agentgym.data import data_cache_dir, find_data, search_roots, shared_data_dirs, source_checkout
from agentgym.errors import DataNotFoundError

NAME = "textcraft/tasks/textcraft_val.jsonl"


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """Empty roots for every place, and no checkout: the repository root is a folder without a pyproject.toml."""
    made = {k: tmp_path / k for k in ("agentgym_data", "cache", "shared", "site-packages")}
    for p in made.values():
        p.mkdir()
    monkeypatch.setattr(data, "_REPO_ROOT", made["site-packages"])
    monkeypatch.delenv("AGENTGYM_DATA", raising=False)
    monkeypatch.delenv("AGENTGYM_SHARED_DATA", raising=False)
    monkeypatch.setenv("AGENTGYM_DATA_CACHE", str(made["cache"]))
    return made


def _put(root, name=NAME, text="x\n"):
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_order(roots, monkeypatch):
    monkeypatch.setenv("AGENTGYM_SHARED_DATA", str(roots["shared"]))
    staged = _put(roots["shared"])
    assert find_data(NAME) == staged
    cached = _put(roots["cache"])
    assert find_data(NAME) == cached
    monkeypatch.setenv("AGENTGYM_DATA", str(roots["agentgym_data"]))
    mine = _put(roots["agentgym_data"])
    assert find_data(NAME) == mine
    assert find_data(NAME, explicit=staged) == staged
    with pytest.raises(DataNotFoundError, match="does not exist"):
        find_data(NAME, explicit=roots["shared"] / "nope")


def test_package_data_comes_after_the_cache(roots, tmp_path, monkeypatch):
    pkg = tmp_path / "pkgs" / "fakepkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    data._package_locations.cache_clear()
    try:
        assert find_data("fake/data", package=("fakepkg", "data")) == pkg / "data"
        cached = roots["cache"] / "fake" / "data"
        cached.mkdir(parents=True)
        assert find_data("fake/data", package=("fakepkg", "data")) == cached
    finally:
        data._package_locations.cache_clear()


def test_a_miss_names_the_fetch_command_and_each_place_once(roots, monkeypatch):
    monkeypatch.setenv("AGENTGYM_SHARED_DATA", str(roots["cache"]))  # the same folder twice: listed once
    with pytest.raises(DataNotFoundError) as e:
        find_data(NAME)
    msg = str(e.value)
    assert "run `agentgym data fetch textcraft-tasks`" in msg
    assert msg.count(str(roots["cache"] / NAME)) == 1
    assert "site-packages" not in msg and "lib/python" not in msg  # no ../shared/data beside an installed package
    with pytest.raises(DataNotFoundError) as e:
        find_data("nothing/of/ours.json")
    assert "agentgym data fetch" not in str(e.value) and "AGENTGYM_DATA" in str(e.value)


def test_staged_data_beside_a_checkout_only(roots, tmp_path, monkeypatch):
    assert source_checkout() is None and shared_data_dirs() == []
    repo = tmp_path / "work" / "repo"
    (repo / "agentgym").mkdir(parents=True)
    (repo / "agentgym" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text("[project]\nname = 'agentgym-kit'\n")
    monkeypatch.setattr(data, "_REPO_ROOT", repo)
    assert source_checkout() == repo
    assert shared_data_dirs() == [tmp_path / "work" / "shared" / "data"]
    staged = _put(tmp_path / "work" / "shared" / "data")
    assert find_data(NAME) == staged
    labels = [r.label for r in search_roots()]
    assert labels == ["the data cache", "staged data beside the checkout"]


def test_data_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTGYM_DATA_CACHE", raising=False)
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "c"))
    assert data_cache_dir() == tmp_path / "c" / "data"
    monkeypatch.delenv("AGENTGYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_cache_dir() == tmp_path / "xdg" / "agentgym" / "data"
    monkeypatch.setenv("AGENTGYM_DATA_CACHE", str(tmp_path / "mine"))
    assert data_cache_dir() == tmp_path / "mine"
