"""SFT data from eval transcripts: ``agentgym export-sft RESULTS.jsonl --out DATA.jsonl``.

Reads the latest row of every episode and its transcript (:mod:`.transcripts`; the eval must have kept them, the
default) and writes one JSON line per episode, or per turn with ``per_turn``, in the formats TRL's ``SFTTrainer`` and
``datasets.load_dataset("json", ...)`` read:

* **episode rows** (default): ``messages`` = the conversation in the env's prompt contract. Text form: the system
  prompt the run's policy used (or ``system``), the first prompt exactly as the policy saw it (task, rules and first
  observation), then each raw response as an ``assistant`` message and the env's next observation as a ``user``
  message. Tool form (the default for tool envs such as TauAirline, ``form="tools"`` for any env): the system
  message of the env's :class:`~agentgym.chat.ChatForm`, the same first prompt, then each response as an assistant
  message with ``tool_calls`` (its reasoning as ``content``) and each observation as a ``tool`` message; the row's
  ``tools`` column holds the tool schemas as a JSON string (TRL parses it), and call ``arguments`` are JSON strings
  (OpenAI's wire format: one Arrow type for every tool). The observation after the last response is left out.
* **turn rows** (``per_turn``): ``prompt`` = ``[system?, user]`` with the prompt exactly as the policy saw it
  (history window included), ``completion`` = ``[assistant]`` with the raw response: TRL's conversational
  prompt-completion format (the loss covers the completion only). With ``context_form="transcript"`` the prompt is
  the training's transcript instead (:mod:`agentgym.context`: the first prompt, then every earlier response and
  observation), whatever form the eval ran in; with ``text`` the row holds plain strings (``prompt``, ``completion``:
  TRL's standard prompt-completion format, for tokenizers without a chat template; no system message).

Every row also carries ``env_id``, ``split``, ``task_id``, ``seed``, ``trial``, ``policy``, ``family``, ``won``,
``score`` and ``total_reward`` (turn rows: ``turn``, ``reward``, ``action_valid``). Episodes that failed (typed
error) are never exported; ``success`` ("won"/"lost") and ``min_score``/``max_score`` filter the rest.

Hostile or damaged inputs: the files are read by the shared safe reader (:func:`~agentgym.eval.transcripts.
iter_episodes`, one transcript in memory at a time): a malformed results row or transcript line is skipped with a
warning naming the file and line, and a transcript that cannot be read (malformed, or inflating past
``max_transcript_bytes``) leaves its episode out, counted as ``unreadable``; exported text is never cut. The rows go to
a temporary file beside ``out``, moved into place when every row is written (not when there is none) and removed on
any failure; past
``max_output_bytes`` of rows (per-turn transcript rows grow with the square of an episode's length) the export stops
with an :class:`ExportTooLarge` error and writes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..chat import ChatForm, chat_form
from ..errors import AgentGymError
from .transcripts import DEFAULT_MAX_TRANSCRIPT_BYTES, EpisodeRecord, ReadLimits, iter_episodes

__all__ = ["ExportConfig", "ExportStats", "export_sft", "episode_row", "turn_rows", "episode_messages", "main",
           "ExportTooLarge", "DEFAULT_MAX_OUTPUT_BYTES"]

#: The default of ``--max-output-bytes``.
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 ** 3


class ExportTooLarge(AgentGymError):
    """The export would write more than ``max_output_bytes``: nothing is written."""

logger = logging.getLogger(__name__)

FORMS = ("auto", "text", "tools")


@dataclass
class ExportConfig:
    """What to export. ``form``: "auto" (tool form for envs with native tools, text otherwise), "text" or "tools"
    (episode rows only); ``success``: None (all), "won" or "lost"; ``min_score``/``max_score``: inclusive bounds on
    the episode score; ``system``: the system message of text-form rows instead of the run's system prompt (tool
    form: instead of the chat form's)."""

    per_turn: bool = False
    form: str = "auto"
    success: str | None = None
    min_score: float | None = None
    max_score: float | None = None
    system: str | None = None
    text: bool = False
    context_form: Any = None
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_transcript_bytes: int = DEFAULT_MAX_TRANSCRIPT_BYTES

    def __post_init__(self) -> None:
        if self.max_output_bytes < 1 or self.max_transcript_bytes < 1024:
            raise ValueError("max_output_bytes must be >= 1 and max_transcript_bytes >= 1024")
        if (self.text or self.context_form is not None) and not self.per_turn:
            raise ValueError("text and context_form apply to per-turn rows (per_turn=True)")
        if self.context_form is not None:
            from ..context import ContextForm

            if ContextForm.parse(self.context_form).kind != "transcript":
                raise ValueError(f"context_form must be None (the prompt as the policy saw it) or a transcript form, "
                                 f"got {self.context_form!r}")
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")
        if self.success not in (None, "won", "lost"):
            raise ValueError(f"success must be None, 'won' or 'lost', got {self.success!r}")

    def keeps(self, row: dict) -> bool:
        if self.success == "won" and not row.get("won"):
            return False
        if self.success == "lost" and row.get("won"):
            return False
        score = float(row.get("score") or 0.0)
        if self.min_score is not None and score < self.min_score:
            return False
        return self.max_score is None or score <= self.max_score


