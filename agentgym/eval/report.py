"""``agentgym report``: runs side by side, as tables and (optionally) one figure.

Inputs are JSONL files of two kinds, told apart by their rows:

* **results** of ``agentgym eval`` (rows with ``env_id`` and ``task_id``, one per episode): success per value of
  each breakdown column (``family``, ``depth``, ``category`` by default, whichever the rows have) with standard
  errors, pass^k over seeds x trials (:func:`~agentgym.eval.summary.pass_k_curve`; for τ-airline this is τ-bench's
  pass^k), and the turns-to-success distribution. Errored episodes are counted, never scored.
* **train logs** (rows with ``step``; ``agentgym train`` writes them to ``<output_dir>/metrics.jsonl``): learning
  curves of every numeric column against ``step`` — ``reward``, ``success`` / ``agentgym/success`` and each
  estimator's diagnostics (``agentgym/*``); the plot shows those first, and only metrics logged at two steps or more
  (not TRL's one-off end-of-run totals). Nested dicts are flattened with ``/``
  (``{"diagnostics": {"gigpo": {"frac_step": 0.4}}}`` -> ``diagnostics/gigpo/frac_step``); a string ``estimator``
  column splits one log into one curve per estimator.

A run is named by its file stem or ``LABEL=PATH``. Plots use matplotlib's object API with the Agg canvas (no
display, no global backend switch); the format follows the file suffix (``.png`` or ``.svg``).
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import AgentGymError, MissingDependencyError
from .jsonl import SkipLog, read_jsonl
from .results import env_identity_fields, row_problem
from .summary import _mean_se, format_identity, ordered, pass_k_curve

__all__ = ["Run", "load_run", "breakdown", "turns_to_success", "learning_curves", "report_markdown",
           "plot_report", "main", "DEFAULT_BREAKDOWNS"]

logger = logging.getLogger(__name__)

DEFAULT_BREAKDOWNS = ("family", "depth", "category")


@dataclass
class Run:
    label: str
    path: str
    kind: str  # "results" | "train"
    rows: list[dict]


def load_run(spec: str) -> Run:
    """``PATH`` or ``LABEL=PATH``; the kind is read off the rows."""
    label, sep, path = spec.partition("=")
    if not sep or (not Path(path).exists() and Path(spec).exists()):  # a file name may contain "="
        label, path = Path(spec).stem, spec
    p = Path(path)
    if not p.exists():
        raise AgentGymError(f"no such results file: {path}")
    if p.is_dir():
        raise AgentGymError(f"{path} is a directory, not a results file")
    # the shared safe reader: an unusable line is skipped with a warning naming it (agentgym.eval.jsonl)
    lines = list(read_jsonl(p))
    rows = [line.value for line in lines]
    if not rows:
        raise AgentGymError(f"{path} holds no rows")
    if all("task_id" in r and "won" in r for r in rows):
        kind = "results"
    elif all("step" in r for r in rows):
        kind = "train"
    else:
        raise AgentGymError(f"{path}: neither an 'agentgym eval' results file (rows with task_id, won) nor a train "
                            "log (rows with step)")
    if kind == "results":
        skipped, rows = SkipLog(), []
        for line in lines:  # the results rows' own rule (agentgym.eval.results.row_problem), as every reader's
            why = row_problem(line.value)
            if why is None:
                rows.append(line.value)
            else:
                skipped.skip(p, line.number, why, "results row")
        skipped.close(p)
        if not rows:
            raise AgentGymError(f"{path} holds no usable results rows (see the warnings)")
        # Keep the latest row of each episode, as a resumed run leaves an errored row and its replay.
        latest: dict[tuple, dict] = {}
        for r in rows:
            latest[(r.get("env_id"), r.get("split"), str(r["task_id"]), r.get("seed"), r.get("trial"))] = r
        rows = list(latest.values())
    return Run(label=label, path=str(p), kind=kind, rows=rows)


def _natural(v: Any):
    s = str(v)
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _row_order(runs: Sequence[Run], col: str, values) -> list[str]:
    """Family rows in the env's declared order (``EnvEntry.family_order``: the papers' columns), else natural."""
    order: tuple[str, ...] = ()
    if col == "family":
        from ..registration import get_entry

        for env_id in {r.get("env_id") for run in runs for r in run.rows if r.get("env_id")}:
            try:
                order = get_entry(env_id).family_order or order
            except Exception:  # noqa: BLE001 - an unknown env id in an old results file only loses the order
                continue
    return ordered(values, order)


def breakdown_columns(runs: Sequence[Run], by: Sequence[str] | None = None) -> list[str]:
    if by:
        return list(by)
    return [c for c in DEFAULT_BREAKDOWNS if any(c in r for run in runs for r in run.rows)]


def breakdown(rows: Sequence[dict], col: str) -> dict[str, dict]:
    """``value -> {success, se, n, errors}`` over the rows that have ``col``, plus ``All``."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if col in r and r[col] is not None:
            groups.setdefault(str(r[col]), []).append(r)
    out = {}
    for name in sorted(groups, key=_natural) + ["All"]:
        rs = [r for g in groups.values() for r in g] if name == "All" else groups[name]
        ok = [r for r in rs if r.get("error") is None]
        m, se = _mean_se([float(bool(r["won"])) for r in ok])
        out[name] = {"success": m, "se": se, "n": len(ok), "errors": len(rs) - len(ok)}
    return out


