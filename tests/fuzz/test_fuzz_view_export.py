"""Fuzz: rows the results writer accepts, fed to ``agentgym view`` and ``agentgym export-sft`` (issue 26).

Hypothesis draws results rows and transcripts -- hostile strings (HTML, script, placeholders, control and line
separator characters), NaN and infinities, integers past 2^53 and 2^64, values nested from 0 to 3,000 levels, wrong
types in the free-form fields (info, usage, extras) -- writes them with the real writers (``ResultsFile``, ``TranscriptFile``) and runs the
real commands. Each must finish (view: exit 0 and a page whose script element the data cannot close; export-sft:
exit 0 with every response and observation round-tripped exactly, or a clean exit with a message). Bounded: a few
dozen examples per property (``HYPOTHESIS_PROFILE=ci`` draws the same ones on every CI run).
"""

from __future__ import annotations

import json
import re

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentgym.cli import main  # noqa: E402
from agentgym.eval.results import ResultsFile  # noqa: E402
from agentgym.eval.transcripts import TranscriptFile, key_fields, transcripts_path  # noqa: E402

HOSTILE = ['<img src=x onerror="window.__xss=1">', "</script><script>alert(1)</script>", "{{DATA}}", "{{SCRIPT}}",
           "<!--", "\u2028\u2029", "\x00\x1b[31m", "&amp;&lt;", "\\u003c/script\\u003e", "]]>", "\ufeff",
           "\u202egnikcah\u202c", "\u2066\u200f\u061c"]

texts = st.one_of(st.text(max_size=40), st.sampled_from(HOSTILE),
                  st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3).map("".join))
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), texts)
json_values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                           st.dictionaries(texts, kids, max_size=3)), max_leaves=12)


def _deep(levels: int):
    value: object = "leaf"
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


deep_values = st.sampled_from([0, 1, 63, 64, 65, 500, 3000]).map(_deep)
anything = st.one_of(json_values, deep_values)

turns = st.fixed_dictionaries({
    "turn": st.integers(0, 50), "prompt": texts, "response": texts, "observation": texts,
    "reward": st.floats(allow_nan=False, allow_infinity=False, width=32), "terminated": st.booleans(),
    "truncated": st.booleans(),
    "info": st.dictionaries(st.sampled_from(["action", "action_valid", "invalid_reason", "score", "x", "reward_info"]),
                            anything, max_size=4),
    "usage": st.one_of(st.none(), st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens", "junk"]),
                                                  anything, max_size=3))})
episodes = st.fixed_dictionaries({
    "task_id": texts, "seed": st.integers(0, 2 ** 63), "trial": st.integers(0, 3), "won": st.booleans(),
    "score": st.floats(0.0, 1.0),
    "family": st.one_of(st.none(), texts), "turns": st.integers(0, 9), "policy": texts,
    "extra": anything, "error": st.one_of(st.none(), st.fixed_dictionaries({"kind": texts, "message": texts})),
    "transcript": st.one_of(st.none(), st.fixed_dictionaries({"first_observation": texts,
                                                              "turns": st.lists(turns, max_size=3),
                                                              "error": st.none()}))})

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])


def _write(tmp_path, eps: list[dict]):
    out = tmp_path / "fuzz.jsonl"
    for p in (out, transcripts_path(out)):
        p.unlink(missing_ok=True)
    results, side = ResultsFile(out), TranscriptFile(transcripts_path(out))
    rows = []
    for i, ep in enumerate(eps):
        row = {"env_id": "TextCraft-v0", "split": "adapt-test", **{k: v for k, v in ep.items() if k != "transcript"}}
        row["task_id"] = f"{ep['task_id']}#{i}"  # distinct episodes
        if ep["transcript"] is not None:
            row["transcript_id"] = side.append(key_fields(row), {"version": 1, **ep["transcript"]})
        rows.append(row)
    results.append(rows)
    return out


@FUZZ
@given(eps=st.lists(episodes, min_size=1, max_size=3))
def test_view_renders_every_row_the_writer_accepts(tmp_path, eps, capsys):
    out = _write(tmp_path, eps)
    page_path = tmp_path / "fuzz.html"
    assert main(["view", str(out), "--out", str(page_path), "--full-prompts"]) == 0
    page = page_path.read_text(encoding="utf-8")
    # the data never opens or closes an element of its own
    assert len(re.findall(r"<script", page, re.I)) == 2 and len(re.findall(r"</script", page, re.I)) == 2
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert len(data["episodes"]) == len(eps)
    assert not re.search("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]", page)  # bidi controls shown as marks
    capsys.readouterr()


