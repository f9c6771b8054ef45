"""Results files: one JSON object per line, appended and flushed (and fsync'ed) as each episode finishes.

A row's *key* is ``(env_id, split, task_id, seed, trial)``. On resume, rows of episodes that finished without an
error are kept and skipped; errored episodes are played again and the newer row wins. A line that cannot be used
(a torn last line from a killed run, or anything else :func:`row_problem` and :mod:`agentgym.eval.jsonl` refuse:
invalid UTF-8, a non-object, a key field missing or of the wrong type...) is skipped with a warning naming the file
and the line; on resume its episode is played again.

Every row also records the *run identity* that made it (:data:`IDENTITY_FIELDS`: the policy, its result-affecting
options, ``max_turns`` and the env kwargs; plus the env's own identity fields, top-level, from
:meth:`agentgym.core.AgentEnv.run_identity`: e.g. TextCraft's ``rules``, τ's ``task_set``). An env split in a results file belongs to one identity: resuming it
with another one raises :class:`ResultsMismatchError` rather than skipping episodes that another configuration
played (and reporting its rows as this run's). Use another results file for another configuration.

A row's ``transcript_id`` (absent when the run kept no transcripts, ``agentgym eval --no-transcripts``) names the
episode's transcript in the side file ``RESULTS.transcripts.jsonl``: every prompt, raw response, observation, step
``info`` and request usage, compressed (:mod:`agentgym.eval.transcripts`). ``agentgym view`` and ``agentgym
export-sft`` read it; a resumed errored episode's new row names its new transcript.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ..errors import AgentGymError
from ..rollout.progress import token_count
from .depth import cap_depth
from .jsonl import DEFAULT_MAX_LINE_BYTES, JsonlLine, SkipLog, read_jsonl

if TYPE_CHECKING:  # the row is read off a trajectory; rollout never needs eval at import
    from ..rollout.records import Trajectory

__all__ = ["ResultsFile", "ResultsMismatchError", "episode_key", "IDENTITY_FIELDS", "run_identity",
           "env_identity_fields", "episode_fields", "results_row", "row_problem"]

logger = logging.getLogger(__name__)

#: The row fields that name the configuration a run was made with.
IDENTITY_FIELDS = ("policy", "policy_args", "max_turns", "env_kwargs", "selection")


class ResultsMismatchError(AgentGymError):
    """A results file already holds rows of the same env split made with another run configuration."""

    kind = "results_mismatch"


def episode_key(row: dict) -> tuple:
    return (row["env_id"], row["split"], str(row["task_id"]), int(row["seed"]), int(row["trial"]))


#: Seeds and trials are integers below this in magnitude (numpy takes seeds below 2**64).
_MAX_KEY_INT = 2 ** 64
#: Counts and numbers of a row (turns, score, tokens) are below this in magnitude (a float can hold them).
_MAX_NUMBER = 2 ** 63


def _kind(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _is_int(v: Any, bound: int = _MAX_NUMBER) -> bool:
    return type(v) is int and -bound < v < bound


def _is_number(v: Any) -> bool:
    return type(v) is float or _is_int(v)


def row_problem(row: dict) -> str | None:
    """Why a results row cannot be used, or None: what every reader of a row relies on (the episode key, the
    summaries' columns, the identity fields), by type. A row ``agentgym eval`` wrote always passes."""
    for k in ("env_id", "split"):
        if type(row.get(k)) is not str:
            return f"{k} is {_kind(row.get(k))}, not a string"
    task = row.get("task_id")
    if type(task) is not str and not _is_int(task, _MAX_KEY_INT):
        return f"task_id is {_kind(task)}, not a string or an integer"
    for k in ("seed", "trial"):
        if not _is_int(row.get(k), _MAX_KEY_INT):
            return f"{k} is {_kind(row.get(k))}, not an integer below 2**64"
    error = row.get("error")
    if error is not None and not isinstance(error, dict):
        return f"error is {_kind(error)}, not an object or null"
    if error is None:  # a scored episode: the summaries read these
        if type(row.get("won")) is not bool:
            return f"won is {_kind(row.get('won'))}, not a boolean"
        if not _is_number(row.get("score")):
            return f"score is {_kind(row.get('score'))}, not a number"
        if not _is_int(row.get("turns")):
            return f"turns is {_kind(row.get('turns'))}, not an integer"
    for k in ("score", "total_reward"):
        if row.get(k) is not None and not _is_number(row[k]):
            return f"{k} is {_kind(row[k])}, not a number or null"
    for k in ("turns", "prompt_tokens", "completion_tokens"):
        if row.get(k) is not None and not _is_int(row[k]):
            return f"{k} is {_kind(row[k])}, not an integer or null"
    if row.get("won") is not None and type(row["won"]) is not bool:
        return f"won is {_kind(row['won'])}, not a boolean or null"
    ids = row.get("identity_fields")
    if ids is not None and not (isinstance(ids, list) and all(type(k) is str for k in ids)):
        return f"identity_fields is {_kind(ids)}, not a list of strings"
    for k in ("policy_args", "env_kwargs"):
        if row.get(k) is not None and not isinstance(row[k], dict):
            return f"{k} is {_kind(row[k])}, not an object or null"
    if row.get("transcript_id") is not None and type(row["transcript_id"]) is not str:
        return f"transcript_id is {_kind(row['transcript_id'])}, not a string or null"
    metrics = row.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, dict):
            return f"metrics is {_kind(metrics)}, not an object or null"
        for name, v in metrics.items():
            if v is not None and type(v) is not bool and not _is_number(v):
                return f"metrics[{name[:40]!r}] is {_kind(v)}, not a number or null"
    return None