def _same_partition(rows: Sequence[dict], a: str, b: str) -> bool:
    """Whether columns ``a`` and ``b`` group ``rows`` identically (a one-to-one map between their values)."""
    pairs = {(str(r.get(a)), str(r.get(b))) for r in rows}
    return len(pairs) == len({p[0] for p in pairs}) == len({p[1] for p in pairs})


def turns_to_success(rows: Sequence[dict]) -> list[int]:
    return sorted(int(r["turns"]) for r in rows if r.get("error") is None and r.get("won"))


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def learning_curves(rows: Sequence[dict]) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """``series -> metric -> (steps, values)``; a series per ``estimator`` value ("" when there is none)."""
    out: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for r in sorted(rows, key=lambda r: float(r["step"])):
        flat = _flatten(r)
        series = str(flat.pop("estimator", "") or "")
        step = float(flat.pop("step"))
        for k, v in flat.items():
            if isinstance(v, bool):
                v = float(v)
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                xs, ys = out.setdefault(series, {}).setdefault(k, ([], []))
                xs.append(step)
                ys.append(float(v))
    return out


_FIRST_METRICS = ("reward", "success", "agentgym/success", "agentgym/won", "agentgym/turns", "loss")


def _metric_order(names) -> list[str]:
    first = [m for m in _FIRST_METRICS if m in names]
    return first + sorted(n for n in names if n not in first)


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{100 * x:.1f}"