@FUZZ
@given(eps=st.lists(episodes, min_size=1, max_size=3), per_turn=st.booleans())
def test_export_sft_takes_every_row_the_writer_accepts(tmp_path, eps, per_turn, capsys):
    out = _write(tmp_path, eps)
    sft = tmp_path / "sft.jsonl"
    sft.unlink(missing_ok=True)
    status = main(["export-sft", str(out), "--out", str(sft), *(["--per-turn"] if per_turn else [])])
    err = capsys.readouterr().err
    exported = [e for e in eps if e["error"] is None and e["transcript"] and e["transcript"]["turns"]]
    if not exported:
        assert status == 1 and "nothing to export" in err and not sft.exists()
        return
    assert status == 0, err
    rows = [json.loads(line) for line in sft.read_text(encoding="utf-8").split("\n") if line]  # not splitlines: U+2028
    said = {m["content"] for r in rows for m in (r.get("messages") or r["prompt"] + r["completion"])}
    for e in exported:  # hostile strings round-trip exactly
        for t in e["transcript"]["turns"]:
            assert t["response"] in said


# -- hostile files (issue 33, rows 13-14): malformed rows, zlib bombs, bidi controls ---------------------------------
#
# Each malformed line sits on line 2 of a results file (or of its transcripts side file) after one good episode. The
# rule (agentgym.eval.jsonl): a malformed results row is skipped with a warning naming the file and line; a malformed
# or oversized transcript leaves its episode without a transcript (view: the episode says why; export-sft: the
# episode is counted unreadable and left out), with a warning naming the side file and line. The commands exit 0,
# leave no temporary file, and the page / dataset holds the good episode.

import base64  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measured import agentgym, run_measured  # noqa: E402

KEY = {"env_id": "TextCraft-v0", "split": "adapt-test", "seed": 0, "trial": 0}
TURN = {"turn": 0, "prompt": "p", "response": "<action>inventory</action>", "observation": "o", "reward": 0.0,
        "terminated": True, "truncated": False, "info": {"action_valid": True}, "usage": None}


def _row(task: str, tid: str | None = None, **over) -> dict:
    row = {**KEY, "task_id": task, "won": True, "score": 1.0, "turns": 1, "total_reward": 1.0, "error": None,
           "policy": "oracle", "identity_fields": [], "transcript_id": tid}
    return row | over


def _transcript_line(task: str, tid: str, payload: bytes) -> bytes:
    data = base64.b64encode(zlib.compress(payload)).decode()
    return _dumps({"transcript_id": tid, **KEY, "task_id": task, "encoding": "zlib+base64", "data": data})


