"""AppWorld-v0 end to end on the real apps: gold solutions, wrong agents, the sandbox escape suite, dead workers.

Needs the AppWorld venv (``agentgym appworld setup``); every test here skips with the reason when it is absent.
Episodes are expensive (a worker process per episode, an evaluator process per evaluation), so the escape
attempts share one episode and the gold/wrong sweep covers the test split (``AGENTGYM_APPWORLD_FULL=1``: all tasks).
"""

from __future__ import annotations

import os
import socket
import threading

import numpy as np
import pytest

from agentgym.errors import EnvCrashError, EpisodeTimeoutError
from agentgym.envs.appworld import ENTRY

ok, why = ENTRY.split_available("test")
pytestmark = pytest.mark.skipif(not ok, reason=f"AppWorld venv unavailable: {why}")


@pytest.fixture(scope="module")
def env():
    import agentgym

    e = agentgym.make("AppWorld-v0", split="all", max_turns=12)
    yield e
    e.close()


def _play(env, task_id, cells):
    obs, info = env.reset(options={"task_id": task_id})
    infos = []
    for cell in cells:
        obs, r, term, trunc, info = env.step(f"<code>\n{cell}\n</code>")
        infos.append((obs, r, term, trunc, info))
        if term or trunc:
            return infos
    # Not finished by the cells: mark complete without doing anything more (a "do-nothing" ending).
    obs, r, term, trunc, info = env.step("<code>apis.supervisor.complete_task()</code>")
    infos.append((obs, r, term, trunc, info))
    return infos


def _sweep_ids(env):
    """Every task with AGENTGYM_APPWORLD_FULL=1; otherwise the first task of each test-split scenario (CI time)."""
    if os.environ.get("AGENTGYM_APPWORLD_FULL"):
        return env.task_ids()
    from agentgym.envs.appworld.tasks import scenario_of, split_task_ids

    firsts: dict[str, str] = {}
    for tid in split_task_ids("test"):
        firsts.setdefault(scenario_of(tid), tid)
    return list(firsts.values())


def test_gold_wins_and_wrong_and_do_nothing_fail(env):
    results = []
    for tid in _sweep_ids(env):
        task = env.get_task(tid)
        gold = _play(env, tid, task.solution)
        obs, r, term, trunc, info = gold[-1]
        assert term and info["won"] and r == 1.0 and info["score"] == 1.0 and info["progress"] == 1.0, \
            (tid, info["evaluation"])
        assert all(i[4]["process_ok"] for i in gold), tid
        assert all(c["passed"] for c in info["evaluation"]["checks"])
        results.append((tid, True))
        wrong = _play(env, tid, ["\n".join(task.wrong_solution)])
        assert not wrong[-1][4]["won"] and wrong[-1][1] == 0.0, (tid, "wrong solution won")
        assert any(not c["passed"] for c in wrong[-1][4]["evaluation"]["checks"])
    from agentgym.envs.appworld.env import scenario_goal_completion

    assert scenario_goal_completion(results) == 1.0


def test_do_nothing_fails(env):
    # An agent that only declares the task done must fail (no task may be passable by doing nothing).
    for tid in _sweep_ids(env):
        steps = _play(env, tid, [])
        info = steps[-1][4]
        assert steps[-1][2] and not info["won"], tid


def test_failure_kinds_are_classified(env):
    env.reset(options={"task_id": env.task_ids()[0]})
    cases = {
        "syntax": ("x = = 1", False),
        "runtime": ("1/0", False),
        "unknown api": ("apis.simple_note.no_such_api()", False),
        "http 4xx": ("apis.simple_note.show_note(note_id=1, access_token='bad')", False),
        "blocked import": ("import subprocess", False),
        "ok": ("print(1 + 1)", True),
    }
    for name, (code, ok_expected) in cases.items():
        obs, r, term, trunc, info = env.step(f"<code>{code}</code>")
        assert info["process_ok"] is ok_expected, (name, obs)
        assert info["action_valid"]
    obs, r, term, trunc, info = env.step("no tags at all")
    assert not info["action_valid"] and info["process_ok"] is None


@pytest.fixture()
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.5)
    hits = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                hits.append(conn.recv(64))
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1], hits
    stop.set()
    t.join(timeout=2)
    srv.close()


def test_escape_suite_is_contained_and_evaluation_stays_correct(env, listener, tmp_path, monkeypatch):
    port, hits = listener
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    monkeypatch.setenv("AGENTGYM_TEST_SECRET", "HOST-ENV-SECRET")
    tid = "agnoteadd_1"
    from agentgym.envs.appworld.pool import get_pool

    # Start a fresh worker after setting the host env var, so the scrubbing is what keeps it out.
    get_pool(env._spec()).close()
    env.reset(options={"task_id": tid})
    attempts = {
        # network: the module is blocked by AppWorld's lint, so reach it through __import__ tricks too
        "socket": f"s = __builtins__['__import__']('socket') if isinstance(__builtins__, dict) else "
                  f"__builtins__.__import__('socket')\ns.create_connection(('127.0.0.1', {port}), timeout=2)"
                  ".sendall(b'escaped')",
        "urllib": f"import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2))",
        "file": f"print(open({str(secret)!r}).read())",
        "file via io": f"import io\nprint(io.FileIO({str(secret)!r}).read())",
        "host env": "import os\nprint(dict(os.environ))",
        "fork bomb": "import os\nwhile True:\n    os.fork()",
        "memory bomb": "x = bytearray(8 * 1024 ** 3)",
        "infinite loop": "while True:\n    pass",
        "patch evaluator": "import appworld.evaluator as ev\nev.evaluate_task = lambda *a, **k: None\n"
                           "import appworld.task as t\nt.Task.load = None",
        "write ground truth": "import os\nprint(os.listdir('data/tasks/agnoteadd_1'))\n"
                              "open('data/tasks/agnoteadd_1/specs.json', 'w').write('{}')",
    }
    for name, code in attempts.items():
        obs, r, term, trunc, info = env.step(f"<code>\n{code}\n</code>")
        assert "TOP-SECRET-CONTENT" not in obs, name
        assert "HOST-ENV-SECRET" not in obs, name
        assert not term, name
        if name in ("socket", "urllib", "file", "file via io", "fork bomb", "memory bomb", "infinite loop",
                    "write ground truth"):
            assert info["process_ok"] is False, (name, obs)
    assert hits == [], "a worker reached the host's listener"
    # The world still works after the attempts, and evaluation is honest: nothing done => failed.
    obs, r, term, trunc, info = env.step("<code>apis.supervisor.complete_task()</code>")
    assert term and not info["won"] and r == 0.0
    assert any(not c["passed"] for c in info["evaluation"]["checks"])


