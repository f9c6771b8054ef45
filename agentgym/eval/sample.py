"""Which tasks of a split an eval plays: the whole split, a stratified sample, the first N, or exact ids.

* **all** (no selection flag): every task of a file-backed split, in the split's order.
* **stratified** (``agentgym eval --episodes N``): a deterministic sample of N tasks, stratified by the task's
  *stratum*, the first of these task attributes that the env's tasks have: ``depth`` (TextCraft: crafting depth),
  ``family`` (ALFWorld: task type), ``category`` (TauAirline), ``difficulty`` (AppWorld: level 1-3),
  ``data_source`` (WikiSearch). An env whose tasks have none of them (WebShop: its goals carry no category) gets a
  seeded uniform sample. The rule: within each stratum the tasks are put in a seeded pseudo-random order (sorted by
  ``stable_digest(f"{seed}|{task_id}")``, namespace ``"eval-sample"``: the same on every machine and numpy version);
  the i-th task of a stratum of n tasks gets the position ``(i + 0.5) / n``, and the N tasks with the smallest
  positions are played (ties: strata in sorted order). Every stratum gets its proportional share of N, rounded
  (Sainte-Laguë), and a sample of N is the start of a sample of any larger N, so growing ``--episodes`` only adds
  tasks. The seed is ``--sample-seed`` (default :data:`DEFAULT_SAMPLE_SEED`, 0).
* **first** (``--first N``): the first N tasks in the split's order (what ``--episodes N`` meant before).
* **tasks** (``--tasks ID,ID`` or ``--tasks-file FILE``): exactly these ids, in this order (each checked with the
  env's ``get_task``: an unknown id is a :class:`~agentgym.errors.TaskError`).

A generated split (unbounded, or task ids ``gen-...``: TextCraft's ``gen-depth*``, ALFWorld's ``generated``) is
already in a seeded random order (ALFWorld: independent seeded draws; TextCraft: its goal items in the order of first
appearance among seeded uniform draws, a uniform random order), so its first N tasks are a uniform sample:
``--episodes N`` plays them (the selection record says rule ``first``). N past the end of a split with an end is
refused, as for any split.

:func:`select_tasks` returns the ids and the selection record that goes into the run identity (absent for the whole
split, so results files written before the selection was recorded still resume): resuming a results file with
another selection is refused. The record names the rule and what fixes its order (``by``, ``seed``; for exact ids,
their number and digest), not N: the samples of one rule nest (first N, stratified or uniform prefixes), so a
rerun with a larger N extends a run and one with a smaller N reports a part of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import TaskError
from ..hashing import stable_digest

__all__ = ["select_tasks", "read_tasks_file", "parse_task_list", "DEFAULT_SAMPLE_SEED", "STRATUM_ATTRIBUTES"]

DEFAULT_SAMPLE_SEED = 0
#: Task attributes tried in order for the stratum of a task (the first one the env's tasks have).
STRATUM_ATTRIBUTES = ("depth", "family", "category", "difficulty", "data_source")


def parse_task_list(text: str) -> list[str]:
    """``"ID,ID,..."`` -> the ids (blank items dropped)."""
    return [t.strip() for t in text.split(",") if t.strip()]


def read_tasks_file(path: str | Path) -> list[str]:
    """One task id per line; blank lines and ``#`` comments are ignored."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise TaskError(f"cannot read --tasks-file {path}: {e}") from None
    return [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]


def _generated(env, limit: int) -> list[str] | None:
    """The first ``limit`` ids when the split is generated (see the module doc), else None."""
    try:
        head = list(env.task_ids(limit))
    except TaskError:
        return None
    if head and all(str(t).startswith("gen-") for t in head):
        return head
    return None


def stratum_of(task: Any) -> tuple[str, Any] | None:
    for attr in STRATUM_ATTRIBUTES:
        v = getattr(task, attr, None)
        if v is not None and v != "":
            return attr, v
    return None


def stratified_order(ids: Sequence[str], strata: Sequence[Any], seed: int = DEFAULT_SAMPLE_SEED) -> list[str]:
    """``ids`` in the order of the stratified rule (the module doc): any prefix is a proportional sample."""
    groups: dict[str, list[str]] = {}
    for tid, s in zip(ids, strata):
        groups.setdefault(repr(s), []).append(tid)
    keyed = []
    for rank, name in enumerate(sorted(groups)):
        members = sorted(groups[name], key=lambda t: (stable_digest(f"{seed}|{t}", namespace="eval-sample"), t))
        n = len(members)
        keyed += [((i + 0.5) / n, rank, tid) for i, tid in enumerate(members)]
    return [tid for _, _, tid in sorted(keyed)]


def select_tasks(env, *, episodes: int | None = None, first: int | None = None,
                 tasks: Sequence[str] | None = None, seed: int = DEFAULT_SAMPLE_SEED
                 ) -> tuple[list[str], dict[str, Any] | None]:
    """The task ids to play and the selection record for the run identity (None: the whole split)."""
    given = [k for k, v in (("episodes", episodes), ("first", first), ("tasks", tasks)) if v is not None]
    if len(given) > 1:
        raise TaskError(f"give one task selection, not {' and '.join(given)}")
    if tasks is not None:
        ids = [str(t) for t in tasks]
        if not ids:
            raise TaskError("--tasks / --tasks-file names no task")
        dupes = sorted({t for t in ids if ids.count(t) > 1})
        if dupes:
            raise TaskError(f"task ids given more than once: {', '.join(dupes[:5])}")
        for t in ids:
            env.get_task(t)  # TaskError for an unknown id
        return ids, {"rule": "tasks", "n": len(ids),
                     "digest": f"{stable_digest(chr(10).join(ids), namespace='eval-tasks'):016x}"}
    if first is not None:
        if first < 1:
            raise TaskError(f"--first must be >= 1, got {first}")
        return list(env.task_ids(first)), {"rule": "first"}
    if episodes is None:
        return list(env.task_ids(None)), None  # TaskError for an unbounded split
    if episodes < 1:
        raise TaskError(f"--episodes must be >= 1, got {episodes}")
    gen = _generated(env, episodes)
    if gen is not None:
        if len(gen) < episodes:  # a generated split with an end (TextCraft's: one task per goal item)
            _too_many(episodes, len(gen))
        return gen, {"rule": "first"}  # a generated split's first N are a uniform sample
    ids = list(env.task_ids(None))
    if episodes >= len(ids):
        return ids, None if episodes == len(ids) else _too_many(episodes, len(ids))
    found = [stratum_of(env.get_task(t)) for t in ids]
    by = found[0][0] if found and found[0] is not None and all(f is not None and f[0] == found[0][0] for f in found) \
        else None
    strata = [f[1] for f in found] if by else [None] * len(ids)
    order = stratified_order(ids, strata, seed)[:episodes]
    chosen = set(order)
    if by is None:
        return [t for t in ids if t in chosen], {"rule": "uniform", "seed": int(seed)}
    return [t for t in ids if t in chosen], {"rule": "stratified", "by": by, "seed": int(seed)}


def _too_many(episodes: int, size: int):
    raise TaskError(f"--episodes {episodes} is more than the split's {size} tasks")