def _dumps(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _files(tmp_path: Path, bad_row: bytes | None = None, bad_transcript: bytes | None = None) -> Path:
    """A results file and side file: one good episode, then the hostile line (a row, or the transcript of a second
    episode whose row is good)."""
    out = tmp_path / "hostile.jsonl"
    good_tid = uuid.uuid4().hex
    rows = [_dumps(_row("good", good_tid))]
    side = [_transcript_line("good", good_tid, json.dumps({"version": 1, "first_observation": "o", "error": None,
                                                           "turns": [TURN]}).encode())]
    if bad_row is not None:
        rows.append(bad_row if bad_row.endswith(b"\n") else bad_row + b"\n")
    if bad_transcript is not None:
        tid = uuid.uuid4().hex
        rows.append(_dumps(_row("bad-transcript", tid)))
        side.append(bad_transcript(tid) if callable(bad_transcript) else bad_transcript)
    out.write_bytes(b"".join(rows))
    transcripts_path(out).write_bytes(b"".join(side))
    return out


DIGITS = b"9" * 5000
BAD_ROWS = {
    "invalid UTF-8": (b'\xff\xfe{"env_id": "x"}', "not UTF-8"),
    "a list": (b"[1, 2]", "a list, not a JSON object"),
    "a string": (b'"row"', "a string, not a JSON object"),
    "a number": (b"7", "a number, not a JSON object"),
    "null": (b"null", "null, not a JSON object"),
    "no env_id": (_dumps({k: v for k, v in _row("t").items() if k != "env_id"}), "env_id is null, not a string"),
    "seed null": (_dumps(_row("t", seed=None)), "seed is null"),
    "seed true": (_dumps(_row("t", seed=True)), "seed is bool"),
    "5000-digit seed": (_dumps(_row("t", seed=0)).replace(b'"seed": 0', b'"seed": ' + DIGITS),
                        "a number of 5000 digits"),
    "5000-digit int in a free field": (_dumps(_row("t", extra=0)).replace(b'"extra": 0', b'"extra": ' + DIGITS),
                                       "a number of 5000 digits"),
    "identity_fields 5": (_dumps(_row("t", identity_fields=5)), "identity_fields is int"),
    "turns a list": (_dumps(_row("t", turns=[1])), "turns is list"),
    "score a string": (_dumps(_row("t", score="high")), "score is str"),
    "won a string": (_dumps(_row("t", won="yes")), "won is str"),
    "error a string": (_dumps(_row("t", error="boom")), "error is str"),
    "metrics not numbers": (_dumps(_row("t", metrics={"em": "x"})), "metrics['em'] is str"),
    "transcript_id 5": (_dumps(_row("t", transcript_id=5)), "transcript_id is int"),
    "policy_args a list": (_dumps(_row("t", policy_args=[1])), "policy_args is list"),
    "lone surrogate": (_dumps(_row("\ud800")), "lone surrogate"),
    "lone surrogate in a key": (_dumps(_row("t", **{"\udfff": 1})), "lone surrogate"),
    "torn": (_dumps(_row("t"))[:40], "not JSON"),
    "nested too deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
}

_TR = {"version": 1, "first_observation": "o", "error": None}
BAD_TRANSCRIPTS = {
    "not base64": (lambda tid: _dumps({"transcript_id": tid, **KEY, "task_id": "b", "encoding": "zlib+base64",
                                       "data": "%%%"}), "not base64"),
    "not zlib": (lambda tid: _dumps({"transcript_id": tid, **KEY, "task_id": "b", "encoding": "zlib+base64",
                                     "data": base64.b64encode(b"plain").decode()}), "not zlib"),
    "truncated zlib": (lambda tid: _dumps({"transcript_id": tid, **KEY, "task_id": "b", "encoding": "zlib+base64",
                                           "data": base64.b64encode(zlib.compress(b"{}" * 999)[:9]).decode()}),
                       "truncated"),
    "unknown encoding": (lambda tid: _dumps({"transcript_id": tid, **KEY, "task_id": "b", "encoding": "gzip",
                                             "data": ""}), "unknown transcript encoding"),
    "data 5": (lambda tid: _dumps({"transcript_id": tid, **KEY, "task_id": "b", "data": 5}), "data is int"),
    "invalid UTF-8 inside": (lambda tid: _transcript_line("b", tid, b'{"turns": "\xff"}'), "not UTF-8"),
    "a list inside": (lambda tid: _transcript_line("b", tid, b"[]"), "not an object"),
    "turns 5": (lambda tid: _transcript_line("b", tid, json.dumps(_TR | {"turns": 5}).encode()), "turns is int"),
    "turn null": (lambda tid: _transcript_line("b", tid, json.dumps(_TR | {"turns": [None]}).encode()),
                  "turns[0] is null"),
    "prompt an int": (lambda tid: _transcript_line("b", tid, json.dumps(_TR | {"turns": [TURN | {"prompt": 1}]})
                                                   .encode()), "turns[0].prompt is int"),
    "reward a string": (lambda tid: _transcript_line("b", tid, json.dumps(_TR | {"turns": [TURN | {"reward": "1"}]})
                                                     .encode()), "turns[0].reward is str"),
    "info a list": (lambda tid: _transcript_line("b", tid, json.dumps(_TR | {"turns": [TURN | {"info": [1]}]})
                                                 .encode()), "turns[0].info is list"),
    "lone surrogate in a response": (lambda tid: _transcript_line(
        "b", tid, json.dumps(_TR | {"turns": [TURN | {"response": "\ud800"}]}).encode()), "lone surrogate"),
    "5000-digit int in info": (lambda tid: _transcript_line(
        "b", tid, json.dumps(_TR | {"turns": [TURN | {"info": {"n": 0}}]}).encode().replace(b'"n": 0',
                                                                                           b'"n": ' + DIGITS)),
        "a number of 5000 digits"),
}


def _no_leftovers(tmp_path: Path) -> None:
    left = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") or (p.is_file() and p.stat().st_size == 0)]
    assert left == [], left


@pytest.mark.parametrize("name", list(BAD_ROWS))
def test_a_malformed_results_row_is_skipped_with_a_warning(tmp_path, name, caplog):
    line, why = BAD_ROWS[name]
    out = _files(tmp_path, bad_row=line)
    caplog.set_level(logging.WARNING)
    page = tmp_path / "page.html"
    assert main(["view", str(out), "--out", str(page)]) == 0
    assert f"{out}:2: results row skipped: " in caplog.text and why in caplog.text, caplog.text
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page.read_text(),
                                re.S).group(1))
    assert [e["task_id"] for e in data["episodes"]] == ["good"] and data["transcripts"] == 1
    assert any("1 unreadable or malformed line(s) skipped" in n for n in data["notes"])
    caplog.clear()
    sft = tmp_path / "sft.jsonl"
    assert main(["export-sft", str(out), "--out", str(sft)]) == 0
    assert f"{out}:2: results row skipped: " in caplog.text
    assert [json.loads(x)["task_id"] for x in sft.read_text().splitlines()] == ["good"]
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("name", list(BAD_TRANSCRIPTS))
def test_a_malformed_transcript_leaves_its_episode_without_one(tmp_path, name, caplog, capsys):
    make, why = BAD_TRANSCRIPTS[name]
    out = _files(tmp_path, bad_transcript=make)
    caplog.set_level(logging.WARNING)
    page = tmp_path / "page.html"
    assert main(["view", str(out), "--out", str(page)]) == 0
    side = transcripts_path(out)
    assert f"{side}:2: " in caplog.text and why in caplog.text, caplog.text
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page.read_text(),
                                re.S).group(1))
    eps = {e["task_id"]: e for e in data["episodes"]}
    assert eps["good"]["transcript"] is not None and eps["bad-transcript"]["transcript"] is None
    assert eps["bad-transcript"]["transcript_note"]  # the page says why
    sft = tmp_path / "sft.jsonl"
    assert main(["export-sft", str(out), "--out", str(sft)]) == 0
    assert "with an unreadable transcript" in capsys.readouterr().out
    assert [json.loads(x)["task_id"] for x in sft.read_text().splitlines()] == ["good"]
    _no_leftovers(tmp_path)


