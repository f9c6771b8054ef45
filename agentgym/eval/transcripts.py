"""Episode transcripts: what the policy saw and said, turn by turn, kept beside an eval's results file.

``agentgym eval`` writes one transcript per played episode (unless ``--no-transcripts``) into a *side file* next to
the results: ``RESULTS.jsonl`` -> ``RESULTS.transcripts.jsonl`` (:func:`transcripts_path`). Prompts repeat most of
their text from turn to turn (the task, the rules, the history window), so each transcript is stored compressed:
one JSON line per episode,

    {"transcript_id": "...", "env_id": ..., "split": ..., "task_id": ..., "seed": ..., "trial": ...,
     "encoding": "zlib+base64", "data": "<base64 of the zlib-compressed transcript JSON>"}

appended, flushed and fsync'ed *before* the episode's results row, which names it in its ``transcript_id`` field. A
reader resolves each episode's *latest* results row to the transcript that row names (:func:`load_episodes`), so a
resumed run stays consistent: a replayed errored episode gets a new transcript, and its new row points at it (the
old transcript stays in the file, unreferenced). A run killed between the two writes leaves an unreferenced
transcript and no row; the episode is played again on resume. A torn last line is ignored, as in results files.

Reading is bounded and never trusts the file (:mod:`agentgym.eval.jsonl` reads every line): a transcript is inflated
up to ``max_transcript_bytes`` (:class:`ReadLimits`; a 1.4 MB line can hold a gigabyte of zlib output) and checked
for the shape below (:func:`transcript_problem`); one that fails is left out with a warning naming the file and the
line, and its episode's :attr:`EpisodeRecord.transcript_note` says why. :func:`iter_episodes` decodes one episode's
transcript at a time (it keeps byte offsets, not transcripts), so a reader's memory does not grow with the file.

A decoded transcript (:func:`transcript_of`) is::

    {"version": 1,
     "first_observation": str,                 # the observation reset returned
     "turns": [{"turn": int,                   # 0-based
                "prompt": str,                 # the prompt exactly as the policy got it (history window included)
                "response": str,               # the raw model response
                "observation": str,            # what the env answered
                "reward": float, "terminated": bool, "truncated": bool,
                "info": dict,                  # the step's full info (agentgym.core.StepInfo + env extras)
                "usage": dict | None}, ...],   # the request's tokens / latency, for model-backed policies
     "error": dict | None}                     # the episode's typed error record, if it failed

The system prompt a model policy used is a run setting, not part of each turn: it is the results row's
``policy_args["system_prompt"]`` (:func:`system_prompt_of`).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import uuid
import zlib
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..jsonvalues import json_default
from .depth import cap_depth
from .jsonl import DEFAULT_MAX_LINE_BYTES, SkipLog, loads_checked, parse_line, read_jsonl, read_line_at
from .results import ResultsFile, episode_key, row_problem

__all__ = ["TRANSCRIPT_VERSION", "TranscriptFile", "EpisodeRecord", "transcripts_path", "transcript_of",
           "load_episodes", "iter_episodes", "system_prompt_of", "key_fields", "ReadLimits", "transcript_problem",
           "DEFAULT_MAX_TRANSCRIPT_BYTES"]

logger = logging.getLogger(__name__)

TRANSCRIPT_VERSION = 1
_ENCODING = "zlib+base64"

#: The default of ``--max-transcript-bytes``: the most bytes one transcript may inflate to (its JSON). A long
#: episode's transcript (50 turns of multi-KB prompts, info and usage) is a few MB.
DEFAULT_MAX_TRANSCRIPT_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ReadLimits:
    """How much a reader of a results file and its transcripts takes: ``max_line_bytes`` of a results row,
    ``max_transcript_bytes`` of one inflated transcript (its side-file line may be as long as that transcript
    stored without compression, in base64)."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_transcript_bytes: int = DEFAULT_MAX_TRANSCRIPT_BYTES

    @property
    def max_transcript_line_bytes(self) -> int:
        # base64 of a deflate stream: at most ~4/3 of the raw size plus a little (stored blocks) and the line's keys
        return self.max_transcript_bytes * 4 // 3 + 64 * 1024


def transcripts_path(results_path: str | os.PathLike) -> Path:
    """The side file of a results file: ``r.jsonl`` -> ``r.transcripts.jsonl`` (``r.out`` -> ``r.out.transcripts.jsonl``)."""
    p = Path(results_path)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(f"{stem}.transcripts.jsonl")


def transcript_of(traj) -> dict:
    """The transcript of a finished (or failed) :class:`~agentgym.rollout.records.Trajectory`."""
    turns = [{"turn": int(t.turn_idx), "prompt": t.prompt, "response": t.response, "observation": t.observation,
              "reward": float(t.reward), "terminated": bool(t.terminated), "truncated": bool(t.truncated),
              "info": t.info, "usage": t.usage} for t in traj.turns]
    # not copied: the dict is serialized once, by the writer (numpy values and the like: agentgym.jsonvalues)
    return {"version": TRANSCRIPT_VERSION, "first_observation": traj.first_observation, "turns": turns,
            "error": traj.error.to_dict() if traj.error is not None else None}


