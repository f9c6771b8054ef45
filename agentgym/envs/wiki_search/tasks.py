"""WikiSearch tasks and splits (data loading only; the dynamics live in :mod:`.env`).

A task is a question with its gold answers. Splits:

* ``demo`` (default): 22 questions over a 30-passage encyclopedia written for this project (:mod:`.demo`),
  embedded in the package.
* ``hotpotqa-500``: 500 HotpotQA questions (distractor setting, from the train split) with the closed corpus of
  their 4,968 paragraphs, from the staged research data (``wiki_search/qa/hotpotqa_distractor_500.jsonl`` and
  ``wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl``). Tasks carry the titles of their two gold
  paragraphs.
* ``nq``, ``triviaqa``, ``popqa``, ``hotpotqa``, ``2wikimultihopqa``, ``musique`` (512 each) and ``bamboogle``
  (125): the standard Search-R1 evaluation samples (``wiki_search/qa/<name>_eval.jsonl``). They need a full
  Wikipedia index: give ``retriever_url`` or ``index_dir``.

QA files are JSONL ``{question, golden_answers}`` (``id`` optional); HotpotQA's ``{question, answer}`` is read too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ...data import find_data
from ...errors import TaskError
from .demo import DEMO_PASSAGES, DEMO_QUESTIONS

__all__ = ["WikiQATask", "SPLITS", "EVAL_SPLITS", "HOTPOT_CORPUS", "split_qa_file", "load_split",
           "load_qa_file", "task_from_dict", "demo_passages"]


@dataclass(frozen=True)
class WikiQATask:
    """One question. ``golden_answers`` are never shown to the agent (they go to ``info``)."""

    task_id: str
    question: str
    golden_answers: tuple[str, ...]
    data_source: str = ""
    gold_titles: tuple[str, ...] = field(default=())


EVAL_SPLITS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
SPLITS = ("demo", "hotpotqa-500") + EVAL_SPLITS
HOTPOT_CORPUS = "wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl"


def split_qa_file(split: str) -> str | None:
    """The dataset name of a split's QA file (None for the embedded demo)."""
    if split == "demo":
        return None
    if split == "hotpotqa-500":
        return "wiki_search/qa/hotpotqa_distractor_500.jsonl"
    if split in EVAL_SPLITS:
        return f"wiki_search/qa/{split}_eval.jsonl"
    raise TaskError(f"unknown WikiSearch split {split!r}; choose from {list(SPLITS)}")


def task_from_dict(d: dict, index: int = 0, source: str = "") -> WikiQATask:
    """A task from a QA record ``{question, golden_answers}`` (or ``answer``), validated."""
    if not isinstance(d, dict):
        raise TaskError(f"a task must be a dict, got {type(d).__name__}")
    q = d.get("question")
    if not isinstance(q, str) or not q.strip():
        raise TaskError(f"task {index} of {source or 'the given tasks'}: 'question' must be a non-empty string")
    golds = d.get("golden_answers", d.get("answer"))
    if isinstance(golds, str):
        golds = [golds]
    if not isinstance(golds, (list, tuple)) or not golds or not all(isinstance(g, str) and g.strip()
                                                                    for g in golds):
        raise TaskError(f"task {index} of {source or 'the given tasks'}: 'golden_answers' must be a non-empty "
                        "list of non-empty strings")
    titles = tuple(p["title"] for p in d.get("paragraphs", ()) if isinstance(p, dict) and p.get("is_gold"))
    return WikiQATask(task_id=str(d.get("id", f"{source or 'task'}-{index}")), question=q.strip(),
                      golden_answers=tuple(golds), data_source=str(d.get("data_source", d.get("type", ""))),
                      gold_titles=tuple(d.get("gold_titles", titles)))


@lru_cache(maxsize=16)
def load_qa_file(path: str) -> tuple[WikiQATask, ...]:
    """Tasks of a JSONL QA file (cached per path)."""
    p = Path(path)
    tasks, seen = [], set()
    with p.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskError(f"{p}:{i + 1}: invalid JSON ({e.msg})") from None
            t = task_from_dict(rec, i, p.stem)
            if t.task_id in seen:
                raise TaskError(f"{p}: duplicate task id {t.task_id!r}")
            seen.add(t.task_id)
            tasks.append(t)
    if not tasks:
        raise TaskError(f"{p} holds no questions")
    return tuple(tasks)


def demo_tasks() -> tuple[WikiQATask, ...]:
    titles = {pid: title for pid, title, _ in DEMO_PASSAGES}
    return tuple(WikiQATask(tid, q, tuple(golds), "demo", tuple(titles[s] for s in sup))
                 for tid, q, golds, sup in DEMO_QUESTIONS)


def demo_passages() -> list[dict]:
    return [{"id": pid, "title": title, "text": text} for pid, title, text in DEMO_PASSAGES]


def load_split(split: str, qa_file: str | Path | None = None) -> tuple[WikiQATask, ...]:
    """The tasks of ``split`` (``qa_file`` overrides the split's file)."""
    name = split_qa_file(split)
    if qa_file is None and name is None:
        return demo_tasks()
    path = find_data(name or "wiki_search/qa", explicit=qa_file)
    return load_qa_file(str(Path(path).resolve()))
