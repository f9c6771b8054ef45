"""TextCraft's ``rules`` is part of a run's identity, end to end through the CLI: every results row names it, every
table shows it (a caption line in markdown, a leading column in CSV and JSON), ``agentgym report`` shows it, and a
results file written under other rules is not resumed."""

from __future__ import annotations

import json
import subprocess
import sys

from agentgym.eval.results import ResultsFile


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True, text=True, timeout=300)


def test_rules_in_rows_tables_report_and_resume_check(tmp_path):
    out = tmp_path / "tc.jsonl"
    base = ["eval", "TextCraft-v0", "--split", "gen-depth1", "--episodes", "2", "--max-turns", "8", "--out", str(out)]
    res = cli(*base)  # the split's default: canonical
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[0] == "rules: canonical"
    rows = ResultsFile(out).read()
    assert len(rows) == 2 and all(r["rules"] == "canonical" and r["identity_fields"] == ["rules"] for r in rows)
    assert all(r["won"] for r in rows)  # the oracle, under ADaPT's rules

    # Resumed: nothing left to play; the tables in the other formats carry the rules as their first column.
    res = cli(*base, "--format", "csv")
    assert res.returncode == 0 and res.stdout.splitlines()[0].startswith("rules,")
    assert res.stdout.splitlines()[1].startswith("canonical,")
    res = cli(*base, "--format", "json")
    assert res.returncode == 0 and all(r["rules"] == "canonical" for r in json.loads(res.stdout))
    res = cli("report", str(out))
    assert res.returncode == 0 and "rules: canonical" in res.stdout, res.stdout

    # The lenient rules into the same file: refused, naming the rules; the file is untouched.
    res = cli(*base, "--env-arg", "rules=lenient")
    assert res.returncode == 2 and "rules: 'canonical' there, 'lenient' now" in res.stderr, res.stderr[-2000:]
    assert len(ResultsFile(out).read()) == 2

    # Into its own file they run, and say so.
    res = cli(*base[:-1], str(tmp_path / "lenient.jsonl"), "--env-arg", "rules=lenient")
    assert res.returncode == 0 and res.stdout.splitlines()[0] == "rules: lenient"
    assert all(r["rules"] == "lenient" for r in ResultsFile(tmp_path / "lenient.jsonl").read())