def _encode(transcript: dict) -> str:
    # values nested deeper than the shared limit are cut with a marker (agentgym.eval.depth), as in the results file
    raw = json.dumps(cap_depth(transcript), ensure_ascii=False, default=json_default).encode("utf-8")
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


class _Undecodable(ValueError):
    """A transcript line that cannot be turned into a transcript (its message says why)."""


def _inflate(data: bytes, limit: int) -> bytes:
    """zlib-decompress ``data``, stopping past ``limit`` bytes of output (never holding more)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise _Undecodable(f"not zlib data ({e})") from None
    if len(out) > limit:
        raise _Undecodable(f"it inflates past {limit} bytes (--max-transcript-bytes); a transcript that large is "
                           "not read")
    if not d.eof:
        raise _Undecodable("its zlib data is truncated")
    return out


def _decode(line: dict, max_bytes: int = DEFAULT_MAX_TRANSCRIPT_BYTES) -> dict:
    """A side-file line -> its transcript, inflated up to ``max_bytes`` and checked (:func:`transcript_problem`);
    raises ``ValueError`` saying why not."""
    if line.get("encoding") != _ENCODING:
        raise _Undecodable(f"unknown transcript encoding {str(line.get('encoding'))[:40]!r}")
    data = line.get("data")
    if type(data) is not str:
        raise _Undecodable("its data is not a string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise _Undecodable(f"its data is not base64 ({e})") from None
    value, why = loads_checked(_inflate(raw, max_bytes))
    if why is not None:
        raise _Undecodable(f"the inflated transcript is {why}")
    why = transcript_problem(value)
    if why is not None:
        raise _Undecodable(why)
    return value


def _kind(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def transcript_problem(tr: Any) -> str | None:
    """Why a decoded transcript cannot be used, or None: the shape of the module doc, by type (what ``agentgym view``
    and ``export-sft`` read). A transcript ``agentgym eval`` wrote always passes."""
    if not isinstance(tr, dict):
        return f"the transcript is {_kind(tr)}, not an object"
    turns = tr.get("turns")
    if not isinstance(turns, list):
        return f"turns is {_kind(turns)}, not a list"
    for k in ("first_observation",):
        if tr.get(k) is not None and type(tr[k]) is not str:
            return f"{k} is {_kind(tr[k])}, not a string"
    if tr.get("error") is not None and not isinstance(tr["error"], dict):
        return f"error is {_kind(tr['error'])}, not an object or null"
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            return f"turns[{i}] is {_kind(t)}, not an object"
        if type(t.get("turn")) is not int or not 0 <= t["turn"] < 2 ** 31:
            return f"turns[{i}].turn is {_kind(t.get('turn'))}, not a turn number"
        for k in ("prompt", "response", "observation"):
            if type(t.get(k)) is not str:
                return f"turns[{i}].{k} is {_kind(t.get(k))}, not a string"
        if type(t.get("reward")) not in (int, float) or (type(t["reward"]) is int and abs(t["reward"]) >= 2 ** 63):
            return f"turns[{i}].reward is {_kind(t.get('reward'))}, not a number"
        for k in ("info", "usage"):
            if t.get(k) is not None and not isinstance(t[k], dict):
                return f"turns[{i}].{k} is {_kind(t[k])}, not an object or null"
    return None


def _line_problem(line: dict) -> str | None:
    """What a side-file line needs before its transcript is decoded."""
    if type(line.get("transcript_id")) is not str:
        return f"transcript_id is {_kind(line.get('transcript_id'))}, not a string"
    if type(line.get("data")) is not str:
        return f"data is {_kind(line.get('data'))}, not a string"
    return None


class TranscriptFile:
    """The append-only side file of transcripts (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, limits: ReadLimits | None = None):
        self.path = Path(path)
        self.limits = limits or ReadLimits()
        self._jsonl = ResultsFile(self.path)  # the same append-flush-fsync as results (reading is this class's own)

    def append(self, key_fields: dict, transcript: dict) -> str:
        """Store ``transcript`` for the episode ``key_fields`` (``env_id``, ``split``, ``task_id``, ``seed``,
        ``trial``); return its new ``transcript_id``."""
        tid = uuid.uuid4().hex
        line = {"transcript_id": tid, **{k: key_fields[k] for k in ("env_id", "split", "task_id", "seed", "trial")},
                "encoding": _ENCODING, "data": _encode(transcript)}
        self._jsonl.append([line])
        return tid

    def index(self, ids: Iterable[str] | None = None, skipped: SkipLog | None = None) -> dict[str, tuple[int, int]]:
        """``transcript_id -> (line number, byte offset)`` of the transcripts in ``ids`` (all when None), without
        decoding them; unusable lines are skipped with a warning."""
        wanted = None if ids is None else set(ids)
        out: dict[str, tuple[int, int]] = {}
        if not self.path.exists():
            return out
        for line in read_jsonl(self.path, check=_line_problem, max_line_bytes=self.limits.max_transcript_line_bytes,
                               skipped=skipped, what="transcript"):
            tid = line.value["transcript_id"]
            if wanted is None or tid in wanted:
                out[tid] = (line.number, line.offset)
        return out

    def load(self, fh, where: tuple[int, int]) -> tuple[dict | None, str | None]:
        """The transcript on the line at ``where`` (from :meth:`index`) of the side file open in ``fh`` (binary):
        ``(transcript, None)``, or ``(None, why)`` after a warning naming the file and line."""
        number, offset = where
        raw = read_line_at(fh, offset, self.limits.max_transcript_line_bytes)
        line, why = (None, "the line changed since it was indexed") if raw is None else parse_line(raw, _line_problem)
        if line is not None:
            try:
                return _decode(line, self.limits.max_transcript_bytes), None
            except ValueError as e:  # _Undecodable
                why = str(e)
        logger.warning("%s:%d: transcript skipped: %s", self.path, number, why)
        return None, why

    def read(self, ids: Iterable[str] | None = None) -> dict[str, dict]:
        """Decoded transcripts by id (only those in ``ids`` when given: decoding is the costly part); all in memory
        at once: :func:`iter_episodes` decodes one at a time."""
        out: dict[str, dict] = {}
        where = self.index(ids)
        if not where:
            return out
        with open(self.path, "rb") as fh:
            for tid, at in where.items():
                tr, _ = self.load(fh, at)
                if tr is not None:
                    out[tid] = tr
        return out


