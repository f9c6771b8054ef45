"""The dataset manifest (agentgym/data/manifest.json): every size and SHA-256 equals the staged copy the conformance
tests use, every source is pinned, and every env split that reads a file names a dataset that provides it."""

from __future__ import annotations

import hashlib
import os
import re

import pytest

from agentgym.data.manifest import UnknownDatasetError, datasets, datasets_for_split, datasets_providing, get_dataset
from agentgym.registration import ENVS, get_entry


def _staged(shared_data_or_none):
    if shared_data_or_none is None:
        if os.environ.get("CI"):
            pytest.fail("CI must check the manifest against the staged data: ../shared/data or AGENTGYM_SHARED_DATA")
        pytest.skip("staged research data not found")
    return shared_data_or_none


def test_manifest_hashes_equal_the_staged_copies(shared_data_or_none):
    staged = _staged(shared_data_or_none)
    wrong = []
    for ds in datasets():
        for f in ds.files:
            p = staged / f.path
            if not p.is_file():
                wrong.append(f"{f.path}: not staged")
                continue
            data = p.read_bytes()
            if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
                wrong.append(f"{f.path}: staged {len(data)} bytes sha256 {hashlib.sha256(data).hexdigest()}, "
                             f"manifest {f.size} bytes {f.sha256}")
    assert not wrong, "\n".join(wrong[:20])


def test_sources_are_pinned():
    names = [d.name for d in datasets()]
    assert len(names) == len(set(names))
    paths = [f.path for d in datasets() for f in d.files]
    assert len(paths) == len(set(paths)), "a file belongs to one dataset"
    for ds in datasets():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", ds.name) and ds.licence and ds.description and ds.files
        for f in ds.files:
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256) and f.size > 0, f.path
            assert (f.source is None) != (f.derive is None), f"{f.path}: one origin"
            sources = [f.source] if f.source else [s for s, _ in f.derive.inputs]
            for s in sources:
                if s.kind == "pypi":
                    assert re.fullmatch(r"[0-9a-f]{64}", s.sha256) and s.wheel.endswith("-py3-none-any.whl"), s
                    assert s.version in s.wheel and f.member, f.path
                else:
                    assert s.kind == "github" and re.fullmatch(r"[0-9a-f]{40}", s.commit), s
            if f.derived_sha256:
                assert f.derive is not None and re.fullmatch(r"[0-9a-f]{64}", f.derived_sha256) and f.derived_size


def test_every_split_finds_its_dataset():
    """What each env split looks up is provided by the datasets that name that split, and every split a dataset
    names exists."""
    for ds in datasets():
        for env_id, splits in ds.used_by.items():
            entry = get_entry(env_id)
            assert set(splits) <= set(entry.splits), (ds.name, env_id)
    for entry in ENVS:
        for split, need in entry.data.items():
            if need is None or entry.env_id == "ALFWorld-v0":  # official ALFWorld games: alfworld-download
                continue
            name, _package = need
            providers = datasets_providing(name)
            assert providers, f"{entry.env_id} {split} reads {name}, which no dataset provides"
            assert {d.name for d in providers} & {d.name for d in datasets_for_split(entry.env_id, split)}, \
                (entry.env_id, split, name)


def test_fetched_data_of_default_splits():
    """The default splits that need no fetch: those of the envs whose extra installs their data."""
    assert get_entry("TextCraft-v0").fetched_data("adapt-test") == []
    assert get_entry("TauAirline-v0").fetched_data("test") == []
    assert get_entry("ALFWorld-v0").fetched_data("generated") == []
    assert get_entry("WebShop-v0").fetched_data("test") == ["webshop"]
    assert get_entry("WikiSearch-v0").fetched_data("hotpotqa-500") == ["wiki-search-hotpotqa"]
    assert get_entry("TextCraft-v0").fetched_data("train") == ["textcraft-tasks"]


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(UnknownDatasetError, match="textcraft-tasks"):
        get_dataset("textcraft-task")