def run_identity(policy: str, policy_args: dict | None, max_turns: int | None, env_kwargs: dict | None,
                 env_identity: dict | None = None, selection: dict | None = None) -> dict:
    """The identity fields of a run, as they read back from JSON (tuples become lists; objects that JSON cannot
    hold, such as a retriever passed in ``env_kwargs``, are recorded by their type: a default ``repr`` holds a
    memory address, which would make every resume in a new process look like another run).

    ``env_identity`` (the env's :meth:`~agentgym.core.AgentEnv.run_identity`, e.g. ``{"rules": "canonical"}``)
    adds top-level fields; they may not reuse the names of the base fields or of a row's own columns.
    ``selection`` (:func:`agentgym.eval.sample.select_tasks`'s record: a stratified sample, the first N, exact ids)
    is recorded only when the run plays a part of the split, so rows of whole-split runs read as before."""
    ident = {"policy": policy, "policy_args": dict(policy_args or {}), "max_turns": max_turns,
             "env_kwargs": dict(env_kwargs or {})}
    if selection is not None:
        ident["selection"] = dict(selection)
    env_identity = dict(env_identity or {})
    for k, v in env_identity.items():
        if k in ident or k in _ROW_COLUMNS or k == "identity_fields":
            raise ValueError(f"env identity field {k!r} would overwrite a results-row column")
        ident[k] = v
    # Named in the row too, so readers (``agentgym report``) can tell the env's identity fields from other columns.
    ident["identity_fields"] = sorted(env_identity)
    return json.loads(json.dumps(ident, sort_keys=True, default=_type_label))


#: Columns every results row has besides the identity fields (env identity fields may not shadow them).
_ROW_COLUMNS = frozenset({"env_id", "split", "task_id", "seed", "trial", "won", "score", "turns", "total_reward",
                          "error", "wall_s", "family", "metrics", "transcript_id", "selection", "endpoint",
                          "sampling"})


def env_identity_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The env's own identity fields (e.g. ``{"rules": "canonical"}``) of a results row or run identity."""
    return {k: row.get(k) for k in row.get("identity_fields") or ()}


def _type_label(obj: Any) -> str:
    return f"<{type(obj).__module__}.{type(obj).__qualname__}>"


def _seconds(value: Any) -> float:
    return float(value) if type(value) in (int, float) and value >= 0 else 0.0