def report_markdown(runs: Sequence[Run], by: Sequence[str] | None = None, max_k: int | None = None) -> str:
    res = [r for r in runs if r.kind == "results"]
    train = [r for r in runs if r.kind == "train"]
    out: list[str] = []
    if res:
        out.append("## Runs\n\n| run | file | identity | episodes | errors | success (%) |\n"
                   "|---|---|---|---:|---:|---:|")
        for run in res:
            a = _overall(run.rows)
            out.append(f"| {run.label} | {run.path} | {_identity_text(run.rows)} | {a['n']} | {a['errors']} | "
                       f"{_pct(a['success'])} ± {_pct(a['se'])} |")
        for col in breakdown_columns(res, by):
            tables = {run.label: breakdown(run.rows, col) for run in res}
            values = _row_order(res, col, {v for t in tables.values() for v in t if v != "All"}) + ["All"]
            out.append(f"\n## Success by {col} (%, ± standard error, episodes)\n")
            out.append("| " + col + " | " + " | ".join(tables) + " |")
            out.append("|---|" + "---:|" * len(tables))
            for v in values:
                cells = []
                for t in tables.values():
                    c = t.get(v)
                    cells.append("" if c is None or c["n"] == 0 else f"{_pct(c['success'])} ± {_pct(c['se'])} "
                                                                     f"({c['n']})")
                out.append(f"| {v} | " + " | ".join(cells) + " |")
        curves = {run.label: pass_k_curve(run.rows, max_k) for run in res}
        ks = sorted({k for c in curves.values() for k in c})
        if ks:
            out.append("\n## pass^k over seeds x trials (%)\n")
            out.append("| k | " + " | ".join(curves) + " |")
            out.append("|---:|" + "---:|" * len(curves))
            for k in ks:
                out.append(f"| {k} | " + " | ".join(_pct(c.get(k, math.nan)) for c in curves.values()) + " |")
        out.append("\n## Turns to success\n\n| run | successes | mean | median | max |\n|---|---:|---:|---:|---:|")
        for run in res:
            t = turns_to_success(run.rows)
            if t:
                out.append(f"| {run.label} | {len(t)} | {sum(t) / len(t):.2f} | {t[len(t) // 2]} | {max(t)} |")
            else:
                out.append(f"| {run.label} | 0 | — | — | — |")
    for run in train:
        out.append(f"\n## Train log {run.label} ({run.path})\n\n| series | metric | steps | first | last | min | max |"
                   "\n|---|---|---:|---:|---:|---:|---:|")
        for series, metrics in learning_curves(run.rows).items():
            for m in _metric_order(metrics):
                xs, ys = metrics[m]
                out.append(f"| {series or '-'} | {m} | {len(xs)} | {ys[0]:.4g} | {ys[-1]:.4g} | {min(ys):.4g} "
                           f"| {max(ys):.4g} |")
    return "\n".join(out).lstrip("\n")


def run_identities(rows: Sequence[dict]) -> list[dict]:
    """The distinct env identity fields (``rules``, ``task_set``...) of a run's rows, in order of appearance."""
    seen: list[dict] = []
    for r in rows:
        ident = env_identity_fields(r)
        if ident not in seen:
            seen.append(ident)
    return seen


def _identity_text(rows: Sequence[dict]) -> str:
    return "; ".join(format_identity(i) or "—" for i in run_identities(rows))


def _overall(rows: Sequence[dict]) -> dict:
    ok = [r for r in rows if r.get("error") is None]
    m, se = _mean_se([float(bool(r["won"])) for r in ok])
    return {"success": m, "se": se, "n": len(ok), "errors": len(rows) - len(ok)}


