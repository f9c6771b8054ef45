"""The search engine behind WikiSearch: an in-process :mod:`retrieval` index or a retrieval server.

``make_retriever`` picks, in order: a retriever object passed in (anything with ``search(queries, topk)``); a
server URL (:class:`retrieval.RetrievalClient`); a saved index directory (:func:`retrieval.load_index`); or an
index built in-process over the split's corpus (``bm25`` by default, or a dense ``flat``/``ivf``/``hnsw`` index
with the default MiniLM encoder). In-process indexes are cached per (corpus, kind), so many envs share one.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from ...data import find_data
from ...errors import EnvCrashError, MissingDependencyError, TaskError
from .tasks import EVAL_SPLITS, HOTPOT_CORPUS, demo_passages

__all__ = ["RetrieverUnavailableError", "make_retriever", "RETRIEVER_KINDS"]

logger = logging.getLogger(__name__)

RETRIEVER_KINDS = ("bm25", "flat", "ivf", "hnsw", "dense")
_CACHE: dict[tuple, Any] = {}
_CACHE_LOCK = threading.Lock()


class RetrieverUnavailableError(EnvCrashError):
    """The search engine failed (server unreachable, timed out, answered an error): not the agent's fault."""

    kind = "env_crash"


def _retrieval_call(fn, *args, **kwargs):
    """Run a retrieval-package call, turning its missing-dependency error into agentgym's."""
    import retrieval

    try:
        return fn(*args, **kwargs)
    except retrieval.MissingDependencyError as e:
        raise MissingDependencyError(e.package, e.extra, "WikiSearch retrieval") from e


def _build_cached(key: tuple, builder):
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = _retrieval_call(builder)
        return _CACHE[key]


def make_retriever(split: str, *, retriever: Any = None, retriever_url: str | None = None,
                   index_dir: str | Path | None = None, corpus_file: str | Path | None = None,
                   timeout: float = 30.0):
    """The retriever for an env of ``split`` (see the module docstring)."""
    if retriever is not None and not isinstance(retriever, str):
        if not callable(getattr(retriever, "search", None)):
            raise TaskError("retriever must be a kind name or an object with search(queries, topk)")
        return retriever
    sources = [x is not None for x in (retriever_url, index_dir)]
    if sum(sources) > 1:
        raise TaskError("give at most one of retriever_url and index_dir")
    if retriever_url is not None:
        from retrieval.client import RetrievalClient

        return RetrievalClient(retriever_url, timeout=timeout)
    if index_dir is not None:
        from retrieval.index import load_index

        path = str(Path(index_dir).resolve())
        return _build_cached(("dir", path), lambda: load_index(path))
    kind = retriever or "bm25"
    if kind not in RETRIEVER_KINDS:
        raise TaskError(f"unknown retriever kind {kind!r}; choose from {RETRIEVER_KINDS}")
    kind = "flat" if kind == "dense" else kind
    from retrieval.corpus import Corpus, load_corpus
    from retrieval.index import build_index
    from retrieval.types import Passage

    if corpus_file is None and split == "demo":
        def corpus_builder():
            return Corpus.from_passages([Passage(**d) for d in demo_passages()], "agentgym:wiki_search/demo")
        source = "demo"
    else:
        if corpus_file is None and split in EVAL_SPLITS:
            raise TaskError(f"split {split!r} needs a full Wikipedia index: pass retriever_url (a running "
                            "`agentgym retrieval serve`) or index_dir, or corpus_file to build one in-process")
        path = str(Path(find_data(HOTPOT_CORPUS, explicit=corpus_file)).resolve())

        def corpus_builder():
            return load_corpus(path)
        source = path
    return _build_cached(("built", source, kind), lambda: build_index(corpus_builder(), kind))