def test_every_malformed_line_at_once_in_the_real_commands(tmp_path):
    """All the hostile rows and transcripts in one pair of files, through the installed command in a child process:
    exit 0, no traceback, one warning per bad line (by number), the good episode kept."""
    out = tmp_path / "all.jsonl"
    rows, side = [_dumps(_row("good", "g"))], [_transcript_line("good", "g", json.dumps(_TR | {"turns": [TURN]})
                                                                 .encode())]
    rows += [line for line, _ in BAD_ROWS.values()]
    for i, (make, _) in enumerate(BAD_TRANSCRIPTS.values()):
        rows.append(_dumps(_row(f"b{i}", f"t{i}")))
        side.append(make(f"t{i}"))
    out.write_bytes(b"".join(r if r.endswith(b"\n") else r + b"\n" for r in rows))
    transcripts_path(out).write_bytes(b"".join(side))
    res = run_measured(agentgym("view", str(out), "--out", str(tmp_path / "all.html")), timeout_s=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    for n in range(2, 2 + len(BAD_ROWS)):
        assert f"{out}:{n}: results row skipped" in res.stderr or n > 21, res.stderr  # 20 named, then counted
    assert f"{out}: {len(BAD_ROWS)} lines skipped in all" in res.stderr
    res = run_measured(agentgym("export-sft", str(out), "--out", str(tmp_path / "all.sft.jsonl")), timeout_s=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert f"1 rows from 1 of {1 + len(BAD_TRANSCRIPTS)} episodes" in res.stdout
    _no_leftovers(tmp_path)


def test_failures_are_clean_and_leave_nothing_behind(tmp_path, capsys):
    """What fails the command instead (exit 2, the cause on stderr): a missing results file, a directory, an output
    that cannot be written; export-sft past --max-output-bytes (exit 1). No partial page, no *.tmp, an earlier
    output left as it was."""
    out = _files(tmp_path)
    assert main(["view", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "x.html")]) == 2
    assert main(["view", str(tmp_path), "--out", str(tmp_path / "x.html")]) == 2
    assert main(["export-sft", str(tmp_path), "--out", str(tmp_path / "x.jsonl")]) == 2
    (tmp_path / "is-a-dir.html").mkdir()
    assert main(["view", str(out), "--out", str(tmp_path / "is-a-dir.html")]) == 2
    assert main(["export-sft", str(out), "--out", str(tmp_path / "is-a-dir.html")]) == 2
    sft = tmp_path / "kept.jsonl"
    sft.write_text("earlier\n")
    assert main(["export-sft", str(out), "--out", str(sft), "--max-output-bytes", "10"]) == 1
    err = capsys.readouterr().err
    assert "--max-output-bytes" in err and "Traceback" not in err and "is a directory" in err
    assert sft.read_text() == "earlier\n" and not (tmp_path / "x.html").exists()
    (tmp_path / "is-a-dir.html").rmdir()
    _no_leftovers(tmp_path)


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def test_bidi_controls_are_shown_not_applied(tmp_path):
    """A response that reverses what follows it (RLO) cannot spoof the page: every bidi control is a visible
    [U+XXXX] mark, in values and keys; export-sft keeps the text exactly."""
    tid = "t"
    spoof = "<action>craft \u202egnikcah\u202c</action>"
    turn = TURN | {"response": spoof, "info": {"x\u2067y": "a\u200fb", "action_valid": True}}
    out = tmp_path / "bidi.jsonl"
    out.write_bytes(_dumps(_row("task\u202e1", tid, family="fam\u2066")))
    transcripts_path(out).write_bytes(_transcript_line("task\u202e1", tid, json.dumps(_TR | {"turns": [turn]})
                                                       .encode()))
    page_path = tmp_path / "bidi.html"
    assert main(["view", str(out), "--out", str(page_path), "--title", "t\u202eitle"]) == 0
    page = page_path.read_text(encoding="utf-8")
    assert not any(c in page for c in BIDI)
    for mark in ("[U+202E]gnikcah[U+202C]", "task[U+202E]1", "fam[U+2066]", "x[U+2067]y", "a[U+200F]b",
                 "t[U+202E]itle"):
        assert mark in page, mark
    sft = tmp_path / "bidi.sft.jsonl"
    assert main(["export-sft", str(out), "--out", str(sft)]) == 0
    assert spoof in [m["content"] for m in json.loads(sft.read_text())["messages"]]


def zlib_bomb(pre: bytes, size: int, post: bytes) -> bytes:
    """A zlib stream of ``pre + b"A" * size + post`` (size a multiple of 1 MiB), built in O(output) time: one
    compressed 1 MiB block, repeated (a full flush makes each block independent), and the right Adler-32."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = b"A" * (1 << 20)
    head = c.compress(pre) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    n = size >> 20
    tail = c.compress(post) + c.flush()
    adler = zlib.adler32(pre)
    for _ in range(n):
        adler = zlib.adler32(chunk, adler)
    adler = zlib.adler32(post, adler)
    return b"\x78\xda" + head + block * n + tail + adler.to_bytes(4, "big")


def _bomb_files(tmp_path: Path, size: int) -> Path:
    """One good episode, then one whose transcript's response is ``size`` bytes of "A" (1 GiB: a 1.4 MB line)."""
    pre = json.dumps(_TR | {"turns": [TURN | {"response": "@@"}]}).encode()
    pre, post = pre.split(b"@@")
    data = base64.b64encode(zlib_bomb(pre, size, post)).decode()
    return _files(tmp_path, bad_transcript=lambda tid: _dumps({"transcript_id": tid, **KEY,
                                                                "task_id": "bad-transcript",
                                                                "encoding": "zlib+base64", "data": data}))


def test_a_zlib_bomb_is_refused_in_bounded_memory(tmp_path):
    """A 1.4 MB transcript line inflating to 1 GiB (before: view 4.0 GB RSS and a 1 GB page, export-sft 3 GB RSS and
    a 1 GB dataset): both commands stop inflating at --max-transcript-bytes, say so, and stay small."""
    out = _bomb_files(tmp_path, 1 << 30)
    assert transcripts_path(out).stat().st_size < 2_000_000
    page = tmp_path / "bomb.html"
    res = run_measured(agentgym("view", str(out), "--out", str(page)), timeout_s=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "inflates past 33554432 bytes (--max-transcript-bytes)" in res.stderr
    assert page.stat().st_size < 1_000_000 and res.peak_rss_mb < 300, (page.stat().st_size, res.peak_rss_mb)
    view_rss = res.peak_rss_mb
    sft = tmp_path / "bomb.sft.jsonl"
    res = run_measured(agentgym("export-sft", str(out), "--out", str(sft)), timeout_s=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "inflates past" in res.stderr and "1 with an unreadable transcript" in res.stdout
    assert sft.stat().st_size < 10_000 and res.peak_rss_mb < 300, res.peak_rss_mb
    print(f"zlib bomb: view peak RSS {view_rss:.0f} MB, export-sft {res.peak_rss_mb:.0f} MB")
    _no_leftovers(tmp_path)


def test_a_large_transcript_under_the_limit_is_cut_on_the_page(tmp_path):
    """24 MiB of one response (under the inflate limit): the page cuts it to --max-field-chars and says so; a page
    budget leaves transcripts out, each episode saying why; export-sft keeps the text whole."""
    out = _bomb_files(tmp_path, 24 << 20)
    page = tmp_path / "big.html"
    res = run_measured(agentgym("view", str(out), "--out", str(page)), timeout_s=60)
    assert res.returncode == 0, res.stderr[-2000:]
    text = page.read_text(encoding="utf-8")
    assert page.stat().st_size < 1_000_000 and f"{(24 << 20) - 100_000} more characters not shown" in text
    assert "1 value(s) cut to 100000 characters (--max-field-chars)" in text
    assert res.peak_rss_mb < 400, res.peak_rss_mb
    small = tmp_path / "small.html"
    assert main(["view", str(out), "--out", str(small), "--max-page-bytes", "65536"]) == 0  # < one 100k value
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', small.read_text(),
                                re.S).group(1))
    eps = {e["task_id"]: e for e in data["episodes"]}
    assert eps["good"]["transcript"] is not None and eps["bad-transcript"]["transcript"] is None
    assert "--max-page-bytes" in eps["bad-transcript"]["transcript_note"]
    assert any("1 transcript(s) left out" in n for n in data["notes"])
    sft = tmp_path / "big.sft.jsonl"
    res = run_measured(agentgym("export-sft", str(out), "--out", str(sft)), timeout_s=60)
    assert res.returncode == 0 and res.peak_rss_mb < 400, (res.stderr[-2000:], res.peak_rss_mb)
    assert sft.stat().st_size > 24 << 20  # exported text is never cut
    _no_leftovers(tmp_path)


def test_eval_resume_and_report_skip_malformed_rows(tmp_path, caplog):
    """The same reader serves resume and ``agentgym report``: hostile lines appended to a finished run are skipped
    with warnings; the resume plays nothing again and the report counts the real episodes."""
    from agentgym.eval.grid import EvalGrid, run_grid
    from agentgym.registration import get_entry
    from agentgym.rollout.policy import OraclePolicy

    ok, why = get_entry("TextCraft-v0").split_available("gen-depth1")
    if not ok:
        pytest.skip(f"TextCraft-v0 gen-depth1 is not available here: {why}")
    out = tmp_path / "resume.jsonl"
    grid = EvalGrid(env_id="TextCraft-v0", split="gen-depth1", first=2, max_turns=4)
    first = run_grid(grid, OraclePolicy(), out)
    with open(out, "ab") as fh:
        for name in ("invalid UTF-8", "null", "seed null", "5000-digit seed", "identity_fields 5", "lone surrogate"):
            line, _ = BAD_ROWS[name]
            fh.write(line.replace(b'"adapt-test"', b'"gen-depth1"').rstrip(b"\n") + b"\n")
    caplog.set_level(logging.WARNING)
    again = run_grid(grid, OraclePolicy(), out)
    assert [r["task_id"] for r in again] == [r["task_id"] for r in first]
    assert sum(1 for _ in open(out, "rb")) == len(first) + 6  # nothing played again
    assert caplog.text.count("results row skipped") >= 6
    assert main(["report", str(out), "--format", "json"]) == 0
