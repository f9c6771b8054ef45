"""WikiSearch-v0: search-augmented question answering in the Search-R1 protocol (see :mod:`.env`,
:mod:`.tasks`, :mod:`.answers`, :mod:`.retrievers`; search engines from the top-level :mod:`retrieval` package)."""

from ...registration import EnvEntry

ENTRY = EnvEntry(
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
