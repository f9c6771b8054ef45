"""The files the project derives from upstream files (the ``derive`` entries of ``manifest.json``).

Each derivation takes the downloaded upstream inputs (member path -> local file) and keyword arguments, and returns
the derived file's bytes, which :mod:`.fetch` then checks against the manifest's SHA-256 like any downloaded file.
They are the transformations ``shared/data/SOURCES.md`` describes for the staged copies:

* :func:`adapt_recorded` — ADaPT's results file -> ``textcraft/tasks/adapt_test_200.jsonl`` (the 200 tasks of ADaPT's
  recorded run: goal and the crafting commands it showed);
* :func:`igpo_eval` — IGPO's ``data/test.parquet`` -> ``wiki_search/qa/<source>_eval.jsonl`` (one data source each);
* derivations that need an env's own code live with the env and are named ``module:function`` in the manifest:
  ``agentgym.envs.webshop.catalog:derive_noun_table`` (WebShop's title-noun table, with spaCy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..errors import DataNotFoundError, MissingDependencyError

__all__ = ["DERIVATIONS", "adapt_recorded", "igpo_eval", "derivation"]

#: ADaPT's results file (archiki/ADaPT ``results/``) holds ``env_0`` .. ``env_199`` and an ``overall`` entry.
_ADAPT_GAMES = 200


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def _only_input(inputs: dict[str, Path]) -> Path:
    if len(inputs) != 1:
        raise ValueError(f"expected one input file, got {sorted(inputs)}")
    return next(iter(inputs.values()))


def adapt_recorded(inputs: dict[str, Path]) -> bytes:
    """For each ``env_<i>`` of ADaPT's results (i = 0..199): ``problem`` -> ``goal``, the ``craft ...`` lines of
    ``commands`` (the observation's ``Crafting commands:`` block) -> ``crafting_commands``, ``seed`` = i and ``id`` =
    ``adapt.test.<i>``; the model's trace, plans and reward are dropped."""
    results = json.loads(_only_input(inputs).read_text(encoding="utf-8"))
    rows = []
    for i in range(_ADAPT_GAMES):
        entry = results.get(f"env_{i}")
        if not isinstance(entry, dict) or "problem" not in entry or "commands" not in entry:
            raise DataNotFoundError(f"ADaPT's results file has no task env_{i} with 'problem' and 'commands'")
        commands = [line for line in entry["commands"].split("\n") if line.startswith("craft ")]
        rows.append({"id": f"adapt.test.{i}", "seed": i, "goal": entry["problem"].strip(),
                     "crafting_commands": commands})
    return _jsonl(rows)


def igpo_eval(inputs: dict[str, Path], data_source: str) -> bytes:
    """The rows of IGPO's evaluation parquet whose ``data_source`` is ``data_source``, in file order, each as
    ``{"id": extra_info.index, "question": prompt[0].content, "golden_answers": reward_model.ground_truth split at
    "<|answer_split|>", "data_source", "orig_split": extra_info.split}``."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError("pyarrow", "retrieval", "reading IGPO's evaluation parquet") from e
    rows = []
    for r in pq.read_table(_only_input(inputs)).to_pylist():
        if r["data_source"] != data_source:
            continue
        rows.append({"id": r["extra_info"]["index"], "question": r["prompt"][0]["content"],
                     "golden_answers": r["reward_model"]["ground_truth"].split("<|answer_split|>"),
                     "data_source": r["data_source"], "orig_split": r["extra_info"]["split"]})
    if not rows:
        raise DataNotFoundError(f"IGPO's evaluation parquet has no rows of data source {data_source!r}")
    return _jsonl(rows)


#: manifest name -> derivation (called with the inputs and the manifest's ``args``)
DERIVATIONS: dict[str, Callable[..., bytes]] = {
    "adapt_recorded": adapt_recorded,
    "igpo_eval": igpo_eval,
}


def derivation(name: str) -> Callable[..., bytes]:
    """The derivation a manifest names: a key of :data:`DERIVATIONS`, or ``module:function`` for one that lives with
    an env (imported by name when used, so this package never imports env code)."""
    if name in DERIVATIONS:
        return DERIVATIONS[name]
    module, _, attr = name.partition(":")
    if not attr:
        raise KeyError(f"unknown derivation {name!r}")
    import importlib

    return getattr(importlib.import_module(module), attr)
