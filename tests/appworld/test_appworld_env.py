"""AppWorld-v0 end to end on the real apps: gold solutions, wrong agents, the sandbox escape suite, agent code that
breaks its worker, dead workers.

Needs the AppWorld venv (``agentgym appworld setup``); every test here skips with the reason when it is absent.
Every episode runs in a process of its own, forked from a server that has AppWorld imported, and is evaluated in
another fresh process: about a second an episode, so the gold/wrong/do-nothing sweep covers every task.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import warnings

import numpy as np
import pytest

from agentgym.errors import AGENT_CODE, EnvCrashError
from agentgym.envs.appworld import ENTRY

ok, why = ENTRY.split_available("test")
pytestmark = pytest.mark.skipif(not ok, reason=f"AppWorld venv unavailable: {why}")

# Agent code reaches any module through the builtins' __import__, past AppWorld's import lint.
IMP = "(__builtins__['__import__'] if isinstance(__builtins__, dict) else __builtins__.__import__)"
OPEN = "(getattr(__builtins__, 'open', None) or __builtins__['open'])"


#: How worker.py words "this kernel lacks it" for its seccomp filter and its Landlock layer; any other reason is a
#: layer that failed to install, and fails the test.
NO_SECCOMP = ("no seccomp filter for ", "seccomp is not available: ")
NO_LANDLOCK = ("Landlock is not available: ",)


def kernel_layer_on(reason: str | None, lacking: tuple[str, ...], what: str) -> bool:
    """Whether a worker's kernel-level layer is on (``reason`` None); False, with a warning, only when the kernel
    lacks it."""
    if reason is None:
        return True
    assert reason.startswith(lacking), f"the worker's {what} failed to install: {reason}"
    warnings.warn(f"no {what} here ({reason}): its kernel-level checks are skipped")
    return False


def attempt(body: str) -> str:
    """A cell that runs ``body`` and prints CONTAINED (with the exception) or ESCAPED: proof that it ran."""
    inner = "\n".join("    " + line for line in body.strip().splitlines())
    return (f"try:\n{inner}\n    print('ESCAPED')\n"
            "except BaseException as e:\n    print('CONTAINED', type(e).__name__, e)")


@pytest.fixture(scope="module")
def env():
    import agentgym

    e = agentgym.make("AppWorld-v0", split="all", max_turns=12)
    yield e
    e.close()


def _quick_env(max_interactions=1000, **limits):
    """An env whose workers have short limits (wall clock, AppWorld's cell timeout)."""
    import agentgym
    from agentgym.envs.appworld.sandbox import SandboxLimits

    return agentgym.make("AppWorld-v0", split="all", max_turns=40, max_interactions=max_interactions,
                         limits=SandboxLimits(**{"cell_timeout_seconds": 2, "wall_seconds_per_request": 6, **limits}))


def _play(env, task_id, cells):
    env.reset(options={"task_id": task_id})
    steps = []
    for cell in cells:
        obs, r, term, trunc, info = env.step(f"<code>\n{cell}\n</code>")
        steps.append((obs, r, term, trunc, info))
        if term or trunc:
            return steps
    # Not finished by the cells: mark complete without doing anything more (a "do-nothing" ending).
    steps.append(env.step("<code>apis.supervisor.complete_task()</code>"))
    return steps


def test_gold_wins_and_wrong_and_do_nothing_fail_on_every_task(env):
    from agentgym.envs.appworld.env import scenario_goal_completion

    results = []
    assert len(env.task_ids()) == 24
    for tid in env.task_ids():
        task = env.get_task(tid)
        gold = _play(env, tid, task.solution)
        obs, r, term, trunc, info = gold[-1]
        assert term and info["won"] and r == 1.0 and info["score"] == 1.0 and info["progress"] == 1.0, \
            (tid, info["evaluation"])
        assert all(s[4]["process_ok"] for s in gold), tid
        assert all(c["passed"] for c in info["evaluation"]["checks"]) and info["agent_failure"] is None
        results.append((tid, True))
        wrong = _play(env, tid, ["\n".join(task.wrong_solution)])
        assert not wrong[-1][4]["won"] and wrong[-1][1] == 0.0, (tid, "wrong solution won")
        assert any(not c["passed"] for c in wrong[-1][4]["evaluation"]["checks"])
        nothing = _play(env, tid, [])  # only declares the task done
        assert nothing[-1][2] and not nothing[-1][4]["won"] and nothing[-1][1] == 0.0, (tid, "do-nothing won")
    assert scenario_goal_completion(results) == 1.0


def test_failure_kinds_are_classified_on_real_engine_output():
    """Each failure kind AppWorld reports, on its own output: the text names the kind and ``process_ok`` is False.
    AppWorld counts the cells it executes (not lint refusals or syntax errors): the 5th is the last allowed."""
    e = _quick_env(max_interactions=5)
    try:
        e.reset(options={"task_id": "agnoteadd_1"})
        cases = [  # (name, code, process_ok, a phrase of the output)
            ("syntax", "x = = 1", False, "Syntax error"),
            ("runtime", "1/0", False, "ZeroDivisionError"),
            ("bad API", "apis.simple_note.no_such_api()", False, "no_such_api"),
            ("HTTP 4xx", "apis.simple_note.show_note(note_id=1, access_token='bad')", False, "401"),
            ("blocked import", "import subprocess", False, "not allowed"),
            ("timeout", "while True:\n    pass", False, "timed out"),
            ("ok", "print(1 + 1)", True, "2"),
            ("step cap", "print(3)", False, "Maximum number of executions (5)"),
        ]
        for name, code, ok_expected, phrase in cases:
            obs, r, term, trunc, info = e.step(f"<code>\n{code}\n</code>")
            assert info["process_ok"] is ok_expected and phrase in obs, (name, obs)
            assert info["action_valid"] and not term and info["agent_failure"] is None, (name, obs)
            assert (info["invalid_reason"] is None) is ok_expected
        obs, r, term, trunc, info = e.step("no tags at all")
        assert not info["action_valid"] and info["process_ok"] is None
    finally:
        e.close()


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


def test_escape_suite_is_contained_and_evaluation_stays_correct(listener, tmp_path, monkeypatch):
    """Every attempt goes past AppWorld's lint (``__import__``, ``posix``, ``io.FileIO``...) so that it actually
    runs -- each prints CONTAINED with the refusal, or shows its effect -- and the evaluation stays honest."""
    from agentgym.envs.appworld.pool import close_servers
    from agentgym.envs.appworld.tasks import verify_build

    port, hits = listener
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    outside = tmp_path / "written-by-agent.txt"
    monkeypatch.setenv("AGENTGYM_TEST_SECRET", "HOST-ENV-SECRET")
    close_servers()  # the next fork server starts with the variable set: only the scrubbing keeps it out
    e = _quick_env()
    tid = "agnoteadd_1"
    try:
        e.reset(options={"task_id": tid})
        pid = e._worker.pid
        gt = e._build.full_data / "tasks" / tid / "ground_truth" / "answer.json"
        contained = {  # name -> (cell, a phrase of the refusal)
            "connect to the host's listener": (attempt(
                f"{IMP}('socket').create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'escaped')"),
                "sandbox: socket"),
            "urllib to the listener": (attempt(
                f"print({IMP}('urllib.request', fromlist=['x']).urlopen('http://127.0.0.1:{port}/', timeout=2))"),
                "sandbox: socket"),
            "read a file outside the workspace": (attempt(f"print({OPEN}({str(secret)!r}).read())"),
                                                  "sandbox: reading"),
            "read it with io.FileIO": (attempt(f"print({IMP}('io').FileIO({str(secret)!r}).read())"),
                                       "sandbox: reading"),
            "read the ground truth": (attempt(f"print({OPEN}({str(gt)!r}).read())"), "sandbox: reading"),
            "list other tasks": (attempt(f"print({IMP}('posix').listdir('data/tasks'))"), "sandbox: listing"),
            "write outside the workspace": (attempt(f"{IMP}('io').FileIO({str(outside)!r}, 'w').write(b'x')"),
                                            "sandbox: writing"),
            "overwrite the world data": (attempt(
                f"{IMP}('io').FileIO('data/tasks/{tid}/specs.json', 'w').write(b'{{}}')"), "sandbox: writing"),
            "fork bomb": (attempt(f"p = {IMP}('posix')\nwhile True:\n    p.fork()"), "sandbox: os.fork"),
            "os.system": (attempt(f"{IMP}('posix').system('echo pwned > /tmp/agentgym-pwned')"),
                          "sandbox: os.system"),
            "subprocess's own fork_exec": (attempt(
                f"{IMP}('subprocess')._fork_exec([b'/bin/true'], [b'/bin/true'], True, (), None, None, -1, -1, -1, "
                "-1, -1, -1, 5, 6, True, False, -1, None, None, None, -1, None, False)"),
                "process creation is not allowed"),
            "a fresh _posixsubprocess": (attempt(
                f"u = {IMP}('importlib.util', fromlist=['x'])\nu.module_from_spec(u.find_spec('_posixsubprocess'))"),
                "sandbox: importing _posixsubprocess"),
            "memory bomb": (attempt("x = bytearray(8 * 1024 ** 3)"), "MemoryError"),
            "sqlite file outside the workspace": (attempt(
                f"{IMP}('sqlite3.dbapi2', fromlist=['x']).connect('/tmp/agentgym-escape.db').execute("
                "'create table t(x)')"), "sandbox: sqlite database"),
            "sqlite URI outside the workspace": (attempt(
                f"{IMP}('sqlite3.dbapi2', fromlist=['x']).connect('file:/tmp/agentgym-escape.db?mode=rwc', "
                "uri=True).execute('create table t(x)')"), "sandbox: sqlite database"),
            # The guard's own helpers, swapped first (and put back): each read still meets the refusal.
            "read through an object's __fspath__": (attempt(
                f"print({IMP}('io').FileIO(type('S', (), {{'__fspath__': lambda self: {str(secret)!r}}})()).read())"),
                "sandbox: open takes only str or bytes"),
            "read with builtins.any swapped": (attempt(
                f"b, p = {IMP}('builtins'), {IMP}('posix')\nreal, b.any = b.any, lambda it: True\ntry:\n"
                f"    assert any([])\n    print(p.read(p.open({str(secret)!r}, 0), 99))\nfinally:\n    b.any = real"),
                "sandbox: reading"),
            "read with posixpath's helpers swapped": (attempt(
                f"pp, p = {IMP}('posixpath'), {IMP}('posix')\nreal = pp._joinrealpath, pp.abspath\n"
                "pp._joinrealpath = lambda *a, **k: (pp.join(p.getcwd(), 'x'), True)\n"
                "pp.abspath = lambda path: pp.join(p.getcwd(), 'x')\ntry:\n"
                "    assert pp.realpath('/etc') == pp.join(p.getcwd(), 'x')\n"
                f"    print({OPEN}({str(secret)!r}).read())\n"
                "finally:\n    pp._joinrealpath, pp.abspath = real"), "sandbox: reading"),
            "a fresh ctypes": (attempt(f"print({IMP}('ctypes').CDLL(None))"), "sandbox: importing _ctypes"),
            "write the base databases through AppWorld's connection": (attempt(
                f"ml = {IMP}('appworld.apps.model_lib', fromlist=['x'])\n"
                "c = ml.get_direct_cached_sqlite3_connection("
                f"{IMP}('os').path.abspath('data/base_dbs/simple_note.db'))\n"
                "c.execute('delete from notes')\nc.commit()"), "readonly database"),
        }
        for name, (code, phrase) in contained.items():
            obs, r, term, trunc, info = e.step(f"<code>\n{code}\n</code>")
            assert "CONTAINED" in obs and phrase in obs and "ESCAPED" not in obs, (name, obs)
            assert "TOP-SECRET-CONTENT" not in obs and not term, (name, obs)
        assert hits == [], "a worker reached the host's listener"
        assert not outside.exists() and not os.path.exists("/tmp/agentgym-pwned")
        assert not os.path.exists("/tmp/agentgym-escape.db")

        filtered = kernel_layer_on(e._worker.unconfined, NO_SECCOMP, "seccomp filter")
        landlocked = kernel_layer_on(e._worker.files_unconfined, NO_LANDLOCK, "Landlock layer")

        # Another process of the same user: no signal reaches it, whether audited or not.
        victim = subprocess.Popen(["sleep", "60"])
        try:
            for name, (code, phrase) in {
                "os.kill": (attempt(f"{IMP}('posix').kill({victim.pid}, 9)"), "sandbox: os.kill"),
                "pidfd_open + pidfd_send_signal": (attempt(
                    f"{IMP}('signal').pidfd_send_signal({IMP}('posix').pidfd_open({victim.pid}), 9)"),
                    "Operation not permitted"),
            }.items():
                if not filtered and name.startswith("pidfd"):
                    continue  # only the kernel's filter stops it
                obs, r, term, trunc, info = e.step(f"<code>\n{code}\n</code>")
                assert "CONTAINED" in obs and phrase in obs and "ESCAPED" not in obs and not term, (name, obs)
            if filtered:
                obs, *_ = e.step(  # libc's kill through cffi: no audit event, only the filter
                    f"<code>\nb = {IMP}('_cffi_backend')\nlib = b.load_library('libc.so.6')\n"
                    "ci = b.new_primitive_type('int')\n"
                    "kill = lib.load_function(b.new_function_type((ci, ci), ci, False), 'kill')\n"
                    f"print('kill ->', kill({victim.pid}, 9))\n</code>")
                assert "kill -> -1" in obs, obs
            assert victim.poll() is None  # it survived every attempt
        finally:
            victim.kill()
            victim.wait()

        if filtered:
            # cffi reaches libc with no audit event at all: the kernel's seccomp filter is what refuses the fork.
            obs, *_ = e.step(
                f"<code>\nb = {IMP}('_cffi_backend')\nlib = b.load_library('libc.so.6')\n"
                "fork = lib.load_function(b.new_function_type((), b.new_primitive_type('int'), False), 'fork')\n"
                "errno = lib.load_function(b.new_function_type((), b.new_pointer_type(b.new_primitive_type('int')), "
                "False), '__errno_location')\nprint('fork ->', fork(), 'errno', errno()[0])\n</code>")
            assert "fork -> -1 errno 1" in obs, obs  # EPERM

        if landlocked:
            # cffi's libc open: no audit event, so only Landlock refuses (EACCES) writes outside the workspace and
            # reads outside the guard's read set; the same call inside the workspace works (0o1101: O_WRONLY, O_CREAT,
            # O_TRUNC).
            obs, *_ = e.step(
                f"<code>\nb = {IMP}('_cffi_backend')\nlib = b.load_library('libc.so.6')\n"
                "ci, cp = b.new_primitive_type('int'), b.new_pointer_type(b.new_primitive_type('char'))\n"
                "op = lib.load_function(b.new_function_type((cp, ci, ci), ci, False), 'open')\n"
                "errno = lib.load_function(b.new_function_type((), b.new_pointer_type(ci), False), "
                "'__errno_location')\n"
                f"for what, path, flags in (('write', {str(outside).encode()!r}, 0o1101), "
                f"('secret', {str(secret).encode()!r}, 0), ('truth', {str(gt).encode()!r}, 0), "
                "('inside', b'inside.txt', 0o1101)):\n"
                "    fd = op(path, flags, 0o600)\n    print(what, fd >= 0, errno()[0] if fd < 0 else 0)\n</code>")
            assert obs.split("\n")[:4] == ["write False 13", "secret False 13", "truth False 13", "inside True 0"], obs
            assert not outside.exists()

        obs, *_ = e.step(f"<code>print('ENV', sorted({IMP}('posix').environ.items()))</code>")
        assert "ENV" in obs and "HOST-ENV-SECRET" not in obs and "AGENTGYM_TEST_SECRET" not in obs, obs
        assert "(b'PATH', b'/usr/bin:/bin')" in obs, obs  # the only PATH entry: the scrubbed one

        obs, r, term, trunc, info = e.step("<code>while True:\n    pass</code>")
        assert info["process_ok"] is False and "timed out" in obs and not term

        # Forged protocol lines: every pipe the worker holds gets a well-formed reply that ends the episode.
        forged = ('{"ok": true, "output": "FORGED", "task_completed": true, "tainted": false, "output_dbs": "/"}\\n')
        obs, r, term, trunc, info = e.step(
            f"<code>\np, st = {IMP}('posix'), {IMP}('stat')\nn = 0\nfor fd in range(3, 64):\n    try:\n"
            f"        if st.S_ISFIFO(p.fstat(fd).st_mode):\n            p.write(fd, b'{forged}')\n"
            "            n += 1\n    except OSError:\n        pass\nprint('real-output', n)\n</code>")
        assert obs.startswith("real-output") and int(obs.split()[1]) >= 1 and not term, obs
        assert e.step("<code>print(2 + 2)</code>")[0].strip() == "4"  # no desync

        obs, r, term, trunc, info = e.step(
            f"<code>ev = {IMP}('appworld.evaluator', fromlist=['x'])\n"
            "ev.evaluate_task = lambda *a, **k: None\nprint('PATCHED', ev.evaluate_task(task_id='x'))</code>")
        assert info["process_ok"] and "PATCHED None" in obs, obs
        assert e._worker.pid == pid  # every attempt above ran in this one worker

        # The evaluation is honest: nothing was done, so the task failed; the build is intact.
        obs, r, term, trunc, info = e.step("<code>apis.supervisor.complete_task()</code>")
        assert term and not info["won"] and r == 0.0 and info["agent_failure"] is None
        assert any(not c["passed"] for c in info["evaluation"]["checks"]) and not info["evaluation"]["tampered"]
        assert verify_build(e._build) is None
    finally:
        e.close()


def _proc_state(stat_path: str) -> str:
    """The state letter of a /proc/PID/stat file (R, S, T, Z...)."""
    with open(stat_path) as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_agent_code_that_breaks_its_worker_fails_the_task(wait_until):
    """Dying, hanging past the wall clock, or leaving a corrupt saved state is a scored failure, never an error."""
    e = _quick_env()  # 2 s per cell, 6 s per request: room for a loaded machine
    tid = "agnoteadd_1"
    log = f"experiments/outputs/agentgym/tasks/{tid}/dbs/simple_note.jsonl"
    routes = {
        "hang": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
        "os._exit": f"{IMP}('posix')._exit(3)",
        "signal": f"{IMP}('faulthandler')._sigsegv()",
        "corrupt change log": f"{IMP}('io').FileIO({log!r}, 'a').write(b'not json\\n')\n{IMP}('posix')._exit(0)",
        # The cell itself returns; a thread it left behind kills the worker while it waits for the next cell (2 s
        # later: long after the cell's answer, even on a loaded machine).
        "thread between cells": f"{IMP}('threading').Timer(2.0, {IMP}('posix')._exit, (5,)).start()",
        # A thread stops the worker between cells; the next cell is bigger than the pipe holds: its write must not
        # block forever.
        "stopped, then a big cell": f"{IMP}('threading').Timer(2.0, {IMP}('signal').raise_signal, (19,)).start()",
    }
    try:
        task = e.get_task(tid)
        for name, code in routes.items():
            e.reset(options={"task_id": tid})
            # The gold solution's work, then the breaking cell (before complete_task): the episode still fails.
            for cell in task.solution[:-1]:
                assert e.step(f"<code>\n{cell}\n</code>")[4]["process_ok"]
            obs, r, term, trunc, info = e.step(f"<code>\n{code}\n</code>")
            if name == "thread between cells":
                assert info["process_ok"] and not term, obs
                wait_until(lambda: not e._worker.alive(), "the thread to kill the worker")
                obs, r, term, trunc, info = e.step("<code>print(1)</code>")
            elif name == "stopped, then a big cell":
                assert info["process_ok"] and not term, obs
                state = f"/proc/{e._worker.pid}/stat"
                wait_until(lambda: _proc_state(state) == "T", "the thread to stop the worker")
                obs, r, term, trunc, info = e.step("<code>print(1)  # " + "x" * 300_000 + "</code>")
            assert term and not trunc and r == 0.0 and not info["won"] and info["process_ok"] is False, (name, obs)
            assert obs.startswith("Execution failed.") and info["error"] is None, (name, obs)
            failure = info["agent_failure"]
            assert failure["kind"] == AGENT_CODE and failure["stage"] == "step", (name, failure)
            ev = info["evaluation"]
            assert not ev["success"] and ev["checks"][-1]["passed"] is False, (name, ev)
            assert e._worker is None
            if name == "corrupt change log":
                assert ev["tampered"] and "malformed saved state" in str(ev["checks"]), ev
            else:
                # Evaluated from the last saved state: the note the gold cells created is there.
                assert not ev["tampered"] and any(c["passed"] for c in ev["checks"][:-1]), (name, ev)
            if name in ("hang", "stopped, then a big cell"):
                assert failure["exception"] == "EpisodeTimeoutError", failure
            elif name == "os._exit":
                assert "exit code 3" in failure["message"], failure
            elif name == "thread between cells":
                assert "exit code 5" in failure["message"], failure
            elif name == "signal":
                assert "signal 11" in failure["message"], failure
    finally:
        e.close()


def test_corrupt_saved_state_is_a_failed_task_not_an_evaluation_error(env, tmp_path):
    """The evaluator on one real saved state: intact it succeeds; with a malformed line, a statement that is not a
    row change, or a change that does not load, it is a failed task (``tampered``), never an error."""
    from agentgym.envs.appworld.pool import get_pool, run_evaluator

    tid = "agnoteadd_1"
    worker = get_pool(env._spec()).acquire()
    try:
        worker.request("reset", task_id=tid, experiment="agentgym")
        for cell in env.get_task(tid).solution:
            assert not worker.request("execute", code=cell)["output"].startswith("Execution failed")
        worker.kill()
        saved = tmp_path / "saved"
        shutil.copytree(worker.output_dbs(tid), saved)
    finally:
        worker.dispose()
    _, full, manifest = env._paths()

    def evaluate(state):
        return run_evaluator(str(env.install.python), full, manifest, tid, str(state), str(env.install.scratch_dir))

    assert evaluate(saved)["success"]
    for name, line in {"malformed": "{not json", "not a row change": '["DROP TABLE notes", [], false]',
                       "does not load": '["INSERT INTO no_such_table VALUES (1)", [], false]'}.items():
        bad = tmp_path / name.replace(" ", "-")
        shutil.copytree(saved, bad)
        with open(bad / "simple_note.jsonl", "a") as f:
            f.write(line + "\n")
        result = evaluate(bad)
        assert result["ok"] and not result["success"] and result["tampered"], (name, result)
    assert not evaluate(tmp_path / "missing")["success"]
    # A state over the evaluator's size cap (sparse: instant) is the agent's doing too, not an error.
    from agentgym.envs.appworld.evaluator import MAX_STATE_BYTES

    big = tmp_path / "big"
    shutil.copytree(saved, big)
    os.truncate(big / "simple_note.jsonl", MAX_STATE_BYTES + 1)
    result = evaluate(big)
    assert result["ok"] and not result["success"] and result["tampered"] and "over" in str(result["failures"])


def test_killed_worker_is_a_typed_error_and_is_replaced(env, wait_until):
    # Killed from outside before it was sent any code: not the agent's doing, so an error, not a score.
    env.reset(options={"task_id": "agnotecount_1"})
    worker = env._worker
    os.kill(worker.pid, 9)
    # alive() asks the fork server, which reaps the child once it is dead
    wait_until(lambda: not worker.alive(), "the killed worker to be reaped")
    with pytest.raises(EnvCrashError):
        env.step("<code>print(1)</code>")
    obs, info = env.reset(options={"task_id": "agnotecount_1"})
    assert env._worker.pid != worker.pid and env._worker.alive()
    obs, r, term, trunc, info = env.step("<code>print(2 + 2)</code>")
    assert obs.strip() == "4" and info["process_ok"]


def test_control_channel_finalizers_and_forked_children_cannot_upset_the_fork_server(env, wait_until):
    import json

    from agentgym.envs.appworld import pool

    env.reset(options={"task_id": "agnotecount_1"})
    worker, server = env._worker, env._worker.server
    # A call interrupted between its send and its receive leaves an answer queued: the next call skips it.
    with server._lock:
        socket.send_fds(server.sock, [json.dumps({"op": "poll", "pid": 1, "seq": -1}).encode()], [])
    assert worker.alive()  # the stale answer says "not alive"
    # A finalizer that runs inside a call to the server (its lock held) must not call it.
    other = pool.get_pool(env._spec()).acquire()
    holder = type("Holder", (), {"_worker": other, "__del__": type(env).__del__})()
    with server._lock:
        t = threading.Thread(target=holder.__del__, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "the finalizer waited for the server's lock"
    assert other.closed and other in pool._ABANDONED
    pool._dispose_abandoned()
    assert not os.path.exists(other.workspace) and other.status is not None
    # A child that ended on its own is reaped at the server's next message (no zombie waits for a poll of it), and
    # how it ended is still reported.
    gone = pool.Worker(env._spec())
    gone.wait_ready()
    gone._close_pipes()  # its request pipe's EOF ends it
    wait_until(lambda: _proc_state(f"/proc/{gone.pid}/stat") == "Z", "the ended worker to become a zombie")
    assert worker.alive()  # any message
    assert not os.path.exists(f"/proc/{gone.pid}")
    gone.dispose()
    assert gone.status == "exit code 0"
    # A raw fork of this process exits through the pool's atexit hook: the parent's server must survive it.
    pid = os.fork()
    if pid == 0:
        try:
            pool._close_all()
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert server.alive() and worker.alive()
    obs, *_ = env.step("<code>print(2 + 2)</code>")
    assert obs.strip() == "4"


def test_every_episode_gets_a_fresh_worker_and_taint_is_the_parents(env):
    env.reset(options={"task_id": "agvenmobal_1"})
    first = env._worker
    assert not first.tainted
    env.step("<code>this is not python (</code>")
    assert first.tainted  # the parent does not ask the worker whether code ran
    obs, info = env.reset(options={"task_id": "agvenmobal_2"})
    assert env._worker is not first and env._worker.pid != first.pid and "Venmo balance" in obs
    assert first.closed and not os.path.exists(first.workspace)
    # Limits are applied to each worker; RLIMIT_NPROC (fork-bomb containment that does not rely on the hook) only
    # where the kernel's filter is unavailable: it counts every thread of the user.
    limits = open(f"/proc/{env._worker.pid}/limits").read()
    assert next(line for line in limits.splitlines() if line.startswith("Max core file size")).split()[4] == "0"
    nproc = next(line for line in limits.splitlines() if line.startswith("Max processes")).split()[2]
    own = next(line for line in open("/proc/self/limits").read().splitlines() if line.startswith("Max processes"))
    assert (nproc == own.split()[2]) is (env._worker.unconfined is None), limits


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


def test_cli_eval_oracle_reports_tgc_and_sgc_of_100_percent_on_the_test_split(tmp_path):
    """The issue's acceptance command, as a user runs it: every gold solution of the test split, scored by the
    clean evaluator process; TGC (success rate) and SGC (every task of a scenario won) are both 100%."""
    import json
    import subprocess
    import sys

    out = tmp_path / "appworld_oracle.jsonl"
    # Under the suite's 300 s per-test timeout (the run takes well under a minute).
    res = subprocess.run([sys.executable, "-m", "agentgym.cli", "eval", "AppWorld-v0", "--split", "test",
                          "--policy", "oracle", "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and all(r["won"] and r["error"] is None for r in rows)
    assert len({r["scenario_id"] for r in rows}) == 4
    assert "TGC (task goal completion): 100.0%" in res.stdout
    assert "SGC (scenario goal completion): 100.0% of 4 scenarios" in res.stdout
