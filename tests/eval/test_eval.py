"""agentgym eval: grids, append-and-flush results, resume, summaries, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentgym.eval.grid import EvalGrid, run_grid
from agentgym.eval.results import ResultsFile
from agentgym.eval.summary import format_table, scenario_goal_completion, summarize
from agentgym.rollout.policy import RandomPolicy


class Interrupted(Exception):
    pass


def grid():
    return EvalGrid(env_id="TextCraft-v0", split="gen-depth1", episodes=12, seeds=(0, 1), trials=2, max_turns=15,
                    chunk=8)


def strip(rows):
    return sorted((r["task_id"], r["seed"], r["trial"], r["won"], r["turns"], r["total_reward"]) for r in rows)


def test_resume_after_interruption_gives_the_same_summary(tmp_path):
    full = run_grid(grid(), RandomPolicy(), tmp_path / "full.jsonl")
    assert len(full) == 12 * 2 * 2

    out = tmp_path / "killed.jsonl"
    seen = {"n": 0}

    def kill_after_30(n):
        seen["n"] += n
        if seen["n"] >= 30:
            raise Interrupted

    with pytest.raises(Interrupted):
        run_grid(grid(), RandomPolicy(), out, progress=kill_after_30)
    partial = ResultsFile(out).read()
    assert 30 <= len(partial) < 48  # appended as produced, not at the end
    with open(out, "a") as fh:
        fh.write('{"env_id": "TextCraft-v0", "spl')  # a torn last line, as after a kill mid-write
    resumed = run_grid(grid(), RandomPolicy(), out)
    assert strip(resumed) == strip(full)
    assert summarize(resumed) == summarize(full)
    # Finished episodes were not replayed.
    assert len(ResultsFile(out).read()) == len(full)


def test_errored_episodes_are_retried_on_resume(tmp_path):
    out = tmp_path / "r.jsonl"
    g = EvalGrid(env_id="TextCraft-v0", split="gen-depth1", episodes=2)
    rows = run_grid(g, RandomPolicy(), out)
    bad = dict(rows[0], error={"kind": "env_crash", "stage": "step", "message": "x", "exception": "E",
                                "traceback": ""}, won=False)
    ResultsFile(out).append([bad])
    assert len(ResultsFile(out).done_keys()) == 1
    rows2 = run_grid(g, RandomPolicy(), out)
    assert all(r["error"] is None for r in rows2) and len(rows2) == 2


def test_summary_excludes_errors_and_reports_se():
    rows = [{"family": "a", "won": True, "score": 1.0, "turns": 4, "error": None},
            {"family": "a", "won": False, "score": 0.0, "turns": 6, "error": None},
            {"family": "b", "won": False, "score": 0.0, "turns": 1, "error": {"kind": "env_crash"}}]
    s = {r["family"]: r for r in summarize(rows)}
    assert s["a"]["success"] == 0.5 and s["a"]["success_se"] == pytest.approx(0.5)
    assert s["b"]["episodes"] == 0 and s["b"]["errors"] == 1
    assert s["All"]["episodes"] == 2 and s["All"]["errors"] == 1 and s["All"]["turns"] == 5
    assert "| a | 2 | 1 | 50.0 ± 50.0 |" in format_table(summarize(rows))
    assert format_table(summarize(rows), "csv").startswith("family,episodes")
    assert json.loads(format_table(summarize(rows), "json"))[0]["family"] == "a"


def test_summary_rows_follow_the_declared_family_order_then_natural_order():
    rows = [{"family": f, "won": True, "score": 1.0, "turns": 1, "error": None}
            for f in ("depth10", "Cool", "depth2", "Pick", "Pick2")]
    names = [s["family"] for s in summarize(rows, order=("Pick", "Look", "Cool"))]
    assert names == ["Pick", "Cool", "Pick2", "depth2", "depth10", "All"]


def test_scenario_goal_completion_needs_every_task_of_a_scenario():
    rows = [{"scenario_id": "a", "won": True, "error": None}, {"scenario_id": "a", "won": False, "error": None},
            {"scenario_id": "b", "won": True, "error": None}, {"scenario_id": "b", "won": True, "error": None},
            {"scenario_id": "c", "won": True, "error": None},
            {"scenario_id": "c", "won": False, "error": {"kind": "env_crash"}},  # errored: not scored
            {"scenario_id": "d", "won": False, "error": {"kind": "env_crash"}}]  # only errors: not counted
    assert scenario_goal_completion(rows) == (2 / 3, 3)
    assert scenario_goal_completion([{"won": True, "error": None}]) is None


def test_cli_eval_and_list(tmp_path):
    out = tmp_path / "cli.jsonl"
    cmd = [sys.executable, "-m", "agentgym.cli", "eval", "TextCraft-v0", "--split", "gen-depth2", "--episodes", "5",
           "--policy", "oracle", "--out", str(out), "--format", "csv"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "All,5,0,5,1.0" in res.stdout
    assert len(out.read_text().splitlines()) == 5
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "list"], capture_output=True, text=True, check=True)
    assert "TextCraft-v0" in res.stdout and "gen-depth4" in res.stdout
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "eval", "TextCraft-v0", "--split", "nope"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "no split" in res.stderr


def test_cli_eval_process_backend_and_pass_k(tmp_path):
    out = tmp_path / "pk.jsonl"
    cmd = [sys.executable, "-m", "agentgym.cli", "eval", "TextCraft-v0", "--split", "gen-depth1", "--episodes", "3",
           "--seeds", "0-1", "--trials", "2", "--policy", "oracle", "--backend", "process", "--workers", "2",
           "--pass-k", "4", "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "| k | pass^k (%) |" in res.stdout and "| 4 | 100.0 |" in res.stdout
    assert len(out.read_text().splitlines()) == 12
    res = subprocess.run(cmd[:-2] + ["--policy", "openai:m", "--base-url", "localhost:1", "--out", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "base_url must start with http" in res.stderr


def test_one_pool_across_chunks_gives_the_sequential_results(tmp_path):
    def g(**kw):
        return EvalGrid(env_id="TextCraft-v0", split="gen-depth2", episodes=7, seeds=(0, 3), max_turns=12, chunk=5,
                        **kw)

    a = run_grid(g(), RandomPolicy(), tmp_path / "a.jsonl")
    b = run_grid(g(backend="process", workers=2), RandomPolicy(), tmp_path / "b.jsonl")
    assert len(a) == 14 and strip(a) == strip(b)
