"""The sandbox pieces on their own, with this interpreter (no AppWorld venv needed): network namespace, rlimits,
scrubbed environment, and the worker's audit hook."""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentgym.envs.appworld import sandbox
from agentgym.envs.appworld.sandbox import SandboxLimits, network_isolation_available, sandbox_command, scrubbed_env

WORKER = Path(__file__).resolve().parents[2] / "agentgym" / "envs" / "appworld" / "worker.py"


def _run(code: str, limits: SandboxLimits, cwd: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """``code`` in a child confined the way a worker is: its own session, and the rlimits of ``limits`` (computed
    here, in the parent) lowered by the child itself with worker.py's ``_apply_limits``, before ``code`` runs."""
    prelude = ("import importlib.util as _u\n"
               f"_s = _u.spec_from_file_location('_limits', {str(WORKER)!r})\n"
               "_w = _u.module_from_spec(_s)\n_s.loader.exec_module(_w)\n"
               f"_w._apply_limits({sandbox.rlimits(limits)!r})\ndel _u, _s, _w\n")
    argv = sandbox_command([sys.executable, "-I", "-c", prelude + code], limits)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=scrubbed_env(cwd),
                          start_new_session=True)


@pytest.fixture()
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    yield srv.getsockname()[1]
    srv.close()


@pytest.mark.skipif(not network_isolation_available(), reason="network namespaces (unshare --net) unavailable here")
def test_network_namespace_blocks_the_host_listener(listener, tmp_path):
    code = f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {listener}), timeout=2)\n print('CONNECTED')\n" \
           "except OSError as e:\n print('BLOCKED', e)"
    out = _run(code, SandboxLimits(), str(tmp_path)).stdout
    assert "BLOCKED" in out and "CONNECTED" not in out
    # Control: without the namespace the same code connects (the test could fail).
    out = _run(code, SandboxLimits(network=False), str(tmp_path)).stdout
    assert "CONNECTED" in out


def test_memory_and_cpu_limits_are_enforced(tmp_path):
    limits = SandboxLimits(memory_bytes=512 * 1024**2, cpu_seconds=2)
    out = _run("try:\n x = bytearray(2 * 1024**3)\n print('ALLOCATED')\nexcept MemoryError:\n print('REFUSED')",
               limits, str(tmp_path))
    assert "REFUSED" in out.stdout
    proc = _run("while True:\n pass", limits, str(tmp_path), timeout=60)
    assert proc.returncode != 0  # killed by SIGXCPU/SIGKILL at the CPU limit


def test_missing_network_namespaces_are_logged_as_a_warning(tmp_path, monkeypatch, caplog):
    # A PATH without `unshare` is a machine without network namespaces, as far as the sandbox can tell.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sandbox, "_warned", False)
    sandbox._unshare_prefix.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="agentgym.envs.appworld.sandbox"):
            assert not network_isolation_available()
            assert sandbox_command(["python", "-c", "pass"], SandboxLimits()) == ["python", "-c", "pass"]
        assert "network namespaces are NOT available" in caplog.text
    finally:
        monkeypatch.undo()
        sandbox._unshare_prefix.cache_clear()