@dataclass
class ExportStats:
    episodes: int = 0
    rows: int = 0
    errored: int = 0
    filtered: int = 0
    no_transcript: int = 0
    unreadable: int = 0  # a transcript named by its row that could not be read (see the warnings)
    bytes: int = 0
    by_env: dict = field(default_factory=dict)

    def describe(self) -> str:
        skipped = [f"{n} {what}" for n, what in ((self.errored, "errored"), (self.filtered, "filtered out"),
                                                 (self.no_transcript, "without a transcript"),
                                                 (self.unreadable, "with an unreadable transcript")) if n]
        kept = self.episodes - self.errored - self.filtered - self.no_transcript - self.unreadable
        return (f"{self.rows} rows from {kept} of {self.episodes} episodes"
                + (f" (skipped: {', '.join(skipped)})" if skipped else ""))


def _meta(row: dict) -> dict:
    return {"env_id": row["env_id"], "split": row["split"], "task_id": str(row["task_id"]), "seed": int(row["seed"]),
            "trial": int(row["trial"]), "policy": str(row.get("policy", "")),
            "family": None if row.get("family") is None else str(row["family"]), "won": bool(row.get("won")),
            "score": float(row.get("score") or 0.0), "total_reward": float(row.get("total_reward") or 0.0)}


def episode_messages(rec: EpisodeRecord, form: ChatForm | None = None, system: str | None = None) -> list[dict]:
    """The conversation of one episode: text form without ``form``, tool form with it (see the module doc)."""
    turns = rec.transcript["turns"] if rec.transcript else []
    if not turns:
        raise ValueError("the episode has no recorded turns")
    if form is None:
        sys_text = system if system is not None else rec.system_prompt
    else:
        sys_text = system if system is not None else form.system
    msgs: list[dict] = [{"role": "system", "content": sys_text}] if sys_text else []
    msgs.append({"role": "user", "content": turns[0]["prompt"]})
    for i, t in enumerate(turns):
        last = i == len(turns) - 1
        if form is None:
            msgs.append({"role": "assistant", "content": t["response"]})
            if not last:
                msgs.append({"role": "user", "content": t["observation"]})
            continue
        msg = form.assistant_message(t["response"], t.get("info") or {})
        msgs.append(msg)
        if last:
            continue
        if "tool_calls" in msg:
            msgs.append({"role": "tool", "name": msg["tool_calls"][0]["function"]["name"], "content": t["observation"]})
        else:
            msgs.append({"role": "user", "content": t["observation"]})
    return msgs


def episode_row(rec: EpisodeRecord, form: ChatForm | None = None, system: str | None = None) -> dict:
    """One episode row (``messages`` [+ ``tools``] + metadata)."""
    row = {"messages": episode_messages(rec, form, system)}
    if form is not None:
        row["tools"] = json.dumps(form.tool_schemas(), ensure_ascii=False)
    return row | _meta(rec.row)


def turn_rows(rec: EpisodeRecord, system: str | None = None, *, text: bool = False,
              context_form: Any = None) -> list[dict]:
    """One row per turn: the prompt exactly as the policy saw it (or, with ``context_form="transcript"``, the
    transcript up to that turn) and the raw response as the completion; plain strings with ``text``."""
    return list(iter_turn_rows(rec, system, text=text, context_form=context_form))


