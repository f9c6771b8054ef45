"""agentgym eval: grids, append-and-flush results, resume, summaries, CLI."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from agentgym.cli import _parse_seeds, main
from agentgym.eval.grid import EvalGrid, run_grid
from agentgym.eval.results import ResultsFile, ResultsMismatchError, run_identity
from agentgym.eval.summary import format_table, scenario_goal_completion, summarize
from agentgym.registration import get_entry
from agentgym.rollout.policy import OraclePolicy, RandomPolicy


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert res.returncode == 0, res.stderr[-2000:]
    return res


def need(env_id: str, split: str) -> None:
    ok, why = get_entry(env_id).split_available(split)
    if not ok:
        pytest.skip(f"{env_id} {split} is not available here: {why}")


def all_row(stdout: str) -> dict:
    """The ``All`` row of a ``--format json`` summary."""
    return json.loads(stdout)[-1]


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


def test_summary_averages_reward_and_env_metrics_over_clean_episodes():
    rows = [{"family": "nq", "won": True, "score": 1.0, "total_reward": 1.0, "turns": 2, "error": None,
             "metrics": {"em": 1.0, "f1": 1.0}},
            {"family": "nq", "won": False, "score": 0.0, "total_reward": -0.5, "turns": 3, "error": None,
             "metrics": {"em": 0.0, "f1": 0.5}},
            {"family": "nq", "won": False, "score": 0.0, "total_reward": 0.0, "turns": 1,
             "error": {"kind": "env_crash"}, "metrics": {"em": 0.0, "f1": 0.0}}]
    s = summarize(rows)[-1]
    assert (s["reward"], s["em"], s["f1"]) == (0.25, 0.5, 0.75) and s["f1_se"] == pytest.approx(0.25)
    table = format_table(summarize(rows))
    assert "| family | episodes | wins | success (%) | score | reward | turns | em | f1 | errors |" in table
    assert table.splitlines()[-1] == ("| All | 2 | 1 | 50.0 ± 50.0 | 0.500 ± 0.500 | 0.250 ± 0.750 | 2.50 ± 0.50 "
                                      "| 0.500 ± 0.500 | 0.750 ± 0.250 | 1 |")


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


def test_seeds_a_bare_count_means_that_many_seeds():
    assert _parse_seeds("3") == [0, 1, 2]
    assert _parse_seeds("0-2") == [0, 1, 2] and _parse_seeds("0,5,7") == [0, 5, 7]
    assert _parse_seeds("5,") == [5] and _parse_seeds("5-5") == [5] and _parse_seeds("0-1,9") == [0, 1, 9]
    for bad in ("0", "", ",", "a", "3-1", "-2", "1-x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _parse_seeds(bad)


def test_resume_refuses_another_run_configuration(tmp_path, capsys):
    """Re-running into the same --out with another policy, turn cap, env kwarg or sampling option fails (exit 2)
    instead of skipping every episode and reporting the other configuration's rows."""
    out = tmp_path / "r.jsonl"
    base = ["eval", "TextCraft-v0", "--split", "gen-depth1", "--episodes", "2", "--seeds", "2", "--out", str(out),
            "--format", "json"]
    assert main(base + ["--policy", "oracle"]) == 0
    assert all_row(capsys.readouterr().out)["wins"] == 4  # --seeds 2: seeds 0 and 1
    rows = ResultsFile(out).read()
    assert len(rows) == 4 and {r["seed"] for r in rows} == {0, 1}
    assert {(r["policy"], r["max_turns"], json.dumps(r["env_kwargs"]), json.dumps(r["policy_args"]))
            for r in rows} == {("oracle", None, "{}", "{}")}
    for other, what in ((["--policy", "random"], "policy: 'oracle' there, 'random' now"),
                        (["--policy", "oracle", "--max-turns", "7"], "max_turns: None there, 7 now"),
                        (["--policy", "oracle", "--env-arg", "history_length=1"], "env_kwargs"),
                        (["--policy", "oracle", "--temperature", "0.7"], "policy_args")):
        assert main(base + other) == 2
        err = capsys.readouterr().err
        assert "another run configuration" in err and what in err and "--out" in err
    assert len(ResultsFile(out).read()) == 4  # nothing played, nothing appended
    # The same configuration resumes (nothing left to play); another split of the same file is its own run.
    assert main(base + ["--policy", "oracle"]) == 0 and all_row(capsys.readouterr().out)["wins"] == 4
    assert main(base[:3] + ["gen-depth2"] + base[4:] + ["--policy", "random", "--max-turns", "3"]) == 0
    assert len(ResultsFile(out).read()) == 8
    # Library callers get the typed error; their policy is named by its ``name`` (hf:PATH, openai:MODEL, ...).
    with pytest.raises(ResultsMismatchError, match="'oracle' there, 'random' now"):
        run_grid(EvalGrid(env_id="TextCraft-v0", split="gen-depth1", episodes=2), RandomPolicy(), out)
    # An object in env_kwargs is recorded by its type, so a new process can resume the same configuration.
    ident = run_identity("p", None, None, {"retriever": object()})
    assert ident["env_kwargs"] == {"retriever": "<builtins.object>"}