def test_process_limit_is_applied(tmp_path):
    out = _run("print(open('/proc/self/limits').read())", SandboxLimits(network=False, processes=7),
               str(tmp_path)).stdout
    value = next(line for line in out.splitlines() if line.startswith("Max processes")).split()[2]
    # The user's current count plus the headroom (processes come and go meanwhile), not the host's own limit.
    assert value.isdigit() and 7 <= int(value) <= sandbox._user_tasks() + 7 + 500, out
    assert int(value) != resource.getrlimit(resource.RLIMIT_NPROC)[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel does not apply RLIMIT_NPROC to root")
def test_process_limit_stops_a_fork_bomb(tmp_path):
    code = ("import os\nn = 0\ntry:\n    while n < 100000:\n        if os.fork() == 0:\n            os._exit(0)\n"
            "        n += 1\nexcept OSError as e:\n    print('STOPPED', n, type(e).__name__)")
    out = _run(code, SandboxLimits(network=False, processes=16), str(tmp_path)).stdout
    # The limit is the user's task count when the sandbox starts plus 16; tasks of the user that exit meanwhile give
    # the bomb a little more room, so allow some slack (without a limit it would reach 100,000).
    assert out.startswith("STOPPED") and int(out.split()[1]) <= 16 + 16, out


def test_environment_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_TEST_SECRET", "HOST-ENV-SECRET")
    out = _run("import os, json; print(json.dumps(dict(os.environ)))", SandboxLimits(network=False),
               str(tmp_path)).stdout
    env = json.loads(out)
    assert "AGENTGYM_TEST_SECRET" not in env and env["HOME"] == str(tmp_path)
    assert set(env) <= {"PATH", "HOME", "LANG", "TZ", "PYTHONHASHSEED", "LC_CTYPE"}


def test_audit_hook_confines_files_processes_and_sockets(tmp_path, listener):
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("OUTSIDE-SECRET")
    world = tmp_path / "world"  # a read root, as a task's data is for its worker
    (world / "ground_truth").mkdir(parents=True)
    (world / "specs.json").write_text("{}")
    (world / "ground_truth" / "answer.json").write_text("42")
    ro_db = world / "base.db"
    import sqlite3

    sqlite3.connect(ro_db).close()
    code = textwrap.dedent(f"""
        import importlib.util, os, sys, socket
        spec = importlib.util.spec_from_file_location("w", {str(WORKER)!r})
        w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)
        w._install_guard({str(ws)!r}, [{str(world)!r}, sys.prefix, sys.base_prefix] + [p for p in sys.path if p])
        def attempt(name, fn):
            try:
                fn(); print(name, "ALLOWED")
            except PermissionError as e:
                print(name, "REFUSED")
        attempt("read outside", lambda: open({str(outside)!r}).read())
        attempt("write outside", lambda: open({str(tmp_path / 'new.txt')!r}, "w"))
        attempt("write inside", lambda: open({str(ws / 'ok.txt')!r}, "w").write("x"))
        attempt("fork", os.fork)
        attempt("system", lambda: os.system("true"))
        attempt("connect", lambda: socket.create_connection(("127.0.0.1", {listener}), timeout=2))
        attempt("remove outside", lambda: os.remove({str(outside)!r}))
        import gc
        attempt("gc", gc.get_objects)
        import sqlite3
        attempt("sqlite outside", lambda: sqlite3.connect({str(tmp_path / 'x.db')!r}))
        attempt("sqlite inside", lambda: sqlite3.connect({str(ws / 'x.db')!r}).execute("create table t(x)"))
        attempt("sqlite memory", lambda: sqlite3.connect(":memory:"))
        attempt("sqlite shared memory", lambda: sqlite3.connect("file:m?mode=memory&cache=shared", uri=True))
        attempt("sqlite memory then rwc", lambda: sqlite3.connect(
            "file:{tmp_path / 'y.db'}?mode=memory&mode=rwc", uri=True))
        attempt("sqlite read-only world", lambda: sqlite3.connect("file:{ro_db}?mode=ro", uri=True))
        attempt("sqlite escaped path", lambda: sqlite3.connect("file:{tmp_path}/%78.db?mode=ro", uri=True))
        attempt("read world", lambda: open({str(world / 'specs.json')!r}).read())
        attempt("read ground truth", lambda: open({str(world / 'ground_truth' / 'answer.json')!r}).read())
        import importlib.util
        attempt("fresh _posixsubprocess",
                lambda: importlib.util.module_from_spec(importlib.util.find_spec("_posixsubprocess")))
        # The hook's own helpers, swapped by agent code: each swap is checked to have taken effect.
        class Sneaky:
            def __fspath__(self):
                return {str(outside)!r}
        import io
        attempt("read through __fspath__", lambda: print(io.FileIO(Sneaky()).read()))
        import builtins
        real_any, builtins.any = builtins.any, lambda it: True
        assert any([])
        # (os.open: its mode is None, so the hook's only use of any() is the read check)
        attempt("read with builtins.any swapped", lambda: print(os.read(os.open({str(outside)!r}, os.O_RDONLY), 99)))
        builtins.any = real_any
        import posixpath
        saved = posixpath._joinrealpath, posixpath.abspath
        posixpath._joinrealpath = lambda *a, **k: ({str(ws / 'x')!r}, True)
        posixpath.abspath = lambda p: {str(ws / 'x')!r}
        assert os.path.realpath("/etc") == {str(ws / 'x')!r}
        attempt("read with posixpath swapped", lambda: print(open({str(outside)!r}).read()))
        posixpath._joinrealpath, posixpath.abspath = saved
        attempt("open a directory outside", lambda: os.open({str(world)!r}, os.O_RDONLY))
        sys.stdout.flush()
    """)
    out = _run(code, SandboxLimits(network=False), str(ws)).stdout
    lines = dict(line.rsplit(" ", 1) for line in out.strip().splitlines())
    assert lines == {"read outside": "REFUSED", "write outside": "REFUSED", "write inside": "ALLOWED",
                     "fork": "REFUSED", "system": "REFUSED", "connect": "REFUSED", "remove outside": "REFUSED",
                     "gc": "REFUSED", "sqlite outside": "REFUSED", "sqlite inside": "ALLOWED",
                     "sqlite memory": "ALLOWED", "sqlite shared memory": "ALLOWED",
                     "sqlite memory then rwc": "REFUSED", "sqlite read-only world": "ALLOWED",
                     "sqlite escaped path": "REFUSED", "read world": "ALLOWED", "read ground truth": "REFUSED",
                     "fresh _posixsubprocess": "REFUSED", "read through __fspath__": "REFUSED",
                     "read with builtins.any swapped": "REFUSED", "read with posixpath swapped": "REFUSED",
                     "open a directory outside": "REFUSED"}, out
    assert "OUTSIDE-SECRET" not in out
    assert outside.exists() and not (tmp_path / "new.txt").exists()
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "y.db").exists()


