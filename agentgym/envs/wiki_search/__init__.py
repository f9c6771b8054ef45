"""WikiSearch-v0: search-augmented question answering in the Search-R1 protocol (see :mod:`.env`,
:mod:`.tasks`, :mod:`.answers`, :mod:`.retrievers`; search engines from the top-level :mod:`retrieval` package)."""

from ...registration import EnvEntry

# the splits answered from the split's own corpus by an in-process BM25 index by default (bm25s needed)
_IN_PROCESS_SPLITS = ("demo", "hotpotqa-500")


class _WikiSearchEntry(EnvEntry):
    """bm25s is needed for the default in-process BM25 engine of ``demo`` / ``hotpotqa-500``. The evaluation splits
    need a full Wikipedia index anyway: a retrieval server (``retriever_url``, which needs no bm25s here) or an
    ``index_dir``, so only their question files are checked. (Availability cannot see the env's kwargs: ``demo``
    with a ``retriever_url`` works through ``agentgym.make`` without bm25s, but is listed as needing it.)"""

    def split_available(self, split: str) -> tuple[bool, str]:
        if split in _IN_PROCESS_SPLITS or split not in self.splits:
            return super().split_available(split)
        from dataclasses import replace

        return EnvEntry.split_available(replace(self, requires=()), split)


ENTRY = _WikiSearchEntry(
    env_id="WikiSearch-v0",
    entry_point="agentgym.envs.wiki_search.env:WikiSearchEnv",
    splits={
        "demo": "22 questions over a 30-passage encyclopedia written for this project (embedded; BM25)",
        "hotpotqa-500": "500 HotpotQA distractor questions over their closed 4,968-paragraph corpus",
        "nq": "512 Natural Questions (needs a full Wikipedia index: retriever_url or index_dir)",
        "triviaqa": "512 TriviaQA questions (needs a full Wikipedia index)",
        "popqa": "512 PopQA questions (needs a full Wikipedia index)",
        "hotpotqa": "512 HotpotQA dev questions (needs a full Wikipedia index)",
        "2wikimultihopqa": "512 2WikiMultihopQA questions (needs a full Wikipedia index)",
        "musique": "512 MuSiQue questions (needs a full Wikipedia index)",
        "bamboogle": "125 Bamboogle questions (needs a full Wikipedia index)",
    },
    default_split="demo",
    extra="retrieval",
    requires=("bm25s",),
    data={
        "demo": None,
        "hotpotqa-500": ("wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl", None),
        **{s: (f"wiki_search/qa/{s}_eval.jsonl", None)
           for s in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")},
    },
    description="Search-R1-style multi-hop QA with a BM25 or FAISS retriever, in-process or over HTTP",
)