def test_more_episodes_than_a_generated_split_has_is_a_one_line_error(tmp_path):
    # TextCraft's gen-depth1 has one task per goal item (147): asking for more never repeats tasks silently.
    res = cli("eval", "TextCraft-v0", "--split", "gen-depth1", "--episodes", "148", "--out", str(tmp_path / "r.jsonl"),
              check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == "error: --episodes 148 is more than the split's 147 tasks"


def test_cli_textcraft_adapt_test_oracle_wins_200_of_200(tmp_path):
    """Issue 2's "done when": the ADaPT grid with the oracle reports 200/200."""
    need("TextCraft-v0", "adapt-test")
    out = tmp_path / "adapt.jsonl"
    res = cli("eval", "TextCraft-v0", "--split", "adapt-test", "--policy", "oracle", "--out", str(out))
    assert "| All | 200 | 200 | 100.0 ± 0.0 |" in res.stdout
    assert len(ResultsFile(out).read()) == 200


def test_cli_tau_airline_grid_reports_reward_pass_k_and_categories(tmp_path):
    """Issue 5's grid: average reward, pass^1..4 without --pass-k, per-category success rows."""
    need("TauAirline-v0", "test")
    res = cli("eval", "TauAirline-v0", "--split", "test", "--seeds", "2", "--trials", "4", "--policy", "oracle",
              "--out", str(tmp_path / "tau.jsonl"))
    lines = res.stdout.splitlines()
    assert lines[0] == "task_set: tau3-1.0 · think_tool: False"  # the env's identity, above the table
    lines = lines[2:]
    head = lines[0].split(" | ")
    assert head[5] == "reward"
    table = {ln.split(" | ")[0].lstrip("| "): ln.split(" | ") for ln in lines[2:] if ln.startswith("| ")}
    import agentgym

    env = agentgym.make("TauAirline-v0", split="test")
    per_cat: dict[str, int] = {}
    for tid in env.task_ids():  # the categories derived from the gold actions, as the env reports them
        env.reset(options={"task_id": tid})
        per_cat[env.task_metadata()["category"]] = per_cat.get(env.task_metadata()["category"], 0) + 1
    assert len(per_cat) >= 3 and set(per_cat) <= {"state_change", "info_only", "transfer", "no_action"}
    for c, n in per_cat.items():
        assert table[c][1:4] == [str(8 * n), str(8 * n), "100.0 ± 0.0"]
    assert table["All"][1] == "160" and table["All"][5] == "1.000 ± 0.000"  # 20 tasks x 2 seeds x 4 trials
    assert "| k | pass^k (%) |" in res.stdout
    assert [ln for ln in lines if ln[:4] in ("| 1 ", "| 2 ", "| 3 ", "| 4 ", "| 5 ")] == \
        ["| 1 | 100.0 |", "| 2 | 100.0 |", "| 3 | 100.0 |", "| 4 | 100.0 |"]


def test_cli_tau_airline_task_set_is_in_every_row_and_a_run_never_resumes_across_task_sets(tmp_path):
    need("TauAirline-v0", "test")
    from agentgym.envs.tau_airline.install import find_task_set_dir
    from agentgym.errors import DataNotFoundError

    try:
        find_task_set_dir()
    except DataNotFoundError as e:
        if os.environ.get("CI"):  # .ci/run sets it up (`agentgym tau setup`)
            pytest.fail(f"the tau2-2025-06 task set is missing in CI: {e}")
        pytest.skip(str(e))
    out = tmp_path / "tau.jsonl"
    res = cli("eval", "TauAirline-v0", "--split", "test", "--policy", "oracle", "--env-arg", "task_set=tau2-2025-06",
              "--out", str(out))
    assert res.stdout.splitlines()[0] == "task_set: tau2-2025-06 · think_tool: False"
    assert "| All | 20 | 20 | 100.0 ± 0.0 |" in res.stdout
    rows = ResultsFile(out).read()
    assert len(rows) == 20 and all(r["task_set"] == "tau2-2025-06" and r["think_tool"] is False for r in rows)
    res = cli("eval", "TauAirline-v0", "--split", "test", "--policy", "oracle", "--out", str(out), check=False)
    assert res.returncode == 2 and "task_set" in res.stderr


def test_cli_wiki_search_reports_em_and_f1_per_dataset(tmp_path):
    need("WikiSearch-v0", "demo")
    out = tmp_path / "wiki.jsonl"
    res = cli("eval", "WikiSearch-v0", "--split", "demo", "--policy", "oracle", "--out", str(out), "--format", "json")
    table = json.loads(res.stdout)
    assert [s["family"] for s in table] == ["demo", "All"]
    assert table[-1]["episodes"] == 22 and table[-1]["em"] == 1.0 and table[-1]["f1"] == 1.0
    rows = ResultsFile(out).read()
    assert all(r["metrics"] == {"em": 1.0, "f1": 1.0} and r["dataset"] == "demo" for r in rows)
    # A policy that is not always right: the table's EM and F1 are the means of the rows' metrics.
    res = cli("eval", "WikiSearch-v0", "--split", "demo", "--policy", "random", "--seeds", "3", "--max-turns", "4",
              "--out", str(tmp_path / "rand.jsonl"))
    caption, _, head, _, demo, total = res.stdout.splitlines()[:6]
    assert caption == "prompt_style: bipace"  # the env's identity (its prompt preset), above the table
    assert head.endswith("| em | f1 | errors |") and demo.startswith("| demo | 66 |")
    em, f1 = (float(c.split(" ± ")[0]) for c in total.split(" | ")[7:9])
    rows = ResultsFile(tmp_path / "rand.jsonl").read()
    assert em == pytest.approx(sum(r["metrics"]["em"] for r in rows) / 66, abs=5e-4)
    assert f1 == pytest.approx(sum(r["metrics"]["f1"] for r in rows) / 66, abs=5e-4)


def test_cli_webshop_test_split_oracle_reports_the_ceiling(tmp_path):
    """Issue 8's "done when": the oracle's grid on the 500 test goals equals the ceiling (the reward of buying the
    gold product with the goal options) goal by goal."""
    need("WebShop-v0", "test")
    import agentgym
    from agentgym.envs.webshop.oracle import ceiling_reward

    out = tmp_path / "ws.jsonl"
    total = all_row(cli("eval", "WebShop-v0", "--split", "test", "--policy", "oracle", "--out", str(out),
                        "--format", "json").stdout)
    env = agentgym.make("WebShop-v0", split="test")
    goals, prices = {g.task_id: g for g in env.goals()}, env.prices()
    ceiling = {t: ceiling_reward(goals[t], env.catalog, prices) for t in env.task_ids()}
    assert len(ceiling) == 500 and total["episodes"] == 500 and total["errors"] == 0
    assert total["wins"] == sum(c == 1.0 for c in ceiling.values())
    assert total["score"] == pytest.approx(sum(ceiling.values()) / 500, abs=1e-9)
    assert {r["task_id"]: r["score"] for r in ResultsFile(out).read()} == pytest.approx(ceiling, abs=1e-9)


def test_summary_without_families_has_only_the_all_row():
    # WebShop rows carry no family: the table must not repeat the All row under a made-up family.
    rows = [dict(won=w, score=float(w), turns=3, total_reward=float(w), error=None) for w in (True, False, True)]
    table = summarize(rows)
    assert [r["family"] for r in table] == ["All"]
    assert table[0]["wins"] == 2
    mixed = summarize(rows + [dict(family="a", won=False, score=0.0, turns=3, total_reward=0.0, error=None)])
    assert [r["family"] for r in mixed] == ["(none)", "a", "All"]
    assert [r["episodes"] for r in mixed] == [3, 1, 4]


def test_env_identity_fields_go_into_rows_tables_and_the_resume_check(tmp_path, monkeypatch):
    """An env's ``run_identity()`` (e.g. TextCraft's ``rules``) is written into every row, shown in every table
    format, and a results file made under other values is refused."""
    from agentgym.envs.textcraft.env import TextCraftEnv
    from agentgym.eval.report import load_run, report_markdown
    from agentgym.eval.results import env_identity_fields

    monkeypatch.setattr(TextCraftEnv, "run_identity", lambda self: {"rules": "ruleset-a"})
    g = EvalGrid(env_id="TextCraft-v0", split="gen-depth1", episodes=2, max_turns=5)
    out = tmp_path / "r.jsonl"
    rows = run_grid(g, RandomPolicy(), out)
    assert rows and all(r["rules"] == "ruleset-a" and env_identity_fields(r) == {"rules": "ruleset-a"} for r in rows)
    summary = summarize(rows)
    assert format_table(summary, "markdown", identity=g.env_identity()).splitlines()[0] == "rules: ruleset-a"
    assert all(r["rules"] == "ruleset-a" for r in json.loads(format_table(summary, "json", identity={"rules": "ruleset-a"})))
    assert format_table(summary, "csv", identity={"rules": "ruleset-a"}).splitlines()[0].startswith("rules,")
    assert "rules: ruleset-a" in report_markdown([load_run(str(out))])

    monkeypatch.setattr(TextCraftEnv, "run_identity", lambda self: {"rules": "ruleset-b"})
    with pytest.raises(ResultsMismatchError, match="rules: 'ruleset-a' there, 'ruleset-b' now"):
        run_grid(EvalGrid(env_id="TextCraft-v0", split="gen-depth1", episodes=2, max_turns=5), RandomPolicy(), out)
    with pytest.raises(ValueError, match="overwrite"):
        run_identity("p", None, None, None, {"won": 1})