def test_landlock_confines_c_level_writes_and_reads(tmp_path):
    """The worker's Landlock layers, with this interpreter: ``os.open`` has an audit event, but no hook is installed
    here, so only the kernel refuses (as it refuses C code reached through cffi in a worker)."""
    ws, world = tmp_path / "ws", tmp_path / "world"
    ws.mkdir()
    world.mkdir()
    (world / "specs.json").write_text("{}")
    (tmp_path / "outside.txt").write_text("OUTSIDE-SECRET")
    code = textwrap.dedent(f"""
        import importlib.util, os, sys
        spec = importlib.util.spec_from_file_location("w", {str(WORKER)!r})
        w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)
        failed = w._landlock([{str(ws)!r}, "/dev/null"], "write")
        if failed:
            print("UNAVAILABLE", failed); sys.exit(0)
        def attempt(name, path, flags):
            try:
                os.close(os.open(path, flags, 0o600)); print(name, "ALLOWED")
            except PermissionError:
                print(name, "REFUSED")
        create = os.O_WRONLY | os.O_CREAT
        attempt("write outside", {str(tmp_path / 'new.txt')!r}, create)
        attempt("write world", {str(world / 'specs.json')!r}, os.O_WRONLY)
        attempt("write inside", {str(ws / 'ok.txt')!r}, create)
        attempt("write /dev/null", "/dev/null", os.O_WRONLY)
        attempt("read outside before", {str(tmp_path / 'outside.txt')!r}, os.O_RDONLY)
        assert w._landlock([{str(world / 'specs.json')!r}, {str(ws)!r}] + w._SYSTEM_READS, "read") is None
        attempt("read outside", {str(tmp_path / 'outside.txt')!r}, os.O_RDONLY)
        attempt("list outside", {str(tmp_path)!r}, os.O_RDONLY)
        attempt("read world", {str(world / 'specs.json')!r}, os.O_RDONLY)
        attempt("read inside", {str(ws / 'ok.txt')!r}, os.O_RDONLY)
        print("ctypes dropped", "ctypes" not in sys.modules)
    """)
    out = _run(code, SandboxLimits(network=False), str(ws)).stdout
    if out.startswith("UNAVAILABLE"):
        # Only the kernel lacking Landlock skips; any other reason is a layer that failed to install.
        assert out.startswith("UNAVAILABLE Landlock is not available: "), out
        pytest.skip(f"no Landlock in this kernel: {out.strip()}")
    lines = dict(line.rsplit(" ", 1) for line in out.strip().splitlines())
    assert lines == {"write outside": "REFUSED", "write world": "REFUSED", "write inside": "ALLOWED",
                     "write /dev/null": "ALLOWED", "read outside before": "ALLOWED", "read outside": "REFUSED",
                     "list outside": "REFUSED", "read world": "ALLOWED", "read inside": "ALLOWED",
                     "ctypes dropped": "True"}, out
    assert not (tmp_path / "new.txt").exists() and (world / "specs.json").read_text() == "{}"
