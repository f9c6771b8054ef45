"""``agentgym view RESULTS.jsonl [--out report.html]``: a self-contained HTML page of an eval's episodes.

The page needs no server and nothing from the network: one file with its data (JSON inside a
``<script type="application/json">`` element), its stylesheet and its script (``page.html`` and ``app.js`` beside
this module). It shows a per-family summary per env split, then the episodes with filters (env, family, won / lost
/ errored, error kind, a text search over task ids), and for each episode, when it is opened, the turn-by-turn
transcript: the prompt (the first turn's always, every turn's with ``full_prompts``), the raw response, the parsed
action and its tag, the validity flags, the reward, the env's feedback on the step (``invalid_reason``,
``process_ok``, env-specific fields such as τ's ``reward_info``), errors, and the request's token usage.

Everything in a transcript is untrusted text (a model wrote the responses). The data goes into the page as JSON
with ``<``, ``>``, ``&`` and the line separators escaped, so no string can end the script element, and the script
writes every value into the page with ``textContent`` / DOM nodes only, never as HTML. Bidirectional control
characters (U+202A-202E, U+2066-2069, U+200E/F, U+061C) are shown as ``[U+202E]``-style marks instead of acting: a
transcript cannot reorder what the page shows.

The files are read by the shared safe reader (:mod:`agentgym.eval.jsonl`, :func:`~agentgym.eval.transcripts.
iter_episodes`): malformed lines are skipped with a warning naming the file and line, one transcript is decoded at a
time and none past ``max_transcript_bytes``. What the page holds is bounded (:class:`PageLimits`): each string at
most ``max_field_chars`` characters (a longer one is cut with a mark saying how much is missing), the page about
``max_page_bytes`` in all (past it, transcripts and then episodes are left out, each episode saying so). The page's
header lists every such cut. The page is written to a temporary file beside ``--out`` and moved into place, so a
failure never leaves a partial page.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from ...errors import AgentGymError
from ..depth import MAX_DEPTH, cap_depth
from ..jsonl import SkipLog
from ..summary import summarize
from ..transcripts import DEFAULT_MAX_TRANSCRIPT_BYTES, EpisodeRecord, ReadLimits, iter_episodes

__all__ = ["build_page", "page_data", "write_page", "main", "default_out", "PageLimits", "neutralize_bidi"]


@dataclass(frozen=True)
class PageLimits:
    """What a page may hold (see the module doc): ``max_field_chars`` per string, about ``max_page_bytes`` of data
    in all, and what is read (``max_transcript_bytes`` per inflated transcript)."""

    max_field_chars: int = 100_000
    max_page_bytes: int = 64 * 1024 * 1024
    max_transcript_bytes: int = DEFAULT_MAX_TRANSCRIPT_BYTES

    def __post_init__(self):
        if self.max_field_chars < 100 or self.max_page_bytes < 64 * 1024 or self.max_transcript_bytes < 1024:
            raise ValueError("view limits too small: --max-field-chars >= 100, --max-page-bytes >= 65536, "
                             "--max-transcript-bytes >= 1024")


#: Characters that reorder the text around them (embeddings, overrides, isolates, marks): shown, never applied.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def neutralize_bidi(text: str) -> str:
    """``text`` with every bidirectional control character replaced by a visible ``[U+XXXX]`` mark."""
    return _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


@dataclass
class _Cuts:
    """What the page left out or shortened, for its header."""

    fields: int = 0
    transcripts_over_budget: int = 0
    episodes_over_budget: int = 0
    unreadable_transcripts: int = 0
    notes: list[str] = field(default_factory=list)

#: Info keys shown in their own places; every other info key goes into the turn's "other info" block.
_SHOWN_INFO = ("action", "action_tag", "action_valid", "action_admissible", "process_ok", "invalid_reason", "won",
               "score", "progress", "turn", "task_id", "error")
_MAX_SAFE_INT = 2 ** 53 - 1
#: How deep the page's own structure puts a row's values (data -> episodes -> episode -> transcript -> turns -> turn
#: -> extra): a row value at the results' depth limit is still shown whole.
_PAGE_LEVELS = 8


def default_out(results: str | os.PathLike) -> Path:
    """``r.jsonl`` -> ``r.html``."""
    p = Path(results)
    return p.with_name((p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name) + ".html")


def _text(s: str, limit: int, cuts: _Cuts | None) -> str:
    s = neutralize_bidi(s)
    if len(s) <= limit:
        return s
    if cuts is not None:
        cuts.fields += 1
    return (s[:limit] + f"\u2026 [{len(s) - limit} more characters not shown: the page keeps {limit} per value "
            "(--max-field-chars)]")


def _js_scalar(obj: Any, limit: int = PageLimits.max_field_chars, cuts: _Cuts | None = None) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, str):
        return _text(obj, limit, cuts)
    if isinstance(obj, int):
        return obj if abs(obj) <= _MAX_SAFE_INT else str(obj)
    return _text(str(obj), limit, cuts)


def _js_safe(obj: Any, level: int = 0, limits: PageLimits = PageLimits(), cuts: _Cuts | None = None) -> Any:
    """JSON types a browser reads back unchanged: NaN/inf become null, integers beyond 2^53 (the 63-bit obs
    hashes and action keys) become strings; values nested deeper than the results' depth limit
    (:data:`agentgym.eval.depth.MAX_DEPTH`, below the page's own few levels) become a marker; strings and keys
    are cut at ``limits.max_field_chars`` and their bidi controls made visible. ``level``: how deep in the page's
    data ``obj`` sits. Iterative: a row of any depth renders."""
    limit = limits.max_field_chars
    return cap_depth(obj, MAX_DEPTH + _PAGE_LEVELS - level, leaf=lambda v: _js_scalar(v, limit, cuts),
                     key_of=lambda k: _text(str(k), limit, cuts))


def _turn(t: dict, with_prompt: bool) -> dict:
    info = t.get("info") or {}
    return {"turn": t.get("turn"), "prompt": t.get("prompt") if with_prompt else None,
            "response": t.get("response"), "observation": t.get("observation"), "reward": t.get("reward"),
            "terminated": t.get("terminated"), "truncated": t.get("truncated"),
            "action": info.get("action"), "action_tag": info.get("action_tag"),
            "action_valid": info.get("action_valid"), "action_admissible": info.get("action_admissible"),
            "process_ok": info.get("process_ok"), "invalid_reason": info.get("invalid_reason"),
            "won": info.get("won"), "score": info.get("score"), "progress": info.get("progress"),
            "error": info.get("error"), "usage": t.get("usage"),
            "extra": {k: v for k, v in info.items() if k not in _SHOWN_INFO}}


def _episode(i: int, rec: EpisodeRecord) -> dict:
    r = rec.row
    err = r.get("error") if isinstance(r.get("error"), dict) else None
    ep = {"i": i, "env_id": r.get("env_id"), "split": r.get("split"), "task_id": str(r.get("task_id")),
          "seed": r.get("seed"), "trial": r.get("trial"), "family": None if r.get("family") is None else str(r["family"]),
          "won": bool(r.get("won")), "score": r.get("score"), "turns": r.get("turns"),
          "total_reward": r.get("total_reward"), "truncated": r.get("truncated"),
          "invalid_actions": r.get("invalid_actions"), "policy": r.get("policy"), "wall_s": r.get("wall_s"),
          "prompt_tokens": r.get("prompt_tokens"), "completion_tokens": r.get("completion_tokens"),
          "error": err, "error_kind": err.get("kind") if err else None,
          "outcome": "error" if err else ("won" if r.get("won") else "lost"),
          "identity": {k: r.get(k) for k in (r.get("identity_fields") or ())},
          "system_prompt": rec.system_prompt, "transcript": None, "transcript_note": rec.transcript_note}
    return ep


def _transcript(tr: dict, full_prompts: bool) -> dict:
    return {"first_observation": tr.get("first_observation"), "error": tr.get("error"),
            "turns": [_turn(t, full_prompts or k == 0) for k, t in enumerate(tr.get("turns") or [])]}


#: The columns of a row that the summary reads (the rest of the row is not kept once its episode is on the page).
_SUMMARY_COLUMNS = ("env_id", "split", "family", "won", "score", "total_reward", "turns", "error", "metrics", "policy")


def _size(piece: Any) -> int:
    return len(_script_json(piece).encode("utf-8", "replace"))


def page_data(results: Sequence[str | os.PathLike], *, full_prompts: bool = False,
              limits: PageLimits | None = None) -> dict:
    """The data the page renders (plain JSON types), within ``limits`` (see the module doc)."""
    from ...registration import get_entry

    limits = limits or PageLimits()
    read = ReadLimits(max_transcript_bytes=limits.max_transcript_bytes)
    cuts, skipped = _Cuts(), SkipLog()
    groups: dict[tuple, list[dict]] = {}  # one summary per results file and env split: a file is one run
    episodes: list[dict] = []
    used, n = 0, 0
    for path in results:
        source = neutralize_bidi(Path(path).name)
        for rec in iter_episodes(path, limits=read, skipped=skipped):
            row = rec.row
            groups.setdefault((source, row.get("env_id"), row.get("split")), []).append(
                {k: row.get(k) for k in _SUMMARY_COLUMNS})
            ep = _js_safe(_episode(n, rec) | {"source": source}, 2, limits, cuts)
            n += 1
            size = _size(ep)
            if used + size > limits.max_page_bytes:
                cuts.episodes_over_budget += 1
                continue
            used += size
            if rec.transcript is None:
                cuts.unreadable_transcripts += rec.transcript_note is not None
            else:
                tr = _js_safe(_transcript(rec.transcript, full_prompts), 3, limits, cuts)
                size = _size(tr)
                if used + size > limits.max_page_bytes:
                    cuts.transcripts_over_budget += 1
                    ep["transcript_note"] = (f"transcript not shown: the page reached its size limit "
                                             f"({limits.max_page_bytes} bytes, --max-page-bytes)")
                else:
                    used += size
                    ep["transcript"] = tr
            episodes.append(ep)
    summary = []
    for (source, env_id, split), rows in groups.items():
        try:
            order = get_entry(env_id).family_order
        except KeyError:  # an env registered outside agentgym
            order = ()
        for s in summarize(rows, by="family", order=order):
            summary.append({"source": source, "policy": rows[0].get("policy"), "env_id": env_id, "split": split, **s})
    notes = skipped.notes()
    if cuts.unreadable_transcripts:
        notes.append(f"{cuts.unreadable_transcripts} transcript(s) could not be read and are not shown (each "
                     "episode says why; --max-transcript-bytes bounds one inflated transcript)")
    if cuts.fields:
        notes.append(f"{cuts.fields} value(s) cut to {limits.max_field_chars} characters (--max-field-chars)")
    if cuts.transcripts_over_budget:
        notes.append(f"{cuts.transcripts_over_budget} transcript(s) left out: the page reached "
                     f"{limits.max_page_bytes} bytes (--max-page-bytes)")
    if cuts.episodes_over_budget:
        notes.append(f"{cuts.episodes_over_budget} episode(s) not listed (the summary counts them): the page reached "
                     f"{limits.max_page_bytes} bytes (--max-page-bytes)")
    head = _js_safe({"sources": [str(p) for p in results], "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                     "full_prompts": full_prompts, "summary": summary, "notes": notes,
                     "episodes_total": n}, 0, limits, cuts)
    return head | {"episodes": episodes, "transcripts": sum(e["transcript"] is not None for e in episodes)}


def _script_json(data: dict) -> str:
    """JSON that cannot close or confuse the ``<script>`` element holding it."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def build_page(results: Sequence[str | os.PathLike], *, title: str | None = None, full_prompts: bool = False,
               limits: PageLimits | None = None) -> str:
    """The whole HTML page for ``results``."""
    limits = limits or PageLimits()
    data = page_data(results, full_prompts=full_prompts, limits=limits)
    here = resources.files(__name__)
    page = here.joinpath("page.html").read_text(encoding="utf-8")
    script = here.joinpath("app.js").read_text(encoding="utf-8")
    title = title or "agentgym episodes: " + ", ".join(Path(p).name for p in results)
    title = _text(title, 1000, None)
    values = {"TITLE": html.escape(title), "DATA": _script_json(data), "SCRIPT": script}
    # one pass: text inside the data that looks like a placeholder is never substituted again
    return re.sub(r"\{\{(TITLE|DATA|SCRIPT)\}\}", lambda m: values[m.group(1)], page)


def write_page(results: Sequence[str | os.PathLike], out: str | os.PathLike, **kwargs) -> Path:
    """Build the page, then write it to a temporary file beside ``out`` and move it into place: no failure leaves a
    partial or empty page behind."""
    out = Path(out)
    # "replace": a file name from the command line may hold undecodable bytes (lone surrogates in Python)
    page = build_page(results, **kwargs).encode("utf-8", "replace")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(page)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def main(args) -> int:
    """``agentgym view`` (arguments parsed by :mod:`agentgym.cli`). Malformed lines are skipped with warnings;
    a results file that is missing or unreadable as a file, or an output that cannot be written, fails the command
    (exit 2, the cause on stderr, no page written)."""
    out = Path(args.out) if args.out else default_out(args.results[0])
    try:
        limits = PageLimits(max_field_chars=args.max_field_chars, max_page_bytes=args.max_page_bytes,
                            max_transcript_bytes=args.max_transcript_bytes)
        write_page(args.results, out, title=args.title, full_prompts=args.full_prompts, limits=limits)
    except (OSError, ValueError, AgentGymError) as e:  # FileNotFoundError, IsADirectoryError, PermissionError ...
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} (open it in a browser: file://{out.resolve()})")
    return 0