def plot_report(runs: Sequence[Run], out: str | Path, by: Sequence[str] | None = None, max_k: int | None = None,
                max_train_metrics: int = 9):
    """Draw the report into one figure and save it to ``out`` (.png or .svg); returns the Figure."""
    suffix = Path(out).suffix.lower().lstrip(".")
    if suffix not in ("png", "svg"):
        raise AgentGymError(f"--plot must end with .png or .svg, got {out!r}")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", "agentgym report --plot") from e
    import numpy as np

    res = [r for r in runs if r.kind == "results"]
    train = [r for r in runs if r.kind == "train"]
    panels: list[tuple[str, Any]] = []
    if res:
        kept: list[str] = []
        for col in breakdown_columns(res, by):
            # TextCraft's family is its depth: a column that splits the rows exactly as a kept one would draw the
            # same bars twice (asked-for columns are always drawn).
            if not by and any(_same_partition([r for run in res for r in run.rows], col, k) for k in kept):
                continue
            kept.append(col)
            panels.append(("bars", col))
        if any(len(pass_k_curve(run.rows, max_k)) >= 2 for run in res):  # pass^1 alone is the success rate
            panels.append(("passk", None))
        panels.append(("turns", None))
    metric_names: list[str] = []
    curves = {run.label: learning_curves(run.rows) for run in train}
    for c in curves.values():
        for metrics in c.values():
            metric_names.extend(m for m, (xs, _) in metrics.items() if m not in metric_names and len(xs) >= 2)
    for m in _metric_order(metric_names)[:max_train_metrics]:
        panels.append(("curve", m))
    if not panels:
        raise AgentGymError("nothing to plot")
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(5.2 * ncols, 3.8 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    colors = [f"C{i}" for i in range(10)]
    for ax, (kind, arg) in zip(axes, panels):
        if kind == "bars":
            tables = {run.label: breakdown(run.rows, arg) for run in res}
            values = _row_order(res, arg, {v for t in tables.values() for v in t if v != "All"}) + ["All"]
            x = np.arange(len(values))
            width = 0.8 / len(tables)
            for i, (label, t) in enumerate(tables.items()):
                ys = [100 * t[v]["success"] if v in t and t[v]["n"] else np.nan for v in values]
                es = [100 * t[v]["se"] if v in t and t[v]["n"] else 0.0 for v in values]
                ax.bar(x + (i - (len(tables) - 1) / 2) * width, ys, width, yerr=es, capsize=3, label=label,
                       color=colors[i % 10])
            ax.set_xticks(x, [str(v) for v in values], rotation=30 if len(values) > 6 else 0, ha="right"
                          if len(values) > 6 else "center")
            ax.set_ylim(0, 105)
            ax.set_ylabel("success (%)")
            ax.set_title(f"success by {arg} (± SE)")
            ax.legend(fontsize=8)
        elif kind == "passk":
            for i, run in enumerate(res):
                c = pass_k_curve(run.rows, max_k)
                if c:
                    ax.plot(list(c), [100 * v for v in c.values()], marker="o", label=run.label, color=colors[i % 10])
            ax.set_xlabel("k")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("pass^k (%)")
            ax.set_ylim(0, 105)
            ax.set_title("pass^k over seeds x trials")
            ax.legend(fontsize=8)
        elif kind == "turns":
            all_t = [turns_to_success(run.rows) for run in res]
            hi = max((max(t) for t in all_t if t), default=1)
            bins = np.arange(0.5, hi + 1.5, 1.0)
            for i, (run, t) in enumerate(zip(res, all_t)):
                if t:
                    ax.hist(t, bins=bins, histtype="step", linewidth=1.8, label=f"{run.label} ({len(t)})",
                            color=colors[i % 10])
            ax.set_xlabel("turns")
            ax.set_ylabel("successful episodes")
            ax.set_title("turns to success")
            ax.legend(fontsize=8)
        else:
            i = 0
            for label, c in curves.items():
                for series, metrics in c.items():
                    if arg in metrics:
                        xs, ys = metrics[arg]
                        ax.plot(xs, ys, label=label + (f" [{series}]" if series else ""), color=colors[i % 10])
                    i += 1
            ax.set_xlabel("step")
            ax.set_title(arg)
            ax.legend(fontsize=8)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format=suffix, dpi=110)
    return fig


def main(args) -> int:
    """The ``agentgym report`` command (arguments parsed by :mod:`agentgym.cli`)."""
    try:
        runs = [load_run(s) for s in args.results]
        by = [c.strip() for c in args.by.split(",") if c.strip()] if args.by else None
        if args.format == "json":
            print(json.dumps(_report_json(runs, by, args.max_k), indent=2))
        else:
            print(report_markdown(runs, by, args.max_k))
        if args.plot:
            plot_report(runs, args.plot, by, args.max_k)
            print(f"\nwrote {args.plot}", file=sys.stderr)
    except AgentGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _report_json(runs, by, max_k) -> dict:
    res = [r for r in runs if r.kind == "results"]
    return {
        "results": {run.label: {"path": run.path, "identity": run_identities(run.rows), "overall": _overall(run.rows),
                                "breakdown": {c: breakdown(run.rows, c) for c in breakdown_columns(res, by)},
                                "pass_k": pass_k_curve(run.rows, max_k),
                                "turns_to_success": turns_to_success(run.rows)} for run in res},
        "train": {run.label: {s: {m: {"step": xs, "value": ys} for m, (xs, ys) in ms.items()}
                              for s, ms in learning_curves(run.rows).items()} for run in runs if run.kind == "train"},
    }