@dataclass
class EpisodeRecord:
    """One episode of a results file: its latest row and the transcript that row names (None when the run kept no
    transcripts, ``--no-transcripts``, or the side file lacks it or holds it in a form that cannot be read:
    ``transcript_note`` then says why)."""

    row: dict
    transcript: dict | None
    transcript_note: str | None = None

    @property
    def system_prompt(self) -> str | None:
        return system_prompt_of(self.row)


def system_prompt_of(row: dict) -> str | None:
    """The system prompt the row's policy sent before each prompt (``--system-prompt``), or None."""
    args = row.get("policy_args") or {}
    sp = args.get("system_prompt") if isinstance(args, dict) else None
    return sp if isinstance(sp, str) and sp else None


def load_episodes(results_path: str | os.PathLike, *, with_transcripts: bool = True,
                  limits: ReadLimits | None = None) -> list[EpisodeRecord]:
    """The latest row of every episode in ``results_path`` (file order of first appearance), each with its
    transcript from the side file (all in memory: :func:`iter_episodes` yields them one at a time)."""
    return list(iter_episodes(results_path, with_transcripts=with_transcripts, limits=limits))


def iter_episodes(results_path: str | os.PathLike, *, with_transcripts: bool = True, limits: ReadLimits | None = None,
                  skipped: SkipLog | None = None) -> Iterator[EpisodeRecord]:
    """:func:`load_episodes` one episode at a time: the results file is read once for the latest row of each
    episode (kept by byte offset), the side file once for where each transcript is; then each episode's row and
    transcript are read back and decoded as it is yielded, so at most one transcript is in memory. Unusable lines
    are skipped with warnings (counted in ``skipped``). Raises ``FileNotFoundError`` without the results file."""
    limits = limits or ReadLimits()
    results = ResultsFile(results_path, limits.max_line_bytes)
    if not results.path.exists():
        raise FileNotFoundError(f"no results file {results.path}")
    if results.path.is_dir():
        raise IsADirectoryError(f"{results.path} is a directory, not a results file")
    latest: dict[tuple, tuple[int, str | None]] = {}  # episode key -> (offset of its latest row, its transcript id)
    for line in results.lines(skipped):
        tid = line.value.get("transcript_id")
        latest[episode_key(line.value)] = (line.offset, tid if isinstance(tid, str) else None)
    where: dict[str, tuple[int, int]] = {}
    side = transcripts_path(results_path)
    side_file = TranscriptFile(side, limits)
    if with_transcripts:
        ids = [tid for _, tid in latest.values() if tid is not None]
        if ids and side.exists():
            where = side_file.index(ids, skipped)
        missing = len(set(ids)) - len(where)
        if missing:
            logger.warning("%s: %d episode transcript(s) named by %s are missing", side, missing, results.path)
    with open(results.path, "rb") as rows, (open(side, "rb") if where else nullcontext()) as trs:
        for offset, tid in latest.values():
            raw = read_line_at(rows, offset, limits.max_line_bytes)
            row, why = (None, "changed while read") if raw is None else parse_line(raw, row_problem)
            if row is None:  # the file changed under us (a run appending is fine: offsets only grow)
                logger.warning("%s: a row at byte %d %s; skipped", results.path, offset, why)
                continue
            transcript, note = None, None
            if with_transcripts and tid is not None:
                if tid in where:
                    transcript, note = side_file.load(trs, where[tid])
                else:
                    note = f"transcript {tid} is not in {side.name}"
            yield EpisodeRecord(row, transcript, note)


def key_fields(row: dict) -> dict:
    """The episode-key fields of a row (for :meth:`TranscriptFile.append`)."""
    env_id, split, task_id, seed, trial = episode_key(row)
    return {"env_id": env_id, "split": split, "task_id": task_id, "seed": seed, "trial": trial}
