"""Results files: one JSON object per line, appended and flushed (and fsync'ed) as each episode finishes.

A row's *key* is ``(env_id, split, task_id, seed, trial)``. On resume, rows of episodes that finished without an
error are kept and skipped; errored episodes are played again and the newer row wins. A torn last line (the run
was killed mid-write) is ignored with a warning.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable

__all__ = ["ResultsFile", "episode_key"]

logger = logging.getLogger(__name__)


def episode_key(row: dict) -> tuple:
    return (row["env_id"], row["split"], str(row["task_id"]), int(row["seed"]), int(row["trial"]))


class ResultsFile:
    """Append-only JSONL results with resume."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        rows = []
        with open(self.path, encoding="utf-8") as fh:
            lines = fh.readlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning("%s:%d: ignoring an unreadable (torn) line", self.path, n)
        return rows

    def latest(self) -> dict[tuple, dict]:
        """The last row of each episode key."""
        out: dict[tuple, dict] = {}
        for row in self.read():
            out[episode_key(row)] = row
        return out

    def done_keys(self) -> set[tuple]:
        return {k for k, row in self.latest().items() if row.get("error") is None}

    def append(self, rows: Iterable[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            # A torn line from a killed run must not glue onto the next row.
            if fh.tell() > 0 and not self._ends_with_newline():
                fh.write("\n")
            for row in rows:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"