def test_audit_hook_blocks_escapes_even_without_appworld_lint(env, listener, tmp_path):
    # AppWorld's lint is bypassable (getattr on builtins); the worker's own guard must still refuse.
    port, hits = listener
    secret = tmp_path / "secret2.txt"
    secret.write_text("SECOND-SECRET")
    env.reset(options={"task_id": "agnoteadd_2"})
    imp = "getattr(__builtins__, '__import__', None) or __builtins__['__import__']"
    cells = {
        "open": f"f = getattr(__builtins__, 'open', None) or __builtins__['open']\nprint(f({str(secret)!r}).read())",
        "socket": f"m = ({imp})('socket')\nm.create_connection(('127.0.0.1', {port}), timeout=2)",
        "fork": f"m = ({imp})('os')\nprint(getattr(m, 'fork')())",
        "posix fork": f"m = ({imp})('posix')\nprint(m.fork())",
        "posix system": f"m = ({imp})('posix')\nprint(m.system('echo pwned > /tmp/agentgym-pwned'))",
    }
    for name, code in cells.items():
        obs, r, term, trunc, info = env.step(f"<code>\n{code}\n</code>")
        assert "SECOND-SECRET" not in obs, name
        if name == "fork":
            # Refused by the guard, or null-patched by AppWorld's own safety guard (os.fork() returns None):
            # either way no child process exists.
            assert info["process_ok"] is False or obs.strip() == "None", obs
        else:
            assert info["process_ok"] is False, (name, obs)
    assert hits == []
    assert not os.path.exists("/tmp/agentgym-pwned")


def test_killed_worker_is_a_typed_error_and_is_replaced(env):
    env.reset(options={"task_id": "agnotecount_1"})
    pid = env._worker.pid
    os.kill(pid, 9)
    with pytest.raises(EnvCrashError):
        env.step("<code>print(1)</code>")
    obs, info = env.reset(options={"task_id": "agnotecount_1"})
    assert env._worker.pid != pid and env._worker.alive()
    obs, r, term, trunc, info = env.step("<code>print(2 + 2)</code>")
    assert obs.strip() == "4" and info["process_ok"]


def test_hung_worker_is_a_timeout_error(env):
    from agentgym.envs.appworld.sandbox import SandboxLimits

    import agentgym

    e = agentgym.make("AppWorld-v0", split="test", limits=SandboxLimits(wall_seconds_per_request=3,
                                                                        cell_timeout_seconds=60))
    try:
        e.reset(options={"task_id": "agnotecount_2"})
        with pytest.raises(EpisodeTimeoutError):
            e.step("<code>while True:\n    pass</code>")
        assert not e._worker
    finally:
        e.close()


def test_reset_is_reproducible_and_random_policy_runs(env):
    import agentgym

    e = agentgym.make("AppWorld-v0", split="test", max_turns=3)
    try:
        a = e.reset(seed=5)[0]
        b = e.reset(seed=5)[0]
        assert a == b
        rng = np.random.default_rng(0)
        done = False
        while not done:
            obs, r, term, trunc, info = e.step(e.random_action(rng))
            done = term or trunc
        assert trunc and not info["won"] and info["evaluation"] is not None
    finally:
        e.close()


def test_worker_reused_only_while_no_agent_code_ran(env):
    env.reset(options={"task_id": "agvenmobal_1"})
    pid = env._worker.pid
    env.step("<code>this is not python (</code>")  # does not parse: never runs
    obs, info = env.reset(options={"task_id": "agvenmobal_2"})
    assert env._worker.pid == pid and "Venmo balance" in obs
    env.step("<code>print('ran')</code>")
    env.reset(options={"task_id": "agvenmobal_3"})
    assert env._worker.pid != pid


def test_cli_eval_oracle_reports_tgc_and_sgc_of_100_percent_on_the_test_split(tmp_path):
    """The issue's acceptance command, as a user runs it: every gold solution of the test split, scored by the
    clean evaluator process; TGC (success rate) and SGC (every task of a scenario won) are both 100%."""
    import json
    import subprocess
    import sys

    out = tmp_path / "appworld_oracle.jsonl"
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "eval", "AppWorld-v0", "--split", "test",
                          "--policy", "oracle", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and all(r["won"] and r["error"] is None for r in rows)
    assert len({r["scenario_id"] for r in rows}) == 4
    assert "TGC (task goal completion): 100.0%" in res.stdout
    assert "SGC (scenario goal completion): 100.0% of 4 scenarios" in res.stdout
