"""verl's own search client against the retrieval server on 127.0.0.1 (runs in the verl venv of .ci/run).

The client is ``verl/tools/utils/search_r1_like_utils.py`` -- ``call_search_api`` (posts ``{"queries": [...],
"topk": k, "return_scores": true}`` with ``requests``; retries 500/502/503/504 ten times, so a per-query failure must
never be a 5xx) and ``perform_single_search_batch`` (renders each row with verl's ``_passages2string``, ``Doc i
(Title: <first line of contents>)\\n<text>``), imported and called as they are. verl 0.9.1, the version the verl
venv pins, no longer ships that module (it was last released in verl 0.7.1, identical to volcengine/verl
b178a3cd56f58b2d502255daba591e92833930a7, whose file last changed in 55e3c5bc09c85dba09f736eef476f110ad641b75), so
.ci/run downloads the verl 0.7.1 wheel from PyPI and points ``AGENTGYM_VERL_SEARCH_UTILS`` at the file in it; the
installed verl's module is used instead when it has one.

Skips where verl is not installed (the main venv). Where verl is installed and ``AGENTGYM_VERL_SEARCH_UTILS`` is set
but the file is missing, it fails: that is a broken CI stage, not a reason to skip.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os

import pytest

from retrieval_testkit import need, passage_queries, small_bm25

if importlib.util.find_spec("verl") is None:
    pytest.skip("verl is not installed (its client test runs in the verl venv of .ci/run)", allow_module_level=True)
need("bm25s", "uvicorn", "starlette")


def _verl_search_utils():
    try:
        return importlib.import_module("verl.tools.utils.search_r1_like_utils")
    except ImportError:
        pass
    path = os.environ.get("AGENTGYM_VERL_SEARCH_UTILS")
    if not path:
        pytest.skip("this verl has no verl/tools/utils/search_r1_like_utils.py (removed after 0.7.1); set "
                    "AGENTGYM_VERL_SEARCH_UTILS to the file from the verl 0.7.1 wheel, as .ci/run does")
    assert os.path.isfile(path), f"AGENTGYM_VERL_SEARCH_UTILS={path} does not exist"
    spec = importlib.util.spec_from_file_location("verl_search_r1_like_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


utils = _verl_search_utils()

from retrieval.server import RetrievalServer, ServerConfig  # noqa: E402


@pytest.fixture(autouse=True)
def _no_proxy_for_loopback(monkeypatch):
    """requests honours http_proxy even for 127.0.0.1; the server is local, so never go through a proxy."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def bm25():
    return small_bm25(200)


@pytest.fixture(scope="module")
def server(bm25):
    with RetrievalServer(bm25, ServerConfig(port=0)) as srv:
        yield srv



def test_verl_perform_single_search_batch(server, bm25):
    url = server.url + "/retrieve"
    qs = passage_queries(bm25, 4)
    result_text, meta = utils.perform_single_search_batch(url, qs, topk=3, concurrent_semaphore=None, timeout=30)
    assert meta["status"] == "success" and meta["api_request_error"] is None and meta["total_results"] == 12
    expected = bm25.search(qs, 3)
    want = "\n---\n".join(utils._passages2string([{"document": h.to_document()} for h in row]) for row in expected)
    assert json.loads(result_text)["result"] == want
    assert want.startswith(f'Doc 1 (Title: "{expected[0][0].passage.title}")\n{expected[0][0].passage.text}')


def test_verl_call_search_api_edges(server, bm25):
    url = server.url + "/retrieve"
    response, error = utils.call_search_api(url, [], topk=3, return_scores=True, timeout=30)
    assert error is None and response == {"result": []}  # 200, not a 4xx that verl turns into "API Request Error"
    qs = passage_queries(bm25, 2)
    response, error = utils.call_search_api(url, [qs[0], "\ud800 broken decode", "", qs[1]], topk=2, timeout=30)
    assert error is None  # answered at once: no 5xx, so none of verl's ten retries
    assert [len(r) for r in response["result"]] == [2, 0, 0, 2] and response["errors"][0]["index"] == 1
    result_text, meta = utils.perform_single_search_batch(url, [qs[0], "\ud800"], topk=2, timeout=30)
    assert meta["status"] == "success" and "Search error" not in json.loads(result_text)["result"]
