"""agentgym report: tables and figures comparing eval runs side by side, pass^k, learning curves from train logs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentgym.eval.grid import EvalGrid, run_grid
from agentgym.eval.report import breakdown, learning_curves, load_run, plot_report, report_markdown, turns_to_success
from agentgym.eval.summary import pass_hat_k, pass_k_curve
from agentgym.rollout.policy import OraclePolicy, RandomPolicy


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    for depth in (1, 2, 3):  # one family per depth: the per-family bars have three families and All
        grid = EvalGrid(env_id="TextCraft-v0", split=f"gen-depth{depth}", episodes=8, seeds=(0, 1), trials=2,
                        max_turns=30)
        run_grid(grid, OraclePolicy(), d / "oracle.jsonl", policy_name="oracle")
        run_grid(grid, RandomPolicy(), d / "random.jsonl", policy_name="random")
    log = d / "train.jsonl"
    with open(log, "w") as fh:  # the shape of an `agentgym train` log: one row per step and estimator
        for est in ("grpo", "gigpo"):
            for step in range(5):
                fh.write(json.dumps({"step": step, "estimator": est, "reward": 0.1 * step, "success": step / 5,
                                     "diagnostics": {"frac_step_groups": 0.5, "adv_std": 1.0 + step}}) + "\n")
    with open(d / "metrics.jsonl", "w") as fh:  # what adapters.train writes: flat TRL + agentgym/* metrics
        for step in range(1, 4):
            fh.write(json.dumps({"step": step, "loss": 0.5 / step, "reward": 0.2 * step, "agentgym/success": step / 4,
                                 "agentgym/singleton_record_frac": 0.3}) + "\n")
        fh.write(json.dumps({"step": 3, "train_runtime": 12.5}) + "\n")  # TRL's end-of-run record
    return d


def test_pass_hat_k_matches_the_definition_and_is_the_tau_helper():
    from agentgym.envs.tau_airline.metrics import pass_hat_k as tau_pass_hat_k

    assert tau_pass_hat_k is pass_hat_k  # one implementation of τ-bench's pass^k

    rows = [{"task_id": "a", "won": w, "error": None} for w in (1, 1, 1, 0)] + \
           [{"task_id": "b", "won": 1, "error": None} for _ in range(4)] + \
           [{"task_id": "b", "won": 0, "error": {"kind": "env_crash"}}]
    assert pass_hat_k(rows, 1) == pytest.approx((0.75 + 1) / 2)
    assert pass_hat_k(rows, 2) == pytest.approx((3 / 6 + 1) / 2)  # C(3,2)/C(4,2) for a; errors are not trials
    assert pass_hat_k(rows, 4) == pytest.approx((0 + 1) / 2) and list(pass_k_curve(rows)) == [1, 2, 3, 4]
    assert list(pass_k_curve(rows, 6)) == [1, 2, 3, 4, 5, 6] and pass_k_curve(rows, 6)[5] != pass_k_curve(rows, 6)[5]


def test_markdown_compares_runs_side_by_side(runs):
    a, b = load_run(str(runs / "oracle.jsonl")), load_run(f"rand={runs / 'random.jsonl'}")
    assert (a.label, a.kind, b.label, len(b.rows)) == ("oracle", "results", "rand", 96)
    md = report_markdown([a, b], max_k=3)
    assert "| family | oracle | rand |" in md
    for fam in ("depth1", "depth2", "depth3"):
        rand = breakdown(b.rows, "family")[fam]
        assert f"| {fam} | 100.0 ± 0.0 (32) | {100 * rand['success']:.1f} ± {100 * rand['se']:.1f} (32) |" in md
    assert "## pass^k over seeds x trials" in md and "| 3 | 100.0 |" in md
    assert turns_to_success(a.rows) and min(turns_to_success(a.rows)) >= 1


def test_figure_has_bars_with_error_bars_for_each_run(runs, tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install -e '.[plot]')")
    from matplotlib.container import BarContainer, ErrorbarContainer

    rs = [load_run(str(runs / "oracle.jsonl")), load_run(str(runs / "random.jsonl")), load_run(str(runs / "train.jsonl"))]
    out = tmp_path / "report.png"
    fig = plot_report(rs, out)
    bars_ax = fig.axes[0]
    assert bars_ax.get_title() == "success by family (± SE)"
    # One group of bars per family, in order, then All; one bar per run in each group, in the runs' order.
    families = ["depth1", "depth2", "depth3", "All"]
    assert [t.get_text() for t in bars_ax.get_xticklabels()] == families
    assert [t.get_text() for t in bars_ax.get_legend().get_texts()] == ["oracle", "random"]
    bars = [c for c in bars_ax.containers if isinstance(c, BarContainer)]
    assert len(bars) == 2 and [len(c) for c in bars] == [4, 4]
    assert sum(isinstance(c, ErrorbarContainer) for c in bars_ax.containers) == 2
    centers = [[p.get_x() + p.get_width() / 2 for p in c] for c in bars]
    assert all(o < r for o, r in zip(*centers))  # oracle left of random within each family's group
    assert centers[0] == sorted(centers[0]) and all(r < o for r, o in zip(centers[1], centers[0][1:]))
    rand = breakdown(rs[1].rows, "family")
    assert [p.get_height() for p in bars[0]] == [100.0] * 4
    assert [p.get_height() for p in bars[1]] == pytest.approx([100 * rand[f]["success"] for f in families])
    assert len({round(rand[f]["success"], 6) for f in families[:3]}) > 1  # the families' bars differ
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert {"pass^k over seeds x trials", "turns to success", "reward", "success",
            "diagnostics/adv_std"} <= set(titles)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    svg = tmp_path / "report.svg"
    plot_report(rs, svg)
    assert b"<svg" in svg.read_bytes()[:500]
    with pytest.raises(Exception, match="png or .svg"):
        plot_report(rs, tmp_path / "report.pdf")


def test_trainer_metrics_log_is_plotted(runs, tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install -e '.[plot]')")
    run = load_run(f"bipace={runs / 'metrics.jsonl'}")
    assert run.kind == "train" and run.label == "bipace"
    assert learning_curves(run.rows)[""]["agentgym/success"] == ([1, 2, 3], [0.25, 0.5, 0.75])
    titles = [ax.get_title() for ax in plot_report([run], tmp_path / "m.png").axes if ax.get_visible()]
    assert titles[:3] == ["reward", "agentgym/success", "loss"] and "train_runtime" not in titles


def test_learning_curves_from_a_train_log(runs):
    run = load_run(str(runs / "train.jsonl"))
    assert run.kind == "train"
    c = learning_curves(run.rows)
    assert set(c) == {"grpo", "gigpo"}
    assert c["gigpo"]["diagnostics/adv_std"] == ([0, 1, 2, 3, 4], [1, 2, 3, 4, 5])
    assert "| gigpo | reward | 5 | 0 | 0.4 |" in report_markdown([run])


def test_cli_report(runs, tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install -e '.[plot]')")
    svg = tmp_path / "cli.svg"
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "report", str(runs / "oracle.jsonl"),
                          str(runs / "random.jsonl"), "--plot", str(svg), "--by", "family"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "| family | oracle | random |" in res.stdout and svg.exists()
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "report", str(tmp_path / "missing.jsonl")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "no such results file" in res.stderr
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "report", str(runs / "oracle.jsonl"), "--format",
                          "json"], capture_output=True, text=True, timeout=60)
    assert json.loads(res.stdout)["results"]["oracle"]["overall"]["success"] == 1.0