def episode_fields(traj: "Trajectory") -> dict:
    """The fields of a results row that come from the played episode (JSON-serialisable). An env that reports
    episode metrics beyond ``score`` puts them in its info as ``metrics`` (name -> number, e.g. WikiSearch's
    ``{"em": 1.0, "f1": 1.0}``); the last turn's dict becomes the row's ``metrics``, which eval summaries average.
    Model-backed policies' per-request records (tokens, latency) become ``requests`` and their totals."""
    last = traj.turns[-1].info if traj.turns else {}
    extra = {"metrics": dict(last["metrics"])} if isinstance(last.get("metrics"), dict) else {}
    requests = [dict(t.usage, turn=t.turn_idx) for t in traj.turns if isinstance(t.usage, dict)]
    if requests:
        # Counts that are not numbers (from a custom policy's usage, which is not checked the way openai: answers
        # are) count 0: a bad count must not crash the run's rows.
        extra |= {"requests": requests,
                  "prompt_tokens": sum(token_count(r.get("prompt_tokens")) for r in requests),
                  "completion_tokens": sum(token_count(r.get("completion_tokens")) for r in requests),
                  "policy_latency_s": round(sum(_seconds(r.get("latency_s")) for r in requests), 6)}
    return {"task_id": traj.task_id, "seed": traj.seed, "member": traj.member, "won": traj.won,
            "score": traj.score, "turns": len(traj.turns), "total_reward": traj.total_reward,
            "truncated": traj.truncated, "progress": last.get("progress"),
            "invalid_actions": sum(not t.info.get("action_valid", True) for t in traj.turns),
            **traj.meta, **extra, "error": traj.error.to_dict() if traj.error else None}


def results_row(traj: "Trajectory", env_id: str, split: str, identity: dict[str, Any]) -> dict:
    """The results row of one eval episode: its key (``env_id``, ``split``, the *requested* ``task_id``, ``seed``,
    ``trial``), the episode's fields (:func:`episode_fields`), the run identity and ``wall_s``."""
    row = {"env_id": env_id, "split": split, **episode_fields(traj), **identity,
           "task_id": traj.task, "seed": traj.seed, "trial": traj.trial, "wall_s": round(traj.wall_s, 4)}
    row.pop("member", None)
    return row


class ResultsFile:
    """Append-only JSONL results with resume."""

    def __init__(self, path: str | os.PathLike, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        self.path = Path(path)
        self.max_line_bytes = max_line_bytes

    def read(self, skipped: SkipLog | None = None) -> list[dict]:
        """The usable rows, in file order; every other line is skipped with a warning naming it
        (:mod:`agentgym.eval.jsonl`, :func:`row_problem`)."""
        return [line.value for line in self.lines(skipped)]

    def lines(self, skipped: SkipLog | None = None) -> Iterator[JsonlLine]:
        """The usable rows with their line numbers and byte offsets (:func:`~agentgym.eval.jsonl.read_jsonl`)."""
        if not self.path.exists():
            return iter(())
        return read_jsonl(self.path, check=row_problem, max_line_bytes=self.max_line_bytes, skipped=skipped,
                          what="results row")

    def latest(self, rows: list[dict] | None = None) -> dict[tuple, dict]:
        """The last row of each episode key (of ``rows`` when the caller has already read the file)."""
        out: dict[tuple, dict] = {}
        for row in self.read() if rows is None else rows:
            out[episode_key(row)] = row
        return out

    def done_keys(self, rows: list[dict] | None = None) -> set[tuple]:
        return {k for k, row in self.latest(rows).items() if row.get("error") is None}

    def check_identity(self, env_id: str, split: str, identity: dict[str, Any],
                       rows: list[dict] | None = None) -> None:
        """Raise :class:`ResultsMismatchError` when rows of ``env_id``/``split`` were made with another identity
        (rows written before identities were recorded count as another one; so do rows without one of the env's
        identity fields, such as TextCraft rows written before ``rules`` existed)."""
        fields = list(dict.fromkeys([*IDENTITY_FIELDS, *identity]))
        for row in self.read() if rows is None else rows:
            if row.get("env_id") != env_id or row.get("split") != split:
                continue
            theirs = {f: row.get(f) for f in fields}
            mine = {f: identity.get(f) for f in fields}
            if theirs != mine:
                diff = ", ".join(f"{f}: {theirs[f]!r} there, {mine[f]!r} now" for f in fields
                                 if theirs[f] != mine[f])
                raise ResultsMismatchError(
                    f"{self.path} already holds {env_id}/{split} episodes of another run configuration ({diff}); "
                    "resuming would mix the two. Use another --out file for this configuration")

    def append(self, rows: Iterable[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            # A torn line from a killed run must not glue onto the next row.
            if fh.tell() > 0 and not self._ends_with_newline():
                fh.write("\n")
            for row in rows:  # nested deeper than the viewer's limit: cut with a marker (agentgym.eval.depth)
                fh.write(json.dumps(cap_depth(row), sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"
