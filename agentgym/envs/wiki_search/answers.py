"""Answer scoring: the standard normalization, exact match and token F1.

``normalize_answer`` is the SQuAD / Search-R1 normalization: lower-case, drop ASCII punctuation, drop the articles
a/an/the, collapse whitespace. ``exact_match`` is 1.0 when the normalized prediction equals any normalized gold
answer. ``f1_score`` is the token-level F1 of HotpotQA's evaluation, maximised over the gold answers; like HotpotQA
it gives 0 when either side normalizes to yes/no/noanswer and the two differ.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

__all__ = ["normalize_answer", "exact_match", "f1_score"]

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _golds(golden: str | Iterable[str]) -> list[str]:
    return [golden] if isinstance(golden, str) else list(golden)


def exact_match(prediction: str, golden: str | Iterable[str]) -> float:
    p = normalize_answer(prediction)
    return 1.0 if any(p == normalize_answer(g) for g in _golds(golden)) else 0.0


def _f1(prediction: str, gold: str) -> float:
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if (p in _SPECIAL or g in _SPECIAL) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golden: str | Iterable[str]) -> float:
    return max((_f1(prediction, g) for g in _golds(golden)), default=0.0)