def iter_turn_rows(rec: EpisodeRecord, system: str | None = None, *, text: bool = False, context_form: Any = None):
    """:func:`turn_rows` one row at a time (a long episode's transcript-form rows hold its whole history each)."""
    from ..context import ContextForm

    sys_text = system if system is not None else rec.system_prompt
    head = [{"role": "system", "content": sys_text}] if sys_text else []
    meta = _meta(rec.row)
    turns = (rec.transcript or {}).get("turns", [])
    form = ContextForm.parse(context_form) if context_form is not None else None
    first = None
    if form is not None and turns:
        first = turns[0]["prompt"] if form.first == "prompt" else rec.transcript["first_observation"]
    for k, t in enumerate(turns):
        prompt = t["prompt"] if form is None else \
            form.render(first, [(u["response"], u["observation"]) for u in turns[:k]])
        if text:
            pair = {"prompt": prompt, "completion": t["response"]}
        else:
            pair = {"prompt": head + [{"role": "user", "content": prompt}],
                    "completion": [{"role": "assistant", "content": t["response"]}]}
        yield {**pair, **meta, "turn": int(t["turn"]), "reward": float(t["reward"]),
               "action_valid": bool((t.get("info") or {}).get("action_valid", True))}


def export_sft(results: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike,
               config: ExportConfig | None = None) -> ExportStats:
    """Write the SFT rows of every kept episode of ``results`` (one or more results files) to ``out`` (JSONL,
    overwritten, only once every row is written, and not at all when no row is: see the module doc); return what
    was exported and skipped.
    Raises :class:`ExportTooLarge` past ``config.max_output_bytes``."""
    cfg = config or ExportConfig()
    paths = [results] if isinstance(results, (str, os.PathLike)) else list(results)
    stats = ExportStats()
    forms: dict[str, ChatForm | None] = {}
    limits = ReadLimits(max_transcript_bytes=cfg.max_transcript_bytes)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            for path in paths:
                for rec in iter_episodes(path, limits=limits):
                    stats.episodes += 1
                    if rec.row.get("error") is not None:
                        stats.errored += 1
                        continue
                    if not cfg.keeps(rec.row):
                        stats.filtered += 1
                        continue
                    if rec.transcript is None and rec.transcript_note is not None:
                        stats.unreadable += 1
                        continue
                    if not rec.transcript or not rec.transcript.get("turns"):
                        stats.no_transcript += 1
                        continue
                    env_id = rec.row["env_id"]
                    if cfg.per_turn:
                        rows: Any = iter_turn_rows(rec, cfg.system, text=cfg.text, context_form=cfg.context_form)
                    else:
                        if env_id not in forms:
                            form = chat_form(env_id)
                            use_tools = cfg.form == "tools" or (cfg.form == "auto" and form.native)
                            forms[env_id] = form if use_tools else None
                        rows = [episode_row(rec, forms[env_id], cfg.system)]
                    for r in rows:
                        line = (json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8")
                        stats.bytes += len(line)
                        if stats.bytes > cfg.max_output_bytes:
                            raise ExportTooLarge(
                                f"the export passes {cfg.max_output_bytes} bytes (--max-output-bytes) at "
                                f"{rec.row['env_id']} task {str(rec.row['task_id'])[:80]!r}; nothing written")
                        fh.write(line)
                        stats.rows += 1
                        stats.by_env[env_id] = stats.by_env.get(env_id, 0) + 1
        if stats.rows:  # an export of nothing writes nothing (the command says so and exits 1)
            os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    if stats.unreadable:
        logger.warning("%d episode(s) left out: their transcripts could not be read (see the warnings above)",
                       stats.unreadable)
    if stats.no_transcript:
        logger.warning("%d episode(s) have no transcript (an eval run with --no-transcripts?)", stats.no_transcript)
    return stats


def _cli_context_form(args) -> dict | None:
    kind = getattr(args, "context_form", None)
    if kind is None:
        return None
    return {"kind": kind, "first": getattr(args, "context_first", None) or "prompt"}


def main(args) -> int:
    """``agentgym export-sft`` (arguments parsed by :mod:`agentgym.cli`)."""
    try:
        cfg = ExportConfig(per_turn=args.per_turn, form=args.form, success=args.success, min_score=args.min_score,
                           max_score=args.max_score, system=args.system, text=getattr(args, "text", False),
                           context_form=_cli_context_form(args),
                           max_output_bytes=getattr(args, "max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES),
                           max_transcript_bytes=getattr(args, "max_transcript_bytes", DEFAULT_MAX_TRANSCRIPT_BYTES))
        stats = export_sft(args.results, args.out, cfg)
    except ExportTooLarge as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError, AgentGymError) as e:  # a missing or unreadable file, an unwritable output
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {stats.describe()}")
    if stats.rows == 0:
        print("error: nothing to export, nothing written" + (
            " (the results keep no transcripts: rerun 'agentgym eval' without --no-transcripts)"
            if stats.no_transcript else ""), file=sys.stderr)
        return 1
    return 0
