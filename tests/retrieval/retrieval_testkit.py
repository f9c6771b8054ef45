"""Shared helpers of the retrieval tests (a small real corpus, the packaged MiniLM)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOTPOT = "wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl"


def shared_file(name: str) -> Path | None:
    for root in (os.environ.get("AGENTGYM_SHARED_DATA"), REPO.parent / "shared" / "data"):
        if root and (Path(root) / name).is_file():
            return Path(root) / name
    return None


def need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"pip install 'agentgym[retrieval]' (missing {', '.join(missing)})", allow_module_level=True)


def small_corpus_records(n: int = 300) -> list[dict]:
    """The first ``n`` HotpotQA paragraphs when the staged data is here, else the embedded demo encyclopedia."""
    path = shared_file(HOTPOT)
    if path is not None:
        with path.open(encoding="utf-8") as f:
            return [dict(json.loads(line), id=f"p{i}") for i, line in zip(range(n), f)]
    from agentgym.envs.wiki_search.tasks import demo_passages

    return demo_passages()


def write_jsonl(records: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path
