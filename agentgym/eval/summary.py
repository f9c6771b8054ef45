"""Summary tables of results rows: success rate, mean score, mean turns (mean ± standard error) per family.

Errored episodes are counted in ``errors`` and left out of every mean: an environment failure is not a score.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Sequence

__all__ = ["summarize", "format_table"]


def _mean_se(xs: Sequence[float]) -> tuple[float, float]:
    n = len(xs)
    if n == 0:
        return float("nan"), float("nan")
    m = sum(xs) / n
    if n == 1:
        return m, 0.0
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def summarize(rows: Sequence[dict], by: str = "family") -> list[dict]:
    """One summary dict per value of ``by`` (sorted), then an ``All`` row."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get(by, "all")), []).append(r)
    out = []
    for name in sorted(groups) + ["All"]:
        rs = rows if name == "All" else groups[name]
        ok = [r for r in rs if r.get("error") is None]
        sr, sr_se = _mean_se([float(bool(r["won"])) for r in ok])
        sc, sc_se = _mean_se([float(r["score"]) for r in ok])
        tu, tu_se = _mean_se([float(r["turns"]) for r in ok])
        out.append({by: name, "episodes": len(ok), "errors": len(rs) - len(ok), "wins": sum(bool(r["won"]) for r in ok),
                    "success": sr, "success_se": sr_se, "score": sc, "score_se": sc_se,
                    "turns": tu, "turns_se": tu_se})
    return out


def format_table(summary: list[dict], fmt: str = "markdown", by: str = "family") -> str:
    if fmt == "json":
        return json.dumps(summary, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
        return buf.getvalue()
    if fmt != "markdown":
        raise ValueError(f"unknown table format {fmt!r}: markdown, csv or json")
    lines = [f"| {by} | episodes | wins | success (%) | score | turns | errors |", "|---|---:|---:|---:|---:|---:|---:|"]
    for s in summary:
        lines.append(f"| {s[by]} | {s['episodes']} | {s['wins']} | {100 * s['success']:.1f} ± {100 * s['success_se']:.1f} "
                     f"| {s['score']:.3f} ± {s['score_se']:.3f} | {s['turns']:.2f} ± {s['turns_se']:.2f} | {s['errors']} |")
    return "\n".join(lines)
